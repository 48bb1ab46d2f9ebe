"""The tuner's decision in `epforge report`: the decision table, the block to paste, the Pareto plot - from
the fact a real tune run on the stand-in wrote (tests/fixtures/report-tuning/README.md)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import yaml

from epforge.report.tuning import decision_rows, pareto_front, paste_block

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "report-tuning"
TUNING = json.loads((FIXTURE / "standin" / "epforge_tuning.fact").read_text())


def test_the_decision_table_ranks_the_winner_first_and_says_why_for_the_rest():
    rows = {r[0]: r for r in decision_rows(TUNING)}
    assert decision_rows(TUNING)[0][:2] == ["cold-heavy", "WINNER"]
    assert rows["fastest-bad-ttft"][1] == "stopped_early" and "ttft_p99_ms" in rows["fastest-bad-ttft"][8]
    assert rows["steady-slower"][1] == "stopped_early" and "below the incumbent" in rows["steady-slower"][8]
    assert rows["crashes"][1] == "failed" and rows["crashes"][8].startswith("deep_ep_missing")
    assert rows["nccl-tree"][1] == "refused" and "nccl_algo_tree_with_cuda_graphs" in rows["nccl-tree"][8]
    # the fastest by throughput is not the winner: it broke the TTFT constraint
    assert float(rows["fastest-bad-ttft"][3]) > float(rows["cold-heavy"][3])


def test_the_block_to_paste_is_the_winners_settings_under_epforge_server():
    block = yaml.safe_load(paste_block(TUNING))
    assert block == {"epforge_server": TUNING["winner_settings"]}
    assert block["epforge_server"]["env"]["SGLANG_STANDIN_COLD_FACTOR"] == "3"
    assert paste_block(dict(TUNING, winner=None)) == ""


def test_the_pareto_front_keeps_the_points_nothing_beats_on_both_axes():
    points = [(10, 100, "a"), (20, 150, "b"), (15, 90, "dominated"), (30, 140, "dominated too"), (5, 50, "c")]
    assert [p[2] for p in pareto_front(points)] == ["c", "a", "b"]


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_epforge_report_renders_the_tuning_section_and_its_pareto_plot(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "epforge.cli", "report", "--from", str(FIXTURE), "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (out / "report.md").read_text()
    assert "## Tuning on standin" in md and "| cold-heavy | WINNER |" in md
    assert "```yaml\nepforge_server:" in md and "SGLANG_STANDIN_COLD_FACTOR" in md
    assert "winner serving" in md
    html = (out / "report.html").read_text()
    assert "<h2>Tuning on standin</h2>" in html and "<pre>epforge_server:" in html
    width, height = png_size(out / "tuning-standin.png")
    assert width > 400 and height > 600
    assert "tuning-standin.png" in md and "tuning-standin.png" in proc.stdout
