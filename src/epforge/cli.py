"""epforge: the controller-side command line.

epforge run site|sweep|PLAYBOOK [-i INVENTORY] [-e KEY=VALUE|@FILE] [--limit HOSTS] [-v]
    Runs the playbook through ansible-runner, streaming one line per task and host result; ends with each
    host's benchmark result and sweep outcomes (read from the run's events and set_stats) and, last, the
    per-step summary of playbooks/summary.yml as ansible-playbook prints it.
epforge tune [-i INVENTORY] [-e KEY=VALUE|@FILE] [--limit HOSTS] [--check] [-v]
    Runs playbooks/tune.yml (role tuner): per host, the candidates judged before any launch, each measured,
    the fastest valid one left serving and recorded (local fact epforge_tuning); --check prints the plan and
    launches nothing. Interrupted, the same command continues where it stopped. Ends with each host's winner
    and its figures; a host where no candidate qualified (its previous server restored) exits non-zero.
epforge report [-i INVENTORY] [--limit HOSTS] [-e ...] [--from DIR] [-o OUT]
    Collects the epforge local facts of every host (setup's ansible_local, through ansible-runner), saves them
    under OUT/facts/HOST/, and renders OUT/report.md and OUT/report.html: a per-host provisioning overview,
    the final env's arch coverage (host x component), benchmark tables and PNG plots.
    --from DIR renders facts saved earlier (DIR/HOST/epforge_NAME.fact) without contacting any host.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from epforge import runner

PLAYBOOKS = {"site": "site.yml", "sweep": "playbooks/sweep.yml", "tune": "playbooks/tune.yml"}

COLLECT_PLAYBOOK = """---
- name: Collect epforge local facts
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the local facts
      ansible.builtin.setup:
        gather_subset: ['!all', '!min', 'local']
        fact_path: "{{ epforge_facts_dir | default('/etc/ansible/facts.d') }}"
        filter: ansible_local
"""


def per_host_stats(result: runner.RunResult, name: str) -> dict:
    """A set_stats mapping of host -> value (the sweep's outcomes, the tune's decision), {} when absent."""
    data = (result.stats or {}).get(name)
    return data if isinstance(data, dict) else ({"(run)": data} if data else {})


def summarize_run(result: runner.RunResult) -> list[str]:
    lines = []
    tuned = per_host_stats(result, "epforge_tune")
    hosts = sorted(set(result.facts) | set(result.counts))
    for host in hosts:
        facts = result.facts.get(host, {})
        counts = result.counts.get(host, {})
        lines.append(
            f"{host}: ok={counts.get('ok', 0)} changed={counts.get('changed', 0)} "
            f"failed={counts.get('failures', 0)} unreachable={counts.get('dark', 0)}"
        )
        bench = facts.get("epforge_bench_result")
        # on a tuned host the last bench_serving result is a candidate's window, a loser as often as not:
        # the tune's own lines (tune_lines) say what won
        if bench and host not in tuned:
            f = bench.get("figures") or {}
            if bench.get("status") == "ok":
                lines.append(
                    f"  benchmark {bench.get('label')}: {f.get('output_throughput', 0):.1f} output tok/s, "
                    f"TTFT median {f.get('ttft_median_ms', 0):.1f} ms, TPOT median "
                    f"{f.get('tpot_median_ms', 0):.2f} ms"
                )
            else:
                lines.append(
                    f"  benchmark {bench.get('label')}: {bench.get('status')} "
                    f"({(bench.get('error') or {}).get('class', '')})"
                )
    for host, outcomes in per_host_stats(result, "epforge_sweep").items():
        lines.append(f"sweep on {host}:")
        for o in outcomes:
            figures = o.get("figures") or {}
            tail = (
                f"{figures.get('output_throughput', 0):.1f} tok/s"
                if o.get("outcome") == "ok"
                else f"{o.get('class', '')}: {str(o.get('reason', ''))[:160]}"
            )
            lines.append(f"  {o.get('name')}: {o.get('outcome')} - {tail}")
    # last: what each host's run did and did not do (playbooks/summary.yml), as ansible-playbook prints it
    for host in sorted(result.steps):
        lines.append(f"steps on {host}:")
        lines.extend(f"  {line}" for line in result.steps[host])
    return lines


def tune_lines(result: runner.RunResult) -> list[str]:
    """What each host's tune decided (role tuner's set_stats): the winner and its figures at the objective's
    concurrency, or that none qualified and what runs instead, with the failed candidates' causes."""
    lines = []
    for host, tune in sorted(per_host_stats(result, "epforge_tune").items()):
        winner = tune.get("winner")
        if winner:
            f = tune.get("figures") or {}
            lines.append(
                f"tune on {host}: winner {winner} ({tune.get('metric')} {float(tune.get('value') or 0):.2f}"
                f" at concurrency {tune.get('concurrency')}): {float(f.get('output_throughput') or 0):.1f} "
                f"output tok/s, TTFT p99 {float(f.get('ttft_p99_ms') or 0):.1f} ms, TPOT median "
                f"{float(f.get('tpot_median_ms') or 0):.2f} ms; {tune.get('decision')}"
            )
        else:
            lines.append(f"tune on {host}: no winner - {tune.get('decision')}")
        tie = tune.get("tie") or {}
        if tie:  # the leaders were not told apart (role tuner, plugins/module_utils/tune_decision.py)
            lines.append(
                f"  TIE: {', '.join(tie.get('names') or [])} not told apart; {tie.get('picked')} picked by "
                f"the rule ({tie.get('rule')})" + (f": by {tie['picked_by']}" if tie.get("picked_by") else "")
            )
        lines.extend(f"  failed {line[:240]}" for line in tune.get("failed") or [])
    return lines


def cmd_run(args) -> int:
    playbook = PLAYBOOKS.get(args.what, args.what)
    extravars = runner.parse_extravars(args.extra_vars)
    started = time.monotonic()
    result = runner.run_playbook(
        playbook,
        inventory=args.inventory,
        extravars=extravars,
        limit=args.limit,
        verbose=args.verbose,
        extra_cmdline="--check" if getattr(args, "check", False) else "",
    )
    print(
        f"\n{args.what}: {result.status} (rc {result.rc}) in {time.monotonic() - started:.0f} s; "
        f"artifacts in {result.private_data_dir}"
    )
    for line in summarize_run(result):
        print(line)
    # failures a block rescued (the sweep's failed configurations) are outcomes, not run failures
    for failure in result.failures:
        if result.counts.get(failure["host"], {}).get("failures", 0) > 0:
            print(f"FAILED {failure['host']} / {failure['task']}: {failure['msg'][:300]}")
    # last: what each host's tune decided (the winner and its figures)
    for line in tune_lines(result):
        print(line)
    return 0 if result.rc == 0 else (result.rc or 1)


def collect_facts(args, skipped: list[str]) -> dict:
    from epforge.report import from_ansible_local  # noqa: PLC0415

    workdir = Path(args.output) / ".collect"
    workdir.mkdir(parents=True, exist_ok=True)
    playbook = workdir / "collect.yml"
    playbook.write_text(COLLECT_PLAYBOOK)
    result = runner.run_playbook(
        playbook,
        inventory=args.inventory,
        extravars=runner.parse_extravars(args.extra_vars),
        limit=args.limit,
        verbose=args.verbose,
        out=sys.stderr,
    )
    hosts = {}
    for host, facts in result.facts.items():
        collected = from_ansible_local(facts.get("ansible_local") or {}, host, skipped)
        if collected:
            hosts[host] = collected
    for failure in result.failures:
        print(f"could not collect from {failure['host']}: {failure['msg'][:300]}", file=sys.stderr)
    return hosts


def cmd_report(args) -> int:
    from epforge import report  # noqa: PLC0415 - matplotlib loads only for reports

    out = Path(args.output)
    skipped: list[str] = []  # facts that are not facts: named on stderr and in the report, the rest shown
    if args.from_dir:
        hosts = report.load_fact_dir(args.from_dir, skipped)
        source = f"saved facts in {args.from_dir}"
    else:
        hosts = collect_facts(args, skipped)
        report.save_fact_dir(hosts, out / "facts")
        source = "the hosts' local facts"
    for line in skipped:
        print(line, file=sys.stderr)
    if not hosts:
        print(f"no epforge facts found in {source}", file=sys.stderr)
        return 1
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    written = report.render(hosts, out, title=args.title, generated=stamp, skipped=skipped)
    print(f"report of {len(hosts)} host(s), {written['configurations']} configuration row(s), from {source}:")
    print(f"  {written['markdown']}\n  {written['html']}")
    for image in written["images"]:
        print(f"  {image}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epforge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run site, sweep, tune or a playbook through ansible-runner")
    run.add_argument("what", help="site, sweep, tune, or a playbook path")
    tune = sub.add_parser(
        "tune", help="choose the fastest valid server settings per host (playbooks/tune.yml)"
    )
    tune.add_argument("--check", action="store_true", help="print the plan, launch nothing")
    tune.set_defaults(what="tune")
    report = sub.add_parser("report", help="render a Markdown + HTML report from the hosts' facts")
    report.add_argument(
        "-o", "--output", default="reports/latest", help="output directory (default %(default)s)"
    )
    report.add_argument("--from", dest="from_dir", help="render saved facts (DIR/HOST/epforge_NAME.fact)")
    report.add_argument("--title", default="epforge report")
    for p in (run, tune, report):
        p.add_argument("-i", "--inventory", help="inventory (default the project's inventory/local.yml)")
        p.add_argument("-e", "--extra-vars", action="append", default=[], help="KEY=VALUE or @FILE")
        p.add_argument("-l", "--limit", help="limit to these hosts")
        p.add_argument("-v", "--verbose", action="store_true", help="also show skipped tasks and messages")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("run", "tune"):
            return cmd_run(args)
        return cmd_report(args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"epforge: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
