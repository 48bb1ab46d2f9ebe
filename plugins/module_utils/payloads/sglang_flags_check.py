"""Payload: SGLang's own parser on server argvs (plugins/module_utils/sglang_flags.py sends it).

Runs in the ML env's python: `python -c SOURCE`, the request as JSON on stdin - {"argv": [...], "construct":
bool}, or {"argvs": [[...], ...]} to check several in one process (one import of SGLang and torch), each
with its exit code and output instead of exiting. argparse errors exit 2 with SGLang's message on stderr; a
speculative algorithm SGLang does not know exits 3. The answer is the last stdout line that starts with
RESULT_MARK (SGLang and torch may print lines of their own). Standard library only besides SGLang (it cannot
import the collection there).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import json
import sys

RESULT_MARK = "EPFORGE_SGLANG_FLAGS_RESULT "
# What an answer never records: the help action and the keys.
UNRECORDED = ("help", "api_key", "admin_api_key")


def flag_dests(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option string of the parser -> its dest."""
    return {flag: action.dest for action in parser._actions for flag in action.option_strings}


def parsed_values(argv: list[str], by_flag: dict[str, str], args) -> tuple[dict, list[str]]:
    """(the value each given flag parsed to, notes on abbreviated flags)."""
    parsed, notes = {}, []
    for item in argv:
        if not item.startswith("--"):
            continue
        name = item.split("=", 1)[0]
        dest = by_flag.get(name)
        if dest is None:
            full = [flag for flag in by_flag if flag.startswith(name)]
            notes.append(
                f"{name} is an abbreviation of {', '.join(full)}: write the flag in full, a later SGLang may "
                "refuse it"
            )
            if len(full) != 1:
                continue
            dest = by_flag[full[0]]
        if dest not in UNRECORDED:
            parsed[dest] = getattr(args, dest, None)
    return parsed, notes


def check(server_args, argv: list[str], construct: bool) -> dict:
    """Parse argv as `sglang serve` does (server_args: SGLang's ServerArgs); with construct, build ServerArgs
    as the server does after parsing (where the release resolves its settings there) and check the
    speculative algorithm's name."""
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.add_cli_args(parser)
    args = parser.parse_args(argv)
    parsed, notes = parsed_values(argv, flag_dests(parser), args)
    constructed = False
    if construct and hasattr(server_args, "resolve_once"):
        server_args.from_cli_args(args)
        constructed = True
        algorithm = getattr(args, "speculative_algorithm", None)
        if algorithm is not None:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: PLC0415

            try:
                SpeculativeAlgorithm.from_string(algorithm)
            except ValueError as err:
                sys.stderr.write(f"sglang: error: argument --speculative-algorithm: {err}\n")
                sys.exit(3)
    return {"parsed": parsed, "notes": notes, "constructed": constructed}


def check_each(server_args, argvs: list[list[str]], construct: bool, version: str) -> list[dict]:
    """check() for each argv in one process, its exit code and output kept instead of exiting."""
    results = []
    for argv in argvs:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                result, rc = check(server_args, argv, construct), 0
            except SystemExit as exc:
                result, rc = {}, (exc.code if isinstance(exc.code, int) else 1)
        result.update(rc=rc, output=out.getvalue() + err.getvalue(), sglang_version=version)
        results.append(result)
    return results


def main(request: dict) -> int:
    # imported first, outside any argv's captured output: what SGLang prints on import is no argv's warning
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415 - only in the ML env's python

    version = importlib.metadata.version("sglang")
    construct = bool(request.get("construct"))
    if "argvs" in request:
        answer = {"results": check_each(ServerArgs, request["argvs"], construct, version)}
    else:
        answer = {**check(ServerArgs, request["argv"], construct), "sglang_version": version}
    sys.stdout.write("\n" + RESULT_MARK + json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(json.load(sys.stdin)))
