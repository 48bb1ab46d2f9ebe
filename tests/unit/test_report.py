"""epforge CLI: `epforge report` from recorded facts (a real sweep's facts captured on this machine with the
stand-in, and the real 2x H200 collective probe fact), `epforge report` collecting through ansible-runner, and
`epforge run` streaming progress and reading results from events and set_stats."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

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
    invalid = {**good, "id": "short-run", "label": "short-gens", "status": "invalid",
               "invalid_reasons": [reason],
               "figures": {**good["figures"], "total_output_tokens": 32, "output_throughput": 261.2}}
    host = tmp_path / "facts" / "bench-host"
    host.mkdir(parents=True)
    (host / "epforge_bench.fact").write_text(json.dumps({**bench, "history": [good, invalid],
                                                         "last": invalid}))
    sweep_host = tmp_path / "facts" / "sweep-host"
    sweep_host.mkdir()
    (sweep_host / "epforge_sweep.fact").write_text(json.dumps({"schema": 1, "configurations": [
        {"name": "ep2-short", "outcome": "invalid", "reason": reason, "figures": invalid["figures"]}]}))
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
    proc = epforge("run", "playbooks/summary.yml", "-e", f"epforge_steps={steps}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    playbook = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/local.yml",
         "playbooks/summary.yml", "-e", json.dumps({"epforge_steps": STEPS})],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(Path.home()),
             "ANSIBLE_NOCOLOR": "1"},
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
