"""SGLang's own parser as the judge of server flags: the check script run in the ML env's python, its
result, and the remembered outcome of the last successful check (so an unchanged rerun imports nothing).

Used by module sglang_flags_check (a check on its own) and module sglang_install (the sglang role's one
call: install, then judge the settings' flags). Pure Python; the script itself runs in a process of its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded
from ansible_collections.epforge.ep.plugins.module_utils.secrets import redact

RESULT_MARK = "EPFORGE_SGLANG_FLAGS_RESULT "

# Runs in the ML env's python. Reads {"argv": [...], "construct": bool} as JSON from stdin; argparse
# errors exit 2 with SGLang's message on stderr, a speculative algorithm SGLang does not know exits 3.
# {"argvs": [[...], ...]} checks several argvs in one process (one import of SGLang and torch) and reports
# each one's exit code and output instead of exiting.
CHECK_SCRIPT = r"""
import argparse, contextlib, importlib.metadata, io, json, sys
request = json.load(sys.stdin)
from sglang.srt.server_args import ServerArgs

def check(argv, construct):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    by_flag = {}
    for action in parser._actions:
        for flag in action.option_strings:
            by_flag[flag] = action.dest
    parsed, notes = {}, []
    for item in argv:
        if not item.startswith("--"):
            continue
        name = item.split("=", 1)[0]
        dest = by_flag.get(name)
        if dest is None:
            full = [flag for flag in by_flag if flag.startswith(name)]
            notes.append("%s is an abbreviation of %s: write the flag in full, a later SGLang may refuse it"
                         % (name, ", ".join(full)))
            if len(full) != 1:
                continue
            dest = by_flag[full[0]]
        if dest not in ("help", "api_key", "admin_api_key"):
            parsed[dest] = getattr(args, dest, None)
    constructed = False
    if construct and hasattr(ServerArgs, "resolve_once"):
        ServerArgs.from_cli_args(args)
        constructed = True
        algorithm = getattr(args, "speculative_algorithm", None)
        if algorithm is not None:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
            try:
                SpeculativeAlgorithm.from_string(algorithm)
            except ValueError as err:
                sys.stderr.write("sglang: error: argument --speculative-algorithm: %s\n" % err)
                sys.exit(3)
    return {"parsed": parsed, "notes": notes, "constructed": constructed}

version = importlib.metadata.version("sglang")
construct = bool(request.get("construct"))
if "argvs" in request:
    results = []
    for argv in request["argvs"]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                result, rc = check(argv, construct), 0
            except SystemExit as exc:
                result, rc = {}, (exc.code if isinstance(exc.code, int) else 1)
        result.update(rc=rc, output=out.getvalue() + err.getvalue(), sglang_version=version)
        results.append(result)
    payload = {"results": results}
else:
    payload = check(request["argv"], construct)
    payload["sglang_version"] = version
sys.stdout.write("\n__MARK__" + json.dumps(payload, default=str) + "\n")
""".replace("__MARK__", RESULT_MARK)

VERSION_SCRIPT = "import importlib.metadata as m; print(m.version('sglang'))"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def installed_version(python: str, timeout: float = 60) -> tuple[str | None, str]:
    """The sglang distribution version installed for python (from its metadata; no import), and output."""
    proc = run_bounded([python, "-c", VERSION_SCRIPT], timeout=timeout)
    if proc.rc != 0:
        return None, proc.output
    return proc.out.strip(), proc.out


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
    rc, stdout, stderr, _ = _run_script(
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


def cache_key_of(argv: list[str], version: str | None, python: str, construct: bool, evidence: str) -> str:
    """What a remembered outcome depends on: the flags, SGLang's version, the python, the check script."""
    return hashlib.sha256(
        json.dumps([argv, version, python, construct, evidence, CHECK_SCRIPT]).encode()
    ).hexdigest()


# Verdicts kept in one cache file: one per distinct argv judged (a sweep judges one per configuration).
VERDICTS_KEPT = 32


def _verdicts(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    verdicts = data.get("verdicts") if isinstance(data, dict) else None
    return verdicts if isinstance(verdicts, dict) else {}


def read_cache(path: str, key: str) -> dict | None:
    """The outcome of an earlier successful check with the same key, else None."""
    entry = _verdicts(path).get(key)
    return entry.get("outcome") if isinstance(entry, dict) else None


def write_cache(path: str, key: str, outcome: dict, digest: str = "") -> None:
    """Remember a successful check (atomically) beside the others, so an unchanged rerun needs no SGLang
    import; the oldest verdicts beyond VERDICTS_KEPT are dropped."""
    verdicts = _verdicts(path)
    verdicts.pop(key, None)
    verdicts[key] = {"digest": digest, "outcome": outcome}
    kept = dict(list(verdicts.items())[-VERDICTS_KEPT:])
    write_json_atomic(path, {"verdicts": kept}, indent=1, default=str)


def verdict_by_digest(path: str, digest: str, version: str | None) -> dict | None:
    """The outcome an earlier check of the same settings object (digest) got from this SGLang release."""
    for entry in _verdicts(path).values():
        if isinstance(entry, dict) and entry.get("digest") == digest:
            outcome = entry.get("outcome") or {}
            if outcome.get("sglang_version") == version:
                return outcome
    return None


def judged_digests(path: str) -> set[str]:
    """The settings-object digests whose argv SGLang's parser accepted (recorded in the cache file)."""
    return {e.get("digest") for e in _verdicts(path).values() if isinstance(e, dict) and e.get("digest")}


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
) -> dict:
    """Judge argv with SGLang's parser, or answer from cache_path when nothing it depends on changed.

    Fails the module with SGLang's message when the flags are refused. Returns the outcome
    (sglang_version, parsed, constructed, notes, warnings_sglang) plus cached (and seconds after a run); a
    successful run is remembered in cache_path (with the settings object's digest, when given), except in
    check mode; reuse_digest also answers from a verdict another caller recorded for the same digest.
    """
    key = cache_key_of(argv, version, python, construct, evidence)
    cached = read_cache(cache_path, key) if cache_path else None
    if cached is None and reuse_digest and digest and cache_path:
        # The same object judged by another caller (role sglang): one parser run per distinct argv.
        cached = verdict_by_digest(cache_path, digest, version)
    if cached is not None:
        return {**cached, "cached": True}
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
        write_cache(cache_path, key, outcome, digest)
    return {**outcome, "cached": False, "seconds": result["seconds"]}
