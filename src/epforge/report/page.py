"""Assemble report.md and report.html, section by section in report order (fleet overview, coverage
matrix, configurations, history, probes, plots), and write them with the plots into the output directory."""

from __future__ import annotations

import html
import sys
from pathlib import Path
from urllib.parse import quote

from epforge.report.fleet import TEXT as FLEET_TEXT
from epforge.report.fleet import gateway_table, server_table, throughput_table
from epforge.report.models import TEXT as MODELS_TEXT
from epforge.report.models import model_table
from epforge.report.overview import (
    MATRIX_TEXT,
    MATRIX_TITLE,
    OVERVIEW_COLUMNS,
    coverage_matrix,
    overview_rows,
)
from epforge.report.plots import all_plots
from epforge.report.tables import config_table, configuration_rows, history_table, probe_tables
from epforge.report.to_html import CSS, html_table, matrix_html
from epforge.report.to_markdown import matrix_md, md_fence, md_line, md_table, md_text
from epforge.report.tuning import tuning_sections

NO_FACTS_TEXT = (
    "No epforge provisioning, model, gateway, benchmark, sweep, tuning or probe facts were found on these "
    "hosts."
)


def _sections(hosts: dict[str, dict], rows: list[dict], overview: list[dict]) -> list[tuple]:
    """(heading, text, [(head, body), ...]) of each table section there is data for, in report order."""
    sections = []
    if overview:
        sections.append(
            (
                "Fleet overview",
                "What provisioning did on each host (epforge_preflight, _cuda_toolkit, _ml_env, "
                "_cuda_extensions, _deepep, _flashinfer, _sglang and _steps facts).",
                [([t for _, t in OVERVIEW_COLUMNS], [[r[k] for k, _ in OVERVIEW_COLUMNS] for r in overview])],
            )
        )
    models = model_table(hosts)
    if models[1]:
        sections.append(("Models", MODELS_TEXT, [models]))
    if rows:
        sections.append(
            (
                "Configurations",
                "Outcome and figures per configuration (the sweep's outcomes where a "
                "sweep ran, else the last benchmark of each label).",
                [config_table(rows)],
            )
        )
    fleet_tables = [t for t in (server_table(hosts), gateway_table(hosts), throughput_table(hosts)) if t[1]]
    if fleet_tables:
        sections.append(("Fleets", FLEET_TEXT, fleet_tables))
    history = history_table(hosts)
    if history[1]:
        sections.append(
            ("Benchmark history", "The most recent entries of each host's epforge_bench history.", [history])
        )
    for probe_title, head, body, est_head, est_body in probe_tables(hosts):
        sections.append(
            (
                f"Collective probe: {probe_title}",
                "Mean latency per call; the estimate multiplies "
                "by the model's layer counts (TP: allreduces; EP: all-to-alls + attention allreduces).",
                [(head, body), (est_head, est_body)],
            )
        )
    return sections


def _page_start(title: str, generated: str, hosts: dict[str, dict]) -> tuple[list[str], list[str]]:
    """The Markdown and HTML lines before the first section."""
    md = [f"# {md_text(title)}", ""]
    html_parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
    ]
    if generated:
        md += [
            md_line(
                f"Generated {generated} from the local facts of {len(hosts)} host(s): {', '.join(hosts)}."
            ),
            "",
        ]
        html_parts.append(
            f"<p>Generated {html.escape(generated)} from the local facts of {len(hosts)} host(s): "
            f"{html.escape(', '.join(hosts))}.</p>"
        )
    return md, html_parts


def _add_section(md: list[str], html_parts: list[str], heading: str, text: str, tables: list) -> None:
    md += [f"## {md_text(heading)}", "", md_line(text), ""]
    html_parts.append(f"<h2>{html.escape(heading)}</h2><p>{html.escape(text)}</p>")
    for head, body in tables:
        md += [md_table(head, body), ""]
        table = html_table(head, body)
        if heading == "Fleet overview":
            table = table.replace("<table>", "<table class='overview'>", 1)
        html_parts.append(table)


def _add_paste_block(md: list[str], html_parts: list[str], block: str) -> None:
    """The tuning winner's settings, to paste into an inventory."""
    if not block:
        return
    intro = "The winner's settings, to paste into the inventory:"
    fence = md_fence(block)
    md += [intro, "", f"{fence}yaml", block, fence, ""]
    html_parts.append(f"<p>{html.escape(intro)}</p><pre>{html.escape(block)}</pre>")


def _add_matrix(md: list[str], html_parts: list[str], matrix: tuple) -> None:
    md += [f"## {MATRIX_TITLE}", "", MATRIX_TEXT, "", matrix_md(*matrix), ""]
    html_parts.append(f"<h2>{html.escape(MATRIX_TITLE)}</h2><p>{html.escape(MATRIX_TEXT)}</p>")
    html_parts.append(matrix_html(*matrix))


def _add_plots(md: list[str], html_parts: list[str], images: list[tuple[str, Path]]) -> None:
    md += ["## Plots", ""]
    html_parts.append("<h2>Plots</h2>")
    for caption, path in images:
        # the file name as a URL (plots.py names a host's plot with read.host_file_name: `%` stays literal)
        md += [f"![{md_text(caption)}]({quote(path.name)})", ""]
        html_parts.append(
            f"<h3>{html.escape(caption)}</h3><img src='{html.escape(quote(path.name))}' "
            f"alt='{html.escape(caption)}'>"
        )


SKIPPED_TEXT = "These facts were left out of this report, each with why:"


def _tables(hosts: dict[str, dict]) -> tuple:
    """Everything the page shows but the plots: (rows, overview, matrix, sections, tunings)."""
    rows = configuration_rows(hosts)
    overview = overview_rows(hosts)
    return rows, overview, coverage_matrix(hosts), _sections(hosts, rows, overview), tuning_sections(hosts)


def usable_facts(hosts: dict[str, dict], skipped: list[str]) -> dict[str, dict]:
    """hosts without the facts the report cannot show: when the whole set renders, all of it (one pass);
    else the facts are added one by one and a fact whose addition makes a table fail is left out, named in
    skipped with the error, so one malformed fact never takes the rest of the report with it."""
    try:
        _tables(hosts)
    except Exception:  # a fact's shape: found and named below
        failed = True
    else:
        failed = False
    if not failed:
        return hosts
    kept: dict[str, dict] = {}
    for host, facts in hosts.items():
        for name, fact in facts.items():
            trial = {**kept, host: {**kept.get(host, {}), name: fact}}
            try:
                _tables(trial)
            except Exception as exc:  # any error a fact's content causes: skip and name it
                skipped.append(
                    f"skipped {host}: fact epforge_{name}: cannot be shown ({type(exc).__name__}: {exc})"
                )
                continue
            kept = trial
    return kept


def _add_skipped(md: list[str], html_parts: list[str], skipped: list[str]) -> None:
    md += ["## Skipped facts", "", SKIPPED_TEXT, "", *[f"- {md_text(line)}" for line in skipped], ""]
    items = "".join(f"<li>{html.escape(line)}</li>" for line in skipped)
    html_parts.append(f"<h2>Skipped facts</h2><p>{html.escape(SKIPPED_TEXT)}</p><ul>{items}</ul>")


def render(
    hosts: dict[str, dict],
    out_dir: str | Path,
    title: str = "epforge report",
    generated: str = "",
    skipped: list[str] | None = None,
) -> dict:
    """Write report.md, report.html and PNG plots into out_dir; return what was written. skipped: lines naming
    facts left out while reading (read.py); a fact that cannot be shown is added there too, printed on
    stderr and listed in a last section of the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    skipped = list(skipped or [])
    known = len(skipped)
    hosts = usable_facts(hosts, skipped)
    rows, overview, matrix, sections, tunings = _tables(hosts)
    images = all_plots(hosts, rows, out, skipped)
    for line in skipped[known:]:
        print(line, file=sys.stderr)
    md, html_parts = _page_start(title, generated, hosts)
    for index, section in enumerate(sections):
        _add_section(md, html_parts, *section)
        # The coverage matrix reads with the fleet overview, so it follows that first section.
        if index == 0 and overview and matrix[1]:
            _add_matrix(md, html_parts, matrix)
    for heading, text, tables, block in tunings:
        _add_section(md, html_parts, heading, text, tables)
        _add_paste_block(md, html_parts, block)
    if images:
        _add_plots(md, html_parts, images)
    if not sections and not tunings:
        md += [NO_FACTS_TEXT, ""]
        html_parts.append(f"<p>{NO_FACTS_TEXT}</p>")
    if skipped:
        _add_skipped(md, html_parts, skipped)
    html_parts.append("</body></html>")
    (out / "report.md").write_text("\n".join(md))
    (out / "report.html").write_text("\n".join(html_parts))
    return {
        "markdown": str(out / "report.md"),
        "html": str(out / "report.html"),
        "images": [str(p) for _, p in images],
        "configurations": len(rows),
        "tunings": [heading for heading, _, _, _ in tunings],
        "overview_hosts": [r["host"] for r in overview],
        "hosts": list(hosts),
        "skipped": skipped,
    }
