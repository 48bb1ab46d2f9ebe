"""Issue 35 (7): `epforge report` against facts that are not what it expects. A malformed fact (a JSON list,
nested very deep, not JSON, a link to a file that is not JSON, an object of the wrong shape) is skipped and
named while the rest is reported; an inventory host named `../../x` writes nothing outside the output
directory; the tuning section's text is escaped in report.md as it is in report.html (judged by a CommonMark
parser, markdown-it-py). The real CLI, real files, a real ansible-runner collection."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "fixtures" / "bench_serving" / "report-facts" / "h200-x2" / "epforge_collective.fact"
SERVER = {
    "state": "started",
    "name": "sglang-server",
    "url": "http://127.0.0.1:30000",
    "group": {},
    "settings": {"model_path": "/models/small", "tp_size": 8},
}


def epforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "epforge.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    )


def test_a_malformed_fact_is_skipped_and_named_and_the_rest_is_reported(tmp_path):
    facts = tmp_path / "facts"
    (facts / "good-host").mkdir(parents=True)
    (facts / "good-host" / "epforge_sglang_server.fact").write_text(json.dumps(SERVER))
    bad = facts / "bad-host"
    bad.mkdir()
    (bad / "epforge_listed.fact").write_text("[1, 2]\n")
    (bad / "epforge_deep.fact").write_text('{"a":' * 100000 + "1" + "}" * 100000)
    (bad / "epforge_garbage.fact").write_text("not json at all\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\n")
    (bad / "epforge_linked.fact").symlink_to(notes)
    (bad / "epforge_bench.fact").write_text(json.dumps({"history": "not a list", "last": 5}))
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(facts), "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected = {
        "epforge_listed.fact": "a JSON list, not an object",
        "epforge_deep.fact": "nested more than 64 levels deep",
        "epforge_garbage.fact": "not JSON (Expecting value",
        "epforge_linked.fact": f"(a link to {notes}): not JSON",
    }
    md = (out / "report.md").read_text()
    for name, why in expected.items():
        line = next((x for x in proc.stderr.splitlines() if f"bad-host/{name}" in x), "")
        assert line.startswith(f"skipped {bad / name}") and why in line, (name, proc.stderr[-3000:])
    assert "skipped bad-host: fact epforge_bench: cannot be shown (AttributeError" in proc.stderr
    assert "## Skipped facts" in md and md.count("\n- skipped ") == 5, md
    # the good host is reported whole
    assert "| sglang-server | good-host | http://127.0.0.1:30000 | 8 | - | - | /models/small |" in md


def test_a_host_named_dot_dot_writes_nothing_outside_the_output_directory(tmp_path):
    """`epforge report -i` collects from an inventory host named ../../x (local connection); its saved facts
    and its plot stay inside -o, and `--from` the saved facts gives the host back by its name."""
    facts_dir = tmp_path / "facts.d"
    facts_dir.mkdir()
    (facts_dir / "epforge_collective.fact").write_text(PROBE.read_text())
    inventory = tmp_path / "inventory.yml"
    host_vars = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"../../x": host_vars}}}))
    out = tmp_path / "a" / "b" / "out"
    before = {p for p in tmp_path.rglob("*")}
    proc = epforge("report", "-i", str(inventory), "-o", str(out), "-e", f"epforge_facts_dir={facts_dir}")
    written = {p for p in tmp_path.rglob("*")} - before
    outside = sorted(str(p) for p in written if out != p and out not in p.parents and p not in out.parents)
    assert not outside, outside
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    saved = out / "facts" / "%2E.%2F..%2Fx" / "epforge_collective.fact"
    assert json.loads(saved.read_text()) == json.loads(PROBE.read_text())
    plot = out / "collective-%2E.%2F..%2Fx.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "](collective-%252E.%252F..%252Fx.png)" in md  # the link names the file, % as %25
    again = tmp_path / "a" / "b" / "again"
    proc = epforge("report", "--from", str(out / "facts"), "-o", str(again))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "host(s): ../../x." in (again / "report.md").read_text()


HOSTILE = (
    "ok\n# Owned heading\n<img src=http://evil.example/pixel.png> ![remote](http://evil.example/i.png) "
    "[click](javascript:alert(1)) <javascript:alert(2)> **bold** `code` ~~gone~~ \\| cell"
)


def test_the_tuning_section_of_report_md_is_text_as_in_report_html(tmp_path):
    host = tmp_path / "facts" / "tuned"
    host.mkdir(parents=True)
    tuning = {
        "decision": HOSTILE,
        "objective": {"goal": "max", "metric": "- [x](javascript:alert(3))", "concurrency": 4},
        "results": [{"name": HOSTILE, "status": "ok", "reason": HOSTILE}],
        "ranking": {"valid": [HOSTILE]},
        "winner": HOSTILE,
        "winner_settings": {"tp_size": 2, "served_model_name": "```\n# out of the fence"},
    }
    (host / "epforge_tuning.fact").write_text(json.dumps(tuning))
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(host.parent), "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "report.md").read_text()
    rendered = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    headings = re.findall(r"<h(\d)>(.*?)</h\1>", rendered)
    assert headings == [("1", "epforge report"), ("2", "Tuning on tuned")], headings
    for markup in ("<img", "<a ", "<strong", "<em", "<s>", "<del", "<ul", "<ol", "<li", "<script"):
        assert markup not in rendered, (markup, rendered)
    assert rendered.count("<code") == 1, rendered  # the block to paste, nothing else
    # the text is all there, as text: what report.html shows
    assert "# Owned heading &lt;img src=http://evil.example/pixel.png&gt;" in rendered
    text = "[click](javascript:alert(1)) &lt;javascript:alert(2)&gt; **bold** `code` ~~gone~~ \\| cell"
    assert text in rendered
    # the block to paste is one code block holding the whole YAML
    blocks = re.findall(r"<pre><code class=\"language-yaml\">(.*?)</code></pre>", rendered, re.S)
    assert len(blocks) == 1 and "# out of the fence" in blocks[0] and "tp_size: 2" in blocks[0], rendered
