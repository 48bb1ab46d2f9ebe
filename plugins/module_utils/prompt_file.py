"""Prompt files a workload names (issue 39): the dataset kinds of SGLang's bench_serving client that read a
local file, the shape each kind needs, checked before anything runs, and a file's identity (sha256, size,
prompt count) - never its text.

Why check at all: the release's loaders drop what they cannot use without a word (sglang 0.5.16 and 0.5.23,
sglang/benchmark/datasets/custom.py skips a line that is not JSON and both kinds skip a conversation of fewer
than two turns), so a damaged file would be measured as a smaller or different load. A problem names the line
(custom) or entry (sharegpt) and the field, never the prompt: the text may be a user's private traffic.

Pure functions; reads only the path it is given.
"""

from __future__ import annotations

import json

from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import bytes_sha256

# The kinds that read a local file, as each release's loader reads it (tests/unit/test_prompt_file.py checks
# both pinned releases' own files and runs the release's loader over the files this module accepts):
#   custom:   one JSON object a line; turns under 'conversations' (else 'conversation'); a turn's text under
#             'content' (else 'value')
#   sharegpt: one JSON array of objects; turns as above; a turn's text under 'value' only (the loader
#             indexes turn["value"]; an empty dataset_path makes it download ShareGPT from the Hub, so one is
#             required)
FILE_DATASETS = {
    "custom": {"layout": "jsonl", "text_keys": ("content", "value")},
    "sharegpt": {"layout": "json", "text_keys": ("value",)},
}
TURN_KEYS = ("conversations", "conversation")
MAX_PROBLEMS = 10


class PromptFileError(ValueError):
    """The file cannot be used as the workload's prompts; the message names every problem found (at most
    MAX_PROBLEMS), by line or entry and field."""


def _turns(record) -> list | None:
    if not isinstance(record, dict):
        return None
    for key in TURN_KEYS:
        if key in record:
            return record[key] if isinstance(record[key], list) else None
    return None


def record_problem(record, where: str, text_keys: tuple[str, ...]) -> str:
    """What keeps one record from being a prompt the release's loader uses, or '' when it is one."""
    if not isinstance(record, dict):
        return f"{where}: not a JSON object"
    turns = _turns(record)
    if turns is None:
        return f"{where}: no list under '{TURN_KEYS[0]}' (or '{TURN_KEYS[1]}')"
    if len(turns) < 2:
        return (
            f"{where}: '{TURN_KEYS[0]}' holds {len(turns)} turn(s), at least 2 are needed (the prompt, then "
            "the reply); the client would skip it silently"
        )
    for index in (0, 1):
        turn = turns[index]
        if not isinstance(turn, dict) or not any(isinstance(turn.get(k), str) for k in text_keys):
            keys = "' or '".join(text_keys)
            return f"{where}: turn {index + 1} has no text under '{keys}'"
    prompt = next(turns[0][k] for k in text_keys if isinstance(turns[0].get(k), str))
    if not prompt.strip():
        return f"{where}: turn 1 (the prompt) is empty"
    return ""


def _jsonl_records(text: str):
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as exc:
            yield f"line {number}", PromptFileError(f"not JSON ({exc.msg} at column {exc.colno})")


def _json_records(text: str):
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        yield "the file", PromptFileError(f"not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
        return
    if not isinstance(data, list):
        kind = type(data).__name__
        yield "the file", PromptFileError(f"a JSON array of conversations is needed, got {kind}")
        return
    for index, record in enumerate(data, start=1):
        yield f"entry {index}", record


def check_prompt_file(path: str, dataset: str, need: int = 1) -> dict:
    """The identity of a usable prompt file of kind `dataset` holding at least `need` prompts:
    {dataset, sha256, bytes, prompts}. Raises PromptFileError naming each problem (line or entry, field)."""
    if dataset not in FILE_DATASETS:
        raise PromptFileError(f"dataset {dataset!r} reads no file (file kinds: {', '.join(FILE_DATASETS)})")
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise PromptFileError(f"cannot read the prompt file {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"the prompt file {path} is not UTF-8 (byte {exc.start})") from exc
    kind = FILE_DATASETS[dataset]
    records = _jsonl_records(text) if kind["layout"] == "jsonl" else _json_records(text)
    problems, prompts = [], 0
    for where, record in records:
        problem = f"{where}: {record}" if isinstance(record, PromptFileError) else ""
        problem = problem or record_problem(record, where, kind["text_keys"])
        if problem:
            problems.append(problem)
        else:
            prompts += 1
    if problems:
        shown = "; ".join(problems[:MAX_PROBLEMS])
        more = f" (and {len(problems) - MAX_PROBLEMS} more)" if len(problems) > MAX_PROBLEMS else ""
        raise PromptFileError(
            f"the {dataset} prompt file {path} has {len(problems)} bad record(s): {shown}{more}"
        )
    if prompts < need:
        raise PromptFileError(
            f"the {dataset} prompt file {path} holds {prompts} prompt(s), the workload sends {need} "
            "(the client would send fewer and the window would measure a smaller load)"
        )
    return {"dataset": dataset, "sha256": bytes_sha256(raw), "bytes": len(raw), "prompts": prompts}


def staged_workload(workload: dict, staged: str, owner: str = "the workload") -> dict:
    """The workload as the host's client reads it: a prompt_file (a controller path) becomes dataset_path, the
    path on the host it was copied to (staged); a workload without prompt_file is returned as it is."""
    result = dict(workload)
    if result.pop("prompt_file", None):
        if not staged:
            raise PromptFileError(f"{owner}'s prompt_file has not been copied to the host (staged)")
        result["dataset_path"] = staged
    return result
