"""Filter prompt_file: a workload's prompt file on the controller, checked before anything is planned or
launched (issue 39), and the name it is copied to on a host (its sha256: one copy per content)."""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import (
    FILE_DATASETS,
    PromptFileError,
    check_prompt_file,
    staged_workload,
)
from ansible_collections.epforge.ep.plugins.module_utils.workload_defaults import WORKLOAD_DEFAULTS

SUFFIX = {"jsonl": ".jsonl", "json": ".json"}


def prompt_file(workload, least=0) -> dict:
    """{} for a workload without prompt_file; else the file's identity (dataset, sha256, bytes, prompts),
    its sha1 (module copy's checksum check on the host), source (the controller path) and staged_name.
    The file must hold at least max(num_prompts, least) prompts (least: the tuner's cold burst)."""
    if not isinstance(workload, dict):
        raise AnsibleFilterError(f"prompt_file needs a workload mapping, got {workload!r}")
    source = workload.get("prompt_file") or ""
    if not source:
        return {}
    dataset = workload.get("dataset", WORKLOAD_DEFAULTS["dataset"])
    problems = []
    if dataset not in FILE_DATASETS:
        problems.append(f"prompt_file needs dataset {' or '.join(FILE_DATASETS)}, got {dataset!r}")
    if workload.get("dataset_path"):
        problems.append("give prompt_file (on the controller) or dataset_path (on the host), not both")
    if not os.path.isabs(str(source)):
        problems.append(f"prompt_file must be an absolute path on the controller, got {source!r}")
    if problems:
        raise AnsibleFilterError("bad workload: " + "; ".join(problems))
    need = max(int(workload.get("num_prompts", WORKLOAD_DEFAULTS["num_prompts"])), int(least or 0))
    try:
        identity = check_prompt_file(str(source), dataset, need)
    except PromptFileError as exc:
        raise AnsibleFilterError(str(exc)) from None
    with open(source, "rb") as handle:
        sha1 = hashlib.sha1(handle.read(), usedforsecurity=False).hexdigest()
    suffix = SUFFIX[FILE_DATASETS[dataset]["layout"]]
    return {**identity, "sha1": sha1, "source": str(source), "staged_name": identity["sha256"] + suffix}


def prompt_file_staged(workload, staged="") -> dict:
    """The workload as the host's client reads it: prompt_file replaced by dataset_path, the path it was
    copied to on the host (staged, empty when the workload names no prompt_file)."""
    if not isinstance(workload, dict):
        raise AnsibleFilterError(f"prompt_file_staged needs a workload mapping, got {workload!r}")
    try:
        return staged_workload(workload, staged)
    except PromptFileError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"prompt_file": prompt_file, "prompt_file_staged": prompt_file_staged}
