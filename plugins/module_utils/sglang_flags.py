"""SGLang's own parser as the judge of server flags: the check script run in the ML env's python, its
result, and the remembered verdicts of successful checks (so an unchanged rerun imports nothing), one per
settings object's digest.

Used by module sglang_flags_check (a check on its own) and module sglang_install (the sglang role's one
call: install, then judge the settings' flags). Pure Python; the script itself runs in a process of its own.
"""

from __future__ import annotations

import inspect
import json
import os
import re

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.digests import accepted_digests
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import (
    installed_versions as installed_versions_payload,
)
from ansible_collections.epforge.ep.plugins.module_utils.payloads import sglang_flags_check
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact

RESULT_MARK = sglang_flags_check.RESULT_MARK
# The check's source: what a verdict's argv key names besides the flags (a changed check judges again).
CHECK_SCRIPT = inspect.getsource(sglang_flags_check)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def installed_version(python: str, timeout: float = 60) -> tuple[str | None, str, list[str]]:
    """The sglang distribution version installed for python (from its metadata; no import), the query's
    output and its argv as a failure shows it (payload installed_versions)."""
    run = run_payload(python, installed_versions_payload, ["sglang"], timeout=timeout)
    version = run.answer.get("sglang") if isinstance(run.answer, dict) else None
    return version, run.output, run.argv


def parser_error_line(output: str) -> str:
    """The last `error:` line of argparse-style output ('' when there is none)."""
    lines = [line.strip() for line in _ANSI.sub("", output).splitlines() if ": error: " in line]
    return lines[-1] if lines else ""


def _run_script(python: str, request: dict, timeout: float) -> tuple[int, str, str, float]:
    """Run the check script in python's environment with request on stdin: (rc, stdout, stderr, seconds)."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Keep SGLang and its imports off the network.
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    proc = run_bounded([python, "-c", CHECK_SCRIPT], input_text=json.dumps(request), timeout=timeout, env=env)
    return proc.rc, proc.out, proc.err, round(proc.seconds, 2)


def _payload(stdout: str) -> dict | None:
    marked = [line for line in stdout.splitlines() if line.startswith(RESULT_MARK)]
    return json.loads(marked[-1][len(RESULT_MARK) :]) if marked else None


def _sglang_lines(text: str) -> list[str]:
    """Deprecation and warning lines SGLang printed (colour codes removed)."""
    lines = []
    for raw in _ANSI.sub("", text).splitlines():
        line = raw.strip()
        if (
            line
            and not line.startswith(RESULT_MARK)
            and ("deprecated" in line.lower() or "warning" in line.lower())
        ):
            lines.append(line)
    return lines


def run_parser(python: str, argv: list[str], *, construct: bool = True, timeout: float = 180) -> dict:
    """Run SGLang's parser on argv in python's environment, in a process of its own (as launch_server would).

    Returns {"ok": bool, "rc": int, "cmd": list, "output": str, "seconds": float, and on success
    "parsed", "notes", "constructed", "sglang_version", "warnings"; on refusal "parser_error"}.
    """
    rc, stdout, stderr, seconds = _run_script(
        python, {"argv": list(argv), "construct": bool(construct)}, timeout
    )
    output = (stdout + ("\n" if stdout and stderr else "") + stderr).strip()
    # The command shown to users: the script is long, say what it is instead.
    shown = [python, "-c", "<epforge sglang_flags_check script>"]
    result = {"ok": False, "rc": rc, "cmd": shown, "output": output, "seconds": seconds}
    if rc == 0:
        payload = _payload(stdout)
        if payload is None:
            result.update(rc=1, parser_error="the check script printed no result")
            return result
        result.update(payload, ok=True, warnings=_sglang_lines(stdout + "\n" + stderr))
        return result
    result["parser_error"] = parser_error_line(output) or tail(output, 3)
    return result


def run_parser_batch(
    python: str, argvs: list[list[str]], *, construct: bool = True, timeout: float = 600
) -> list[dict]:
    """Like run_parser for several argvs, in one process (SGLang and torch imported once).

    Each argparse exit is caught in the process (SystemExit) instead of ending it; the results have the
    shape of run_parser's. Raises RuntimeError when the process itself fails.
    """
    rc, stdout, stderr, _unused = _run_script(
        python, {"argvs": [list(a) for a in argvs], "construct": bool(construct)}, timeout
    )
    payload = _payload(stdout) if rc == 0 else None
    if payload is None:
        raise RuntimeError(f"the check script failed (rc {rc}): {tail(stdout + stderr)}")
    results = []
    for item in payload["results"]:
        output = item.pop("output").strip()
        item.update(ok=item["rc"] == 0, output=output)
        if item["ok"]:
            item["warnings"] = _sglang_lines(output)
        else:
            item["parser_error"] = parser_error_line(output) or tail(output, 3)
        results.append(item)
    return results


def cache_keys_of(argv: list[str], version: str | None, python: str, construct: bool, evidence: str) -> tuple:
    """The keys of what a parser run's outcome depends on: the flags, SGLang's version, the python, the check
    script (and the caller's evidence, e.g. the install stamp's digest). The environment is not in it:
    SGLang's parser never sees it, so objects that differ only in env share one parser run. The current
    key first, then the one an older epforge wrote for the same run (digests.accepted_digests: read only)."""
    return accepted_digests([argv, version, python, construct, evidence, CHECK_SCRIPT])


def cache_key_of(argv: list[str], version: str | None, python: str, construct: bool, evidence: str) -> str:
    """The argv key a verdict of this parser run is written under."""
    return cache_keys_of(argv, version, python, construct, evidence)[0]


# The verdict file, schema 2: {"schema": 2, "verdicts": [{"digest", "argv_key", "plan", "outcome"}, ...]},
# oldest first (a list: epforge's JSON files sort their keys, so a mapping would lose the order). One key for
# verdicts: an entry is found by the settings object's digest (the key role sglang_server checks before a
# launch), or for a raw argv with no object by its argv key. argv_key says which parser run the outcome came
# from, so one run serves every object with the same argv (a new digest gets its own entry, a copy of that
# outcome: a launch finds it by its digest). A file of another shape counts as empty.
VERDICTS_SCHEMA = 2
# Entries kept besides the current plan's (see _kept).
VERDICTS_KEPT = 32


def _slot(entry: dict) -> str:
    return entry.get("digest") or entry["argv_key"]


def _verdicts(path: str) -> dict:
    """slot -> entry, oldest first."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != VERDICTS_SCHEMA:
        return {}
    entries = data.get("verdicts")
    if not isinstance(entries, list):
        return {}
    return {
        _slot(entry): entry
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("outcome"), dict) and entry.get("argv_key")
    }


def _kept(verdicts: dict, plan: str) -> dict:
    """The entries to keep after a write for plan: every entry of plan, and the newest VERDICTS_KEPT others.

    Why not a plain count: a tuner or sweep judges each candidate right before its launch and relaunches
    the winner (or the server that ran before) at the end; a plan of more than VERDICTS_KEPT candidates
    would push out its own first verdicts and pay a parser run (an import of torch and SGLang) again for
    the winner. So the bound is VERDICTS_KEPT + the plan's size, which cannot be smaller than the plan.
    A plan's entries become ordinary ones once another plan (or a caller without a plan: role sglang,
    serve.yml) writes; verdicts of other callers are not pushed out by a large plan either."""
    others = [slot for slot, entry in verdicts.items() if not plan or entry.get("plan") != plan]
    dropped = set(others[: max(0, len(others) - VERDICTS_KEPT)])
    return {slot: entry for slot, entry in verdicts.items() if slot not in dropped}


def _write(path: str, verdicts: dict) -> None:
    data = {"schema": VERDICTS_SCHEMA, "verdicts": list(verdicts.values())}
    write_json_atomic(path, data, indent=1, default=str)


def write_cache(path: str, key: str, outcome: dict, digest: str = "", plan: str = "") -> None:
    """Remember a successful check (atomically) beside the others, under digest (else the argv key), newest
    last, so an unchanged rerun needs no SGLang import; older entries are dropped as _kept says."""
    verdicts = _verdicts(path)
    slot = digest or key
    verdicts.pop(slot, None)
    verdicts[slot] = {"digest": digest, "argv_key": key, "plan": plan, "outcome": outcome}
    _write(path, _kept(verdicts, plan))


def judged_digests(path: str) -> set[str]:
    """The settings-object digests whose argv SGLang's parser accepted (recorded in the cache file)."""
    return {e["digest"] for e in _verdicts(path).values() if e.get("digest")}


SECRET_FLAGS = ("--api-key", "--admin-api-key")

PARSER_FAILURES = {
    2: "SGLang's parser refused the server flags",
    3: "SGLang refused the speculative algorithm",
    124: "SGLang's parser timed out",
}


def secret_values(argv: list[str]) -> list[str]:
    """The values that follow a key flag in argv."""
    return [argv[index + 1] for index, item in enumerate(argv[:-1]) if item in SECRET_FLAGS]


def hide_secrets(module, settings: dict | None, argv: list[str] | None = None) -> None:
    """Mask the API key of the settings (or of a raw argv) everywhere in the module's output, the
    invocation record included."""
    settings = settings or {}
    if isinstance(settings.get("api_key"), str) and settings["api_key"]:
        module.no_log_values.add(settings["api_key"])
    for value in secret_values(argv or []):
        module.no_log_values.add(value)


def fail_parser(module, result: dict, argv: list[str], version: str | None) -> None:
    # The output can echo argv: hide any api key the raw argv carried.
    output = result["output"]
    for value in secret_values(argv):
        output = output.replace(value, "********")
    what = PARSER_FAILURES.get(result["rc"], "SGLang's parser failed")
    module.fail_json(
        msg=f"{what} (sglang {version}): {result['parser_error']}",
        cmd=result["cmd"],
        rc=result["rc"],
        log_tail=tail(output),
        parser_error=result["parser_error"],
        argv=redact(argv),
        sglang_version=version,
    )


def check_flags(
    module,
    python: str,
    argv: list[str],
    version: str | None,
    *,
    construct: bool = True,
    timeout: float = 180,
    cache_path: str | None = None,
    evidence: str = "",
    digest: str = "",
    reuse_digest: bool = False,
    plan: str = "",
) -> dict:
    """Judge argv with SGLang's parser, or answer from cache_path when nothing it depends on changed.

    Fails the module with SGLang's message when the flags are refused. Returns the outcome
    (sglang_version, parsed, constructed, notes, warnings_sglang) plus cached (and seconds after a run).
    Every success leaves a verdict under the settings object's digest (when given) in cache_path, except in
    check mode: a parser run's, or an earlier run's on the same argv key (another object with the same
    flags and another env), copied to this digest. reuse_digest also takes the verdict another caller
    recorded for the same digest (role sglang judges with its install stamp as evidence). plan tags the
    verdict as one of a tuner's or sweep's plan, which eviction keeps (_kept).
    """
    keys = cache_keys_of(argv, version, python, construct, evidence)
    key = keys[0]
    verdicts = _verdicts(cache_path) if cache_path else {}
    own = verdicts.get(digest) if digest else next(filter(None, map(verdicts.get, keys)), None)
    same_release = own is not None and own["outcome"].get("sglang_version") == version
    if own is not None and own["argv_key"] not in keys and not (reuse_digest and digest and same_release):
        own = None  # this digest was judged under other evidence (SGLang reinstalled since): judge again
    if own is not None:
        # an older epforge's key for the same run is rewritten in the current layout
        outcome, judged_as = own["outcome"], key if own["argv_key"] in keys else own["argv_key"]
    else:
        # The same flags judged for another object: the parser does not see the environment.
        same = next((entry for entry in verdicts.values() if entry["argv_key"] in keys), None)
        outcome, judged_as = (same["outcome"], key) if same else (None, key)
    if outcome is not None:
        # Record what a launch will look for: this digest (and the plan that uses it), when not there yet.
        stale = own is None or own["argv_key"] != judged_as or (plan and own.get("plan") != plan)
        if cache_path and not module.check_mode and stale:
            write_cache(cache_path, judged_as, outcome, digest, plan)
        return {**outcome, "cached": True}
    result = run_parser(python, argv, construct=construct, timeout=timeout)
    if not result["ok"]:
        fail_parser(module, result, argv, version)
    outcome = {
        "sglang_version": result["sglang_version"],
        "parsed": result["parsed"],
        "constructed": result["constructed"],
        "notes": result["notes"],
        "warnings_sglang": result["warnings"],
    }
    if cache_path and not module.check_mode:
        write_cache(cache_path, key, outcome, digest, plan)
    return {**outcome, "cached": False, "seconds": result["seconds"]}
