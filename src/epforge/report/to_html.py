"""HTML output: tables (and the coverage matrix) as HTML tables, escaped, and the page's stylesheet."""

from __future__ import annotations

import html


def html_table(head: list[str], body: list[list[str]]) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for row in body:
        cls = ""
        if len(row) > 2 and row[2] in ("failed", "refused", "ok", "invalid"):
            cls = f' class="{row[2]}"'
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


CSS = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}tr.failed td{background:#fdecea}
tr.refused td{background:#fff3e0}tr.invalid td{background:#fffde7}tr.ok td:nth-child(3){color:#2e7d32}
img{max-width:100%;border:1px solid #ddd}td.cov-ok{background:#e8f5e9}td.cov-missing{background:#ffcdd2}
td.cov-jit{background:#e3f2fd}td.cov-absent,td.cov-no_binaries,td.cov-unowned{background:#eeeeee;color:#555}
td.cov-would_repair{background:#fff3e0}table.overview td{vertical-align:top;max-width:260px}"""


def matrix_html(components: list[str], rows: list[dict]) -> str:
    out = [
        "<table class='coverage'>",
        "<tr><th>host</th><th>archs</th>"
        + "".join(f"<th>{html.escape(c)}</th>" for c in components)
        + "<th>deep_ep owner</th><th>features without kernels</th></tr>",
    ]
    for r in rows:
        cells = "".join(
            f"<td class='cov-{html.escape(r['cells'][c]['status'])}' data-component='{html.escape(c)}'>"
            f"{html.escape(r['cells'][c]['text'])}</td>"
            for c in components
        )
        out.append(
            f"<tr data-host='{html.escape(r['host'])}'><td>{html.escape(r['host'])}</td>"
            f"<td>{html.escape(r['archs'])}</td>{cells}<td>{html.escape(r['deep_ep'])}</td>"
            f"<td>{html.escape(r['lacking'])}</td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)
