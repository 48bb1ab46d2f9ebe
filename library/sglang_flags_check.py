#!/usr/bin/python
"""Ansible module: validate SGLang server settings with the installed SGLang's own argument parser."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flags_check
short_description: Validate SGLang server flags with the installed SGLang's own parser
description:
  - Renders epforge server settings (C(epforge_server)) to the argv of C(python -m sglang.launch_server)
    with C(module_utils/epforge_sglang_args.py), after refusing shape errors (unknown keys, wrong types).
  - Runs the parser of the SGLang installed in the ML env (C(ServerArgs.add_cli_args) on an
    C(argparse.ArgumentParser)) in that env's python, as an argv list with the argv passed as JSON on
    stdin. An unknown flag, a bad choice or a non-integer number fails with SGLang's own argparse message
    (for example C(argument --deepep-mode) C(invalid choice)), the exit code 2 and the parser's output.
  - Where SGLang's construction of C(ServerArgs) is free of resolution (SGLang releases whose C(ServerArgs)
    has C(resolve_once), such as 0.5.23), also builds C(ServerArgs.from_cli_args), and checks the
    speculative algorithm name with SGLang's C(SpeculativeAlgorithm.from_string). Both need no GPU.
    Releases whose C(ServerArgs.__post_init__) resolves the whole configuration (it inspects the GPU and
    the model) get the parser check only.
  - The C(api_key) setting is never rendered into the checked argv and never returned; put secrets in
    I(settings), not in I(argv).
  - Changes nothing, so it behaves the same in check mode.
options:
  python:
    description: The python of the environment SGLang is installed in (the ML env).
    type: path
    required: true
  settings:
    description:
      - Server settings (keys in C(roles/sglang/README.md)); rendered with C(build_server_argv).
      - Exactly one of I(settings) and I(argv) is required.
    type: dict
  argv:
    description: Flags of C(sglang.launch_server) to check as they are (instead of I(settings)).
    type: list
    elements: str
  sglang_version:
    description:
      - SGLang release whose flag names to render (some flags were renamed between releases).
      - Default the version of the sglang distribution installed for I(python) (read from its metadata).
    type: str
  require_model:
    description: Refuse settings without C(model_path).
    type: bool
    default: true
  use_parser:
    description:
      - Run SGLang's parser. When false only the shape checks run (for check mode before SGLang is
        installed).
    type: bool
    default: true
  construct:
    description: Also build C(ServerArgs) and check the speculative algorithm where that needs no GPU.
    type: bool
    default: true
  timeout:
    description: Seconds the parser may take (importing SGLang imports torch).
    type: int
    default: 180
  cache_path:
    description:
      - JSON file remembering the last successful check. When the flags, the SGLang version, I(python),
        I(cache_evidence) and this module's check script are unchanged, the earlier outcome is returned
        without running the parser (no import of torch and SGLang on a rerun). Not written in check mode.
      - Failed checks are never remembered.
    type: path
  cache_evidence:
    description: Extra evidence the remembered outcome depends on (the install stamp's hash, for example).
    type: str
    default: ""
author: epforge developers
"""

EXAMPLES = r"""
- name: Validate the server settings against the installed SGLang
  sglang_flags_check:
    python: /opt/epforge/ml/bin/python
    settings:
      model_path: /models/Qwen3-30B-A3B
      tp_size: 4
      ep_size: 4
      moe_a2a_backend: deepep
      deepep_mode: normal

- name: Check raw flags
  sglang_flags_check:
    python: /opt/epforge/ml/bin/python
    argv: [--model-path, /models/x, --deepep-mode, low_latency]
"""

RETURN = r"""
argv:
  description: The checked flags (secrets never included).
  returned: always
  type: list
  elements: str
sglang_version:
  description: SGLang release the flags were rendered for and checked with.
  returned: when the parser ran
  type: str
parsed:
  description: The parsed value of every flag in I(argv), keyed by SGLang's argument name (dest).
  returned: success
  type: dict
  sample: {tp_size: 8, ep_size: 8, moe_a2a_backend: deepep, deepep_mode: low_latency}
constructed:
  description: Whether C(ServerArgs.from_cli_args) was built (false where that would resolve on a GPU).
  returned: success
  type: bool
warnings_sglang:
  description: Lines SGLang printed while parsing (deprecated flags, for example).
  returned: success
  type: list
  elements: str
cached:
  description: Whether the outcome came from I(cache_path) instead of a run of the parser.
  returned: success
  type: bool
notes:
  description: Findings of epforge about the flags (abbreviated flags that a later release may reject).
  returned: success
  type: list
  elements: str
parser_error:
  description: SGLang's own error line (argparse's C(error:) text) when the flags were refused.
  returned: failure
  type: str
problems:
  description: Shape errors found before SGLang was asked.
  returned: failure
  type: list
  elements: str
"""

import hashlib
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.epforge_common import tail
from ansible.module_utils.epforge_files import write_json_atomic
from ansible.module_utils.epforge_process import run_bounded
from ansible.module_utils.epforge_secrets import redact
from ansible.module_utils.epforge_sglang_args import build_server_argv, validate_settings

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


def read_cache(path: str, key: str) -> dict | None:
    """The outcome of an earlier successful check with the same key, else None."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data.get("outcome") if isinstance(data, dict) and data.get("key") == key else None


def write_cache(path: str, key: str, outcome: dict) -> None:
    """Remember a successful check (atomically), so an unchanged rerun needs no SGLang import."""
    write_json_atomic(path, {"key": key, "outcome": outcome}, indent=1, default=str)


SECRET_FLAGS = ("--api-key", "--admin-api-key")

PARSER_FAILURES = {
    2: "SGLang's parser refused the server flags",
    3: "SGLang refused the speculative algorithm",
    124: "SGLang's parser timed out",
}


def secret_values(argv: list[str]) -> list[str]:
    """The values that follow a key flag in argv."""
    return [argv[index + 1] for index, item in enumerate(argv[:-1]) if item in SECRET_FLAGS]


def hide_secrets(module: AnsibleModule) -> None:
    """Mask the API key everywhere in the output, the invocation record included."""
    settings_in = module.params["settings"] or {}
    if isinstance(settings_in.get("api_key"), str) and settings_in["api_key"]:
        module.no_log_values.add(settings_in["api_key"])
    for value in secret_values(module.params["argv"] or []):
        module.no_log_values.add(value)


def sglang_version_of(module: AnsibleModule) -> str | None:
    """The SGLang version the flags are checked for: the option, else the installed one (with the parser)."""
    params = module.params
    python, version = params["python"], params["sglang_version"]
    if not params["use_parser"]:
        return version
    if not os.access(python, os.X_OK):
        module.fail_json(
            msg=f"python {python} does not exist or is not executable: install the ML env "
            "(role ml_env) and SGLang (role sglang) first, or point python at them"
        )
    if version:
        return version
    version, out = installed_version(python)
    if not version:
        module.fail_json(
            msg=f"SGLang is not installed for {python}: run the sglang role first",
            cmd=[python, "-c", VERSION_SCRIPT],
            rc=1,
            log_tail=tail(out),
        )
    return version


def argv_to_check(module: AnsibleModule, version: str | None) -> list[str]:
    """The raw argv, or the one rendered from the settings (refused first by epforge's own checks)."""
    params = module.params
    if params["settings"] is None:
        return list(params["argv"])
    problems = validate_settings(params["settings"], require_model=params["require_model"])
    if problems:
        module.fail_json(
            msg="server settings refused before SGLang was asked: " + "; ".join(problems),
            problems=problems,
        )
    return build_server_argv(params["settings"], include_secrets=False, sglang_version=version)


def fail_parser(module: AnsibleModule, result: dict, argv: list[str], version: str | None) -> None:
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "settings": {"type": "dict"},
            "argv": {"type": "list", "elements": "str"},
            "sglang_version": {"type": "str"},
            "require_model": {"type": "bool", "default": True},
            "use_parser": {"type": "bool", "default": True},
            "construct": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 180},
            "cache_path": {"type": "path"},
            "cache_evidence": {"type": "str", "default": ""},
        },
        required_one_of=[("settings", "argv")],
        mutually_exclusive=[("settings", "argv")],
        supports_check_mode=True,
    )
    params = module.params
    hide_secrets(module)
    version = sglang_version_of(module)
    argv = argv_to_check(module, version)
    shown_argv = redact(argv)
    if not params["use_parser"]:
        module.exit_json(
            changed=False,
            argv=shown_argv,
            parsed={},
            constructed=False,
            notes=[],
            warnings_sglang=[],
            sglang_version=version,
        )

    cache_key = cache_key_of(argv, version, params["python"], params["construct"], params["cache_evidence"])
    cached = read_cache(params["cache_path"], cache_key) if params["cache_path"] else None
    if cached is not None:
        module.exit_json(changed=False, argv=shown_argv, cached=True, **cached)

    result = run_parser(params["python"], argv, construct=params["construct"], timeout=params["timeout"])
    if not result["ok"]:
        fail_parser(module, result, argv, version)
    outcome = {
        "sglang_version": result["sglang_version"],
        "parsed": result["parsed"],
        "constructed": result["constructed"],
        "notes": result["notes"],
        "warnings_sglang": result["warnings"],
    }
    if params["cache_path"] and not module.check_mode:
        write_cache(params["cache_path"], cache_key, outcome)
    module.exit_json(changed=False, argv=shown_argv, cached=False, seconds=result["seconds"], **outcome)


if __name__ == "__main__":
    main()
