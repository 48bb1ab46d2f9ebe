"""The tuner's decision in `epforge report`: the decision table, the block to paste, the Pareto plot - from
the fact a real tune run on the stand-in wrote (tests/fixtures/report-tuning/README.md)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import yaml
from test_report import chromium

from epforge.report.tuning import (
    DECISION_HEAD,
    decision_rows,
    front_of,
    pareto_front,
    paste_block,
    verdict_text,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "report-tuning"
TUNING = json.loads((FIXTURE / "standin" / "epforge_tuning.fact").read_text())
TIE_FIXTURE = ROOT / "tests" / "fixtures" / "report-tuning-tie"
TIE = json.loads((TIE_FIXTURE / "standin-tie" / "epforge_tuning.fact").read_text())


WHY = DECISION_HEAD.index("why")
TOKS = DECISION_HEAD.index("output tok/s")


def test_the_decision_table_ranks_the_winner_first_and_says_why_for_the_rest():
    rows = {r[0]: r for r in decision_rows(TUNING)}
    assert decision_rows(TUNING)[0][:2] == ["cold-heavy", "WINNER"]
    assert rows["fastest-bad-ttft"][1] == "stopped_early" and "ttft_p99_ms" in rows["fastest-bad-ttft"][WHY]
    assert rows["steady-slower"][1] == "stopped_early" and "below the incumbent" in rows["steady-slower"][WHY]
    assert rows["crashes"][1] == "failed" and rows["crashes"][WHY].startswith("deep_ep_missing")
    assert rows["nccl-tree"][1] == "refused" and "nccl_algo_tree_with_cuda_graphs" in rows["nccl-tree"][WHY]
    # the fastest by throughput is not the winner: it broke the TTFT constraint
    assert float(rows["fastest-bad-ttft"][TOKS]) > float(rows["cold-heavy"][TOKS])
    assert all(len(row) == len(DECISION_HEAD) for row in rows.values())
    # a long reason is cut at a word and says so (the whole reason stays in the fact)
    crash = rows["crashes"][WHY]
    assert len(crash) <= 200 and crash.endswith(" ...")
    assert TUNING["results"][-1]["reason"].startswith(crash.removesuffix(" ...") + " ")


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


def test_the_pareto_front_goes_through_valid_candidates_only():
    """fastest-bad-ttft has the most tok/s at the lowest TPOT, and broke the TTFT constraint: no choice."""
    for key in ("ttft_p99_ms", "tpot_p99_ms"):
        names = [name for _x, _y, name in front_of(TUNING, 4, key)]
        assert names == ["cold-heavy"], (key, names)
    assert "fastest-bad-ttft" not in TUNING["ranking"]["valid"]


def test_a_tie_its_rule_spreads_and_re_measures_are_in_the_decision_table():
    """The fact of a seeded tune on the stand-in (tests/fixtures/report-tuning-tie/README.md)."""
    rows = {r[0]: dict(zip(DECISION_HEAD, r, strict=True)) for r in decision_rows(TIE)}
    assert rows["twin"]["outcome"] == "WINNER (tie, by rule)" and rows["twin-extra"]["outcome"] == "tie"
    for name in ("twin", "twin-extra"):
        assert rows[name]["spread"] == "+-10 %" and rows[name]["launches"] == "2 (6 windows)"
        assert rows[name]["why"].startswith("relaunched 1x (re-measure)")
    assert "not told apart from twin" in rows["twin-extra"]["why"]
    text = verdict_text(TIE)
    assert text.startswith("TIE: twin-extra, twin were not told apart after 2 relaunch(es)")
    assert "fewer settings away from the request" in text


def test_the_tuning_report_with_a_tie_renders_and_the_browser_paints_it(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "epforge.cli", "report", "--from", str(TIE_FIXTURE), "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (out / "report.md").read_text()
    assert "TIE: twin-extra, twin were not told apart" in md and "| twin | WINNER (tie, by rule) |" in md
    width, height = png_size(out / "tuning-standin-tie.png")
    assert width >= 700 and height >= 800
    shot = tmp_path / "tuning.png"
    page = (out / "report.html").as_uri()
    drawn = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,2000", page)
    assert drawn.returncode == 0 and shot.exists(), drawn.stderr[-2000:]
    assert png_size(shot) == (1400, 2000)


def test_acceptance_and_prefix_reuse_stand_beside_the_throughput_they_explain():
    """Issue 39: a window's accept_length and cached_token_share in the decision table (blank when the
    candidate had none: no speculation, an older fact)."""
    tuning = json.loads(json.dumps(TUNING))
    winner = next(r for r in tuning["results"] if r["name"] == tuning["winner"])
    concurrency = str(tuning["objective"]["concurrency"])
    winner["steady"][concurrency].update(accept_length=2.3, cached_token_share=0.5)
    for stats in (tuning.get("stats") or {}).values():
        (stats.get("figures") or {}).pop("accept_length", None)
    rows = {r[0]: r for r in decision_rows(tuning)}
    accept, cached = DECISION_HEAD.index("accept len"), DECISION_HEAD.index("cached %")
    assert (rows[tuning["winner"]][accept], rows[tuning["winner"]][cached]) == ("2.30", "50")
    assert rows["steady-slower"][cached] == "-" and rows["nccl-tree"][accept] == ""
    # where the driver kept each request's acceptance: the median and the 10th-90th percentiles
    winner["steady"][concurrency].update(accept_length_p10=1.4, accept_length_p50=2.25, accept_length_p90=3.1)
    rows = {r[0]: r for r in decision_rows(tuning)}
    assert rows[tuning["winner"]][accept] == "2.25 (1.40-3.10)"
