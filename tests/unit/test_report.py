"""epforge CLI: `epforge report` from recorded facts (a real sweep's facts captured on this machine with the
stand-in, and the real 2x H200 collective probe fact), `epforge report` collecting through ansible-runner, and
`epforge run` streaming progress and reading results from events and set_stats."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "tests" / "fixtures" / "bench_serving" / "report-facts"
EPFORGE = [sys.executable, "-m", "epforge.cli"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def epforge(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*EPFORGE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )


def png_is_a_picture(path: Path, min_w: int = 400, min_h: int = 250) -> None:
    import matplotlib.image as mpimg  # noqa: PLC0415

    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = mpimg.imread(str(path))
    height, width = pixels.shape[:2]
    assert width >= min_w and height >= min_h
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def test_report_from_recorded_facts(tmp_path):
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(FACTS), "-o", str(out), "--title", "sweep on the stand-in")
    assert proc.returncode == 0, proc.stderr
    sweep = json.loads((FACTS / "standin-host" / "epforge_sweep.fact").read_text())["configurations"]
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for outcome in sweep:
        assert f"| standin-host | {outcome['name']} | {outcome['outcome']} |" in md
        assert outcome["name"] in html
        if outcome["outcome"] == "ok":
            assert f"{outcome['figures']['output_throughput']:.1f}" in md
    assert "| refused |" in md and "| failed |" in md
    assert "nccl_algo_tree_with_cuda_graphs" in md and "deep_ep_missing" in md
    # the H200 probe: its table and the TP/EP estimate
    assert "2x NVIDIA H200, NCCL 2.28.9" in md
    probe = json.loads((FACTS / "h200-x2" / "epforge_collective.fact").read_text())
    graph1 = next(
        r
        for r in probe["table"]
        if (r["variant"], r["op"], r["mode"], r["tokens"]) == ("default", "allreduce", "graph", 1)
    )
    assert f"| default | allreduce | graph | {graph1['mean_us']:.1f} |" in md
    assert html.count("<table>") >= 4 and 'class="refused"' in html and 'class="failed"' in html
    images = {p.name for p in out.glob("*.png")}
    assert {"throughput.png", "latency.png", "collective-h200-x2.png"} <= images
    for name in images:
        assert f"]({name})" in md and f"src='{name}'" in html
        png_is_a_picture(out / name)


def test_report_shows_invalid_runs_as_invalid(tmp_path):
    """A history whose last run is invalid (the shape sglang_bench records: status invalid, the figures,
    the reasons) and a sweep outcome marked invalid: both shown as invalid, with why, never as ok."""
    bench = json.loads((FACTS / "standin-host" / "epforge_bench.fact").read_text())
    good = next(e for e in bench["history"] if e["status"] == "ok")
    reason = "generated 32 output tokens, fewer than the 128 asked for (num_prompts 8 x output_len 16)"
    invalid = {
        **good,
        "id": "short-run",
        "label": "short-gens",
        "status": "invalid",
        "invalid_reasons": [reason],
        "figures": {**good["figures"], "total_output_tokens": 32, "output_throughput": 261.2},
    }
    host = tmp_path / "facts" / "bench-host"
    host.mkdir(parents=True)
    (host / "epforge_bench.fact").write_text(
        json.dumps({**bench, "history": [good, invalid], "last": invalid})
    )
    sweep_host = tmp_path / "facts" / "sweep-host"
    sweep_host.mkdir()
    (sweep_host / "epforge_sweep.fact").write_text(
        json.dumps(
            {
                "schema": 1,
                "configurations": [
                    {
                        "name": "ep2-short",
                        "outcome": "invalid",
                        "reason": reason,
                        "figures": invalid["figures"],
                    }
                ],
            }
        )
    )
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(tmp_path / "facts"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert "| bench-host | short-gens | invalid | 261.2 |" in md
    assert "| sweep-host | ep2-short | invalid | 261.2 |" in md
    assert md.count(reason) >= 3  # both configuration rows and the history row say why
    assert f"invalid ({reason})" in md
    assert 'class="invalid"' in html


def test_report_collects_facts_through_ansible_runner(tmp_path):
    facts_dir = tmp_path / "facts.d"
    shutil.copytree(FACTS / "standin-host", facts_dir)
    out = tmp_path / "collected"
    proc = epforge("report", "-o", str(out), "-e", f"epforge_facts_dir={facts_dir}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TASK Read the local facts" in proc.stderr and "ok: localhost" in proc.stderr
    saved = out / "facts" / "localhost"
    for name in ("epforge_bench.fact", "epforge_sweep.fact"):
        assert json.loads((saved / name).read_text()) == json.loads((facts_dir / name).read_text())
    assert (out / "report.html").exists() and (out / "throughput.png").exists()


def test_report_without_facts_fails_plainly(tmp_path):
    (tmp_path / "empty" / "host").mkdir(parents=True)
    proc = epforge("report", "--from", str(tmp_path / "empty"), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1 and "no epforge facts found" in proc.stderr
    missing = epforge("report", "--from", str(tmp_path / "nope"), "-o", str(tmp_path / "out"))
    assert missing.returncode == 2 and "not a directory of saved facts" in missing.stderr


RUN_PLAYBOOK = """---
- name: A run that sets facts and stats
  hosts: all
  gather_facts: false
  tasks:
    - name: Pretend a benchmark ran
      ansible.builtin.set_fact:
        epforge_bench_result:
          status: ok
          label: tp-baseline
          figures: {output_throughput: 1234.5, ttft_median_ms: 12.0, tpot_median_ms: 3.0}
    - name: Hand sweep outcomes to the controller
      ansible.builtin.set_stats:
        data:
          epforge_sweep:
            localhost:
              - {name: tp-baseline, outcome: ok, figures: {output_throughput: 1234.5}}
              - {name: tp-nccl-tree, outcome: refused, class: nccl_algo_tree_with_cuda_graphs, reason: Tree}
        per_host: false
        aggregate: true
    - name: A failure that is ignored
      ansible.builtin.command: /bin/false
      changed_when: false
      ignore_errors: true
"""


def test_run_streams_progress_and_reads_events(tmp_path):
    playbook = tmp_path / "run.yml"
    playbook.write_text(RUN_PLAYBOOK)
    proc = epforge("run", str(playbook))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "PLAY A run that sets facts and stats" in out
    assert "TASK Pretend a benchmark ran" in out and "ok: localhost" in out
    assert "failed (ignored): localhost" in out
    assert "benchmark tp-baseline: 1234.5 output tok/s" in out  # from the runner_on_ok event's ansible_facts
    assert "tp-nccl-tree: refused - nccl_algo_tree_with_cuda_graphs" in out  # from set_stats
    bad = epforge("run", str(tmp_path / "missing.yml"))
    assert bad.returncode == 2 and "not found" in bad.stderr


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["a=1", "b=x", 'c={"k": [1]}'], {"a": 1, "b": "x", "c": {"k": [1]}}),
    ],
)
def test_extravars_parsing(items, expected, tmp_path):
    from epforge.runner import parse_extravars  # noqa: PLC0415

    assert parse_extravars(items) == expected
    yml = tmp_path / "v.yml"
    yml.write_text("epforge_server:\n  tp_size: 8\n")
    assert parse_extravars([f"@{yml}"]) == {"epforge_server": {"tp_size": 8}}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_extravars(["novalue"])


# Steps as the roles record them (details shaped like a run of site.yml on this GPU-less machine; the folded
# YAML of the roles leaves newlines and runs of spaces that the summary play collapses).
STEPS = [
    {"step": "preflight", "status": "done", "detail": "Host fits stack cu130 (6 checks passed);\n no GPU"},
    {"step": "deepep", "status": "skipped", "detail": "source unreachable:  github.com   not reachable"},
    {"step": "sglang_server", "status": "skipped", "detail": "no GPU on this host"},
]


def test_run_ends_with_the_step_summary_ansible_playbook_prints(tmp_path):
    """`epforge run` on the real playbooks/summary.yml ends with the same per-step lines as ansible-playbook
    (not with the loop's closing "All items completed")."""
    steps = json.dumps(STEPS)
    facts_dir = tmp_path / "facts.d"
    proc = epforge(
        "run", "playbooks/summary.yml", "-e", f"epforge_steps={steps}", "-e", f"epforge_facts_dir={facts_dir}"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the steps fact for `epforge report`: status per step, the reason for those not done
    recorded = json.loads((facts_dir / "epforge_steps.fact").read_text())["steps"]
    assert [(s["step"], s["status"], s["reason"]) for s in recorded] == [
        ("preflight", "done", ""),
        ("deepep", "skipped", "source unreachable: github.com not reachable"),
        ("sglang_server", "skipped", "no GPU on this host"),
    ]
    playbook = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "inventory/local.yml",
            "playbooks/summary.yml",
            "-e",
            json.dumps({"epforge_steps": STEPS, "epforge_facts_dir": str(facts_dir)}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(Path.home()),
            "ANSIBLE_NOCOLOR": "1",
        },
    )
    assert playbook.returncode == 0, playbook.stdout + playbook.stderr
    # ansible.cfg prints results as YAML: "ok: [localhost] => (item=STEP) => " then "    msg: LINE"
    printed = [yaml.safe_load(m) for m in re.findall(r"^\s+msg: (.*)$", playbook.stdout, re.M)]
    assert printed == [
        "DONE  preflight: Host fits stack cu130 (6 checks passed); no GPU",
        "SKIPPED  deepep: source unreachable: github.com not reachable",
        "SKIPPED  sglang_server: no GPU on this host",
    ]
    lines = proc.stdout.rstrip("\n").splitlines()
    assert lines[-4:] == ["steps on localhost:", *[f"  {line}" for line in printed]]
    assert "All items completed" not in proc.stdout


# Facts a real provisioning run wrote (issue 10's acceptance on the CPU machine, docs/final-env.md: full
# SGLang 0.5.23 after a DeepEP stand-in build for 12.0; final_env repaired deep_ep), plus the stand-in
# sweep host.
FLEET = ROOT / "tests" / "fixtures" / "report-fleet"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """Debian's chromium (scripts/bootstrap.sh installs it), headless with a fresh profile."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium is not installed: run scripts/bootstrap.sh (apt package chromium)"
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run(
        [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_report_shows_the_fleet_overview_and_coverage_matrix_in_a_real_browser(tmp_path):
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(FLEET), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "## Fleet overview" in md and "## Final env: arch coverage (host x component)" in md
    assert "No epforge" not in md
    final = json.loads((FLEET / "cpu-i10fe" / "epforge_final_env.fact").read_text())

    dom = chromium(tmp_path, "--dump-dom", (out / "report.html").as_uri())
    assert dom.returncode == 0 and '<table class="overview">' in dom.stdout, dom.stderr[-2000:]

    class Cells(HTMLParser):
        """The text of every td/th, row by row, and the class and data-component of coverage cells."""

        def __init__(self):
            super().__init__()
            self.rows, self.coverage, self._cell, self._attrs = [], [], None, {}

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th"):
                self._cell, self._attrs = [], dict(attrs)

        def handle_data(self, data):
            if self._cell is not None:
                self._cell.append(data)

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self._cell is not None:
                text = "".join(self._cell)
                self.rows[-1].append(text)
                if "data-component" in self._attrs:
                    self.coverage.append((self._attrs["data-component"], self._attrs.get("class"), text))
                self._cell = None

    parsed = Cells()
    parsed.feed(dom.stdout)
    overview = next(r for r in parsed.rows if r and r[0] == "cpu-i10fe" and len(r) == 12)
    assert overview[1].startswith("no GPU (nvidia-smi not found") and overview[2] == "-"  # no GPU: no fabric
    assert overview[3].startswith("cu130 (CUDA 13.0") and overview[5].startswith("2.14.1+cu130")
    assert "deep_ep: sm_120" in overview[6] and "epforge_canary: sm_120" in overview[6]
    assert "sglang_server: skipped" in overview[11]
    # one matrix cell per component, as the fact says
    cells = {component: (cls, text) for component, cls, text in parsed.coverage}
    assert set(cells) == set(final["components"])
    for name, comp in final["components"].items():
        cls, text = cells[name]
        expected = {"ok": "cov-ok", "missing_archs": "cov-missing", "jit": "cov-jit"}.get(
            comp["status"], f"cov-{comp['status']}"
        )
        assert cls == expected, (name, cls, comp["status"])
        assert (comp["distribution"] or "not installed") in text
    assert cells["deep_ep"][0] == "cov-ok" and "SASS sm_120" in cells["deep_ep"][1]
    flash_ops = cells["sgl_kernel.flash_ops"]
    assert flash_ops[0] == "cov-missing" and "lacks 12.0" in flash_ops[1]

    # what the browser paints: the page, the red of a missing cell and the green of a covered one
    shot = tmp_path / "report.png"
    page = (out / "report.html").as_uri()
    drawn = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1600,1400", page)
    assert drawn.returncode == 0 and shot.exists(), drawn.stderr[-2000:]
    png_is_a_picture(shot, 1600, 1400)
    pixels = (mpimg.imread(str(shot))[..., :3] * 255).round()

    def painted(rgb: tuple[int, int, int]) -> int:
        return int((abs(pixels - rgb).max(axis=-1) <= 2).sum())

    assert painted((0xFF, 0xCD, 0xD2)) > 500  # td.cov-missing
    assert painted((0xE8, 0xF5, 0xE9)) > 500  # td.cov-ok


def test_markup_in_a_fact_is_text_in_report_md(tmp_path):
    """Issue 'nothing let in' (12): a fact's text (a failure reason from a server log, a configuration name)
    is shown as text in report.md, never as markup: no HTML tag, link or table cell comes out of it."""
    facts = tmp_path / "facts"
    shutil.copytree(FACTS, facts)
    sweep_file = facts / "standin-host" / "epforge_sweep.fact"
    sweep = json.loads(sweep_file.read_text())
    hostile = "<script>alert(1)</script> | [click](javascript:alert(1)) <img src=x onerror=alert(2)>"
    sweep["configurations"][2]["class"] = hostile
    sweep_file.write_text(json.dumps(sweep))
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(facts), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert "<script>" not in md and "<img" not in md and "[click](javascript:" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| \\[click\\](javascript:alert(1))" in md
    assert "<script>" not in (out / "report.html").read_text()


def test_report_shows_the_fleet_beside_each_host_alone(tmp_path):
    """Fleets: a real gateway run's facts (tests/fixtures/gateway-facts, role gateway over three podman hosts,
    smg 1.13.0) with, for worker1, the stand-in host's captured benchmark history as its own: the gateway row,
    the fleet's last run beside worker1 alone, the workers without a run of their own marked so, the share."""
    facts = tmp_path / "facts"
    shutil.copytree(ROOT / "tests" / "fixtures" / "gateway-facts" / "localhost", facts / "localhost")
    (facts / "epforge-gw-worker1").mkdir()
    shutil.copy(
        FACTS / "standin-host" / "epforge_bench.fact", facts / "epforge-gw-worker1" / "epforge_bench.fact"
    )
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(facts), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    fleet = json.loads((facts / "localhost" / "epforge_fleet_bench.fact").read_text())["history"][-1]
    alone = next(
        e
        for e in reversed(
            json.loads((facts / "epforge-gw-worker1" / "epforge_bench.fact").read_text())["history"]
        )
        if e["status"] == "ok"
    )
    assert "## Fleets" in md
    assert "| localhost | http://127.0.0.1:31080 | smg 1.13.0 | round_robin | 3: epforge-gw-worker1, " in md
    assert "| 3/3 | yes |" in md
    workers = "epforge-gw-worker1, epforge-gw-worker2, epforge-gw-worker3"
    assert (
        f"| fleet via localhost (3 workers) | {workers} | {fleet['figures']['output_throughput']:.1f} |" in md
    )
    assert f"| {fleet['figures']['failed_requests']} | invalid |" in md
    assert (
        f"| epforge-gw-worker1 alone | epforge-gw-worker1 | {alone['figures']['output_throughput']:.1f} |"
        in md
    )
    assert "| epforge-gw-worker2 alone | epforge-gw-worker2 | - | - | - | - | not measured |" in md
    share = fleet["figures"]["output_throughput"] / alone["figures"]["output_throughput"]
    assert f"| {share:.2f}x of {alone['figures']['output_throughput']:.1f} |" in md


def test_a_model_across_nodes_is_one_server_in_the_report(tmp_path):
    """Two ranks' epforge_sglang_server facts (the shape role sglang_server records, group included) and a
    one-node server: the report lists two servers, the group once, with its ranks and rank 0's URL."""
    facts = tmp_path / "facts"
    settings = {"model_path": "/models/big", "tp_size": 16, "ep_size": 16, "nnodes": 2}
    for rank, url in ((1, "http://10.0.0.12:30000"), (0, "http://10.0.0.11:30000")):
        host = facts / f"box-{rank}"
        host.mkdir(parents=True)
        group = {"nnodes": 2, "node_rank": rank, "dist_init_addr": "10.0.0.11:25000", "joined": True}
        fact = {"schema": 1, "name": "sglang-server", "state": "started", "url": url, "group": group}
        (host / "epforge_sglang_server.fact").write_text(json.dumps({**fact, "settings": settings}))
    single = facts / "box-solo"
    single.mkdir()
    (single / "epforge_sglang_server.fact").write_text(
        json.dumps(
            {
                "state": "started",
                "name": "sglang-server",
                "url": "http://127.0.0.1:30000",
                "group": {},
                "settings": {"model_path": "/models/small", "tp_size": 8},
            }
        )
    )
    out = tmp_path / "report"
    proc = epforge("report", "--from", str(facts), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    md = (out / "report.md").read_text()
    assert (
        "| sglang-server (group at 10.0.0.11:25000) | box-0, box-1 | http://10.0.0.11:30000 | 16 | 16 | "
        "2/2 | /models/big |" in md
    )
    assert "| sglang-server | box-solo | http://127.0.0.1:30000 | 8 | - | - | /models/small |" in md
    assert md.count("/models/big |") == 1
