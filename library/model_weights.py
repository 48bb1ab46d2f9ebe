#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: one model's weights in a directory on the host - fetched (resumable, bounded), verified
and stamped, or refused before any byte moves."""

from __future__ import annotations

DOCUMENTATION = r"""
module: model_weights
short_description: Fetch, verify and stamp one model's weights (Hub, mirror, local directory, controller copy)
description:
  - Makes O(path) hold one model SGLang can load, verified file by file, and stamps the verdict so a rerun is
    one probe (a stat of each file) and reports no change.
  - O(source=hub) and O(source=mirror) fetch with huggingface_hub's own API (C(hf_hub_download), which uses
    C(hf_xet) where installed), run in O(python). The requested O(revision) (branch, tag or commit) is
    resolved once to its commit; the commit is recorded, and later runs re-check that commit without asking
    the Hub again unless O(update=true).
  - Refused before any byte moves, each naming the problem - an unknown repository or revision (a revision
    the repository lacks, when the repository answers at C(main), is named so, whatever the server answered
    for it - a mirror's bare HTTP 500 included), a gated repository without a token, no weights SGLang loads
    without unpickling (safetensors expected; pickle-only refused unless O(allow_pickle=true)), no
    C(config.json) or (O(needs_tokenizer)) tokenizer file, and not enough free space for the files still to
    fetch (their sizes from the Hub's metadata plus O(space_margin_mb)). The C(*.safetensors.index.json)
    files are fetched first and alone, so an index that names a shard the commit lacks is refused before any
    shard moves.
  - Files are fetched into C(PATH/.epforge-partial), checked against the Hub's hash (the LFS sha256, else the
    git blob id) and only then moved into O(path) (mode 0644, directories 0755). An interrupted fetch
    (SIGKILL, a dropped connection, a reboot) resumes on the next run without fetching completed files
    again. Resume is per file, not per byte - a Hub-compatible mirror need not honour HTTP Range (olah's
    local mirror does not) - so a file cut off midway is fetched again whole.
  - Bounded - O(file_timeout) per file and O(timeout) for the whole fetch; the worker is killed when one
    runs out and what was completed stays for the rerun. Progress (files, bytes, rate, ETA) goes to
    O(log_path) every O(progress_interval) seconds.
  - O(source=local) verifies a directory already on the host and never copies it - against its
    C(.epforge-model.json) or role smoke_model's manifest when there is one (a mismatch is refused, never
    repaired), else by checking every safetensors header against the file size and the index, then recording
    a manifest so later runs compare hashes.
  - O(source=controller) verifies a copy the controller sent (role model runs ansible.posix.synchronize)
    against the controller's O(manifest) - before the transfer it reports what is missing and refuses a host
    without room (RV(needs_transfer)); after it (O(transferred=true)) any mismatch fails.
  - Complete means - C(config.json), a tokenizer file (unless O(needs_tokenizer=false), for draft models),
    loadable weights, and every shard a C(*.safetensors.index.json) names.
  - The token is read from O(token) or O(token_file), handed to the worker on its stdin, and never written to
    argv, the environment, the log, the result or the fact.
  - Check mode reports what would be fetched or verified and changes nothing.
  - What the rerun's probe cannot see - a file whose content changed with its size, mtime and inode kept (a
    flipped byte written back with its mtime restored, silent disk corruption) - only O(verify=full) finds; it
    hashes every file against the manifest whatever the stamp says (and, for O(source=hub) and
    O(source=mirror), fetches again what does not match). Schedule it (a timer, a weekly run); a run that
    finds everything matching reports no change.
version_added: "0.1.0"
options:
  name:
    description: The setting that names this model (C(model_path), C(speculative_draft_model_path)); the key
      of its entry in the fact C(epforge_model).
    type: str
    required: true
  source:
    description: Where the files come from.
    type: str
    choices: [hub, mirror, local, controller]
    required: true
  path:
    description: The model directory (absolute). For O(source=local), the directory to verify.
    type: path
    required: true
  repo:
    description: Hub repo ID C(ORG/NAME) (required unless O(source=local)).
    type: str
    default: ""
  revision:
    description: Branch, tag or commit to fetch; a branch or tag is resolved once to its commit.
    type: str
    default: main
  update:
    description: Ask the Hub again what O(revision) points to (a branch that moved is fetched anew).
    type: bool
    default: false
  endpoint:
    description:
      - Hub-compatible endpoint (C(HF_ENDPOINT)); required for O(source=mirror), empty for the Hub.
      - Credentials in it (C(http://user:TOKEN@mirror)) reach huggingface_hub only - they are masked in the
        result and written as C(http://<redacted>@mirror) in the log, messages and the manifest.
    type: str
    default: ""
  token:
    description: Hugging Face token (gated or private repositories). Never logged or recorded.
    type: str
    default: ""
  token_file:
    description: File holding the token when O(token) is empty (the host's C(~/.cache/huggingface/token)).
    type: path
    default: ""
  python:
    description: Interpreter with huggingface_hub that fetches (O(source=hub) and O(source=mirror)).
    type: path
    default: ""
  manifest:
    description: The controller's manifest of the files (O(source=controller)).
    type: dict
    default: {}
  transferred:
    description: With O(source=controller) - the transfer has run, so any mismatch fails.
    type: bool
    default: false
  needs_tokenizer:
    description: Require a tokenizer file (false for a speculative draft model).
    type: bool
    default: true
  allow_pickle:
    description: Accept pickle-based weights (C(*.bin)) when a repository has no safetensors.
    type: bool
    default: false
  ignore_patterns:
    description: Files not fetched when the repository has safetensors weights (other weight formats).
    type: list
    elements: str
    default: ["*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.h5", "*.msgpack", "*.onnx", "*.gguf", "*.ot"]
  space_margin_mb:
    description: Free space kept beyond the files still to fetch, in MiB.
    type: int
    default: 1024
  concurrency:
    description: Files fetched at once.
    type: int
    default: 4
  file_timeout:
    description: Seconds one file may take.
    type: int
    default: 3600
  timeout:
    description: Seconds the whole fetch may take.
    type: int
    default: 86400
  verify:
    description:
      - C(quick) - a stamp whose files all still have the size, mtime and inode they had when hashed answers
        for them (a stat per file, no read).
      - C(full) - every file is hashed against the manifest, the stamp notwithstanding (reads every byte).
    type: str
    choices: [quick, full]
    default: quick
  progress_interval:
    description: Seconds between progress lines in O(log_path).
    type: float
    default: 10
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.facts_dir.optional
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Check mode fetches, moves and writes nothing; it reports what would be fetched or verified.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Fetch Kimi-K2.5 from a self-hosted mirror
  epforge.ep.model_weights:
    name: model_path
    source: mirror
    repo: moonshotai/Kimi-K2.5
    revision: main
    endpoint: http://mirror.internal:8090
    path: /var/lib/epforge/models/moonshotai/Kimi-K2.5
    python: /opt/epforge/ml-env/bin/python
    log_path: /var/log/epforge/model-model_path.log
    facts_dir: /etc/ansible/facts.d

- name: Verify a directory carried onto an air-gapped host
  epforge.ep.model_weights:
    name: model_path
    source: local
    path: /models/Kimi-K2.5
    log_path: /var/log/epforge/model-model_path.log
"""

RETURN = r"""
name:
  description: O(name), the key of this model's entry in the fact.
  returned: always
  type: str
needs_fetch:
  description: Files missing or not matching before this run's fetch (O(source=hub), O(source=mirror)).
  returned: when the Hub was asked
  type: list
  elements: str
path:
  description: The model directory.
  returned: always
  type: str
commit:
  description: The commit the files are from (empty for an unmanifested local directory's first check).
  returned: always
  type: str
files:
  description: Number of files the manifest lists.
  returned: always
  type: int
bytes:
  description: Their total size.
  returned: always
  type: int
verified:
  description: Files whose hash was checked this run (0 when the stamp answered).
  returned: always
  type: int
fetched:
  description: Files fetched this run.
  returned: always
  type: list
  elements: str
bytes_fetched:
  description: Bytes fetched this run.
  returned: always
  type: int
seconds:
  description: Wall time of this run's fetch and verification.
  returned: always
  type: float
needs_transfer:
  description: O(source=controller) - files the controller must still send (missing or not matching).
  returned: always
  type: list
  elements: str
manifest:
  description: The manifest the directory is verified against (repo, revision, commit, source, files).
  returned: always
  type: dict
record:
  description: This model's entry in the fact C(epforge_model).
  returned: always
  type: dict
libraries:
  description: huggingface_hub and hf_xet versions of O(python) (fetching sources).
  returned: when fetched
  type: dict
"""

import signal

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.model_weights.controller import ControllerSource
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.directory import ModelDirectory
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.hub import HubSource
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.local import LocalSource
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.report import Report
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.shown import human
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import url_secrets

ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "source": {"type": "str", "required": True, "choices": ["hub", "mirror", "local", "controller"]},
    "path": {"type": "path", "required": True},
    "repo": {"type": "str", "default": ""},
    "revision": {"type": "str", "default": "main"},
    "update": {"type": "bool", "default": False},
    "endpoint": {"type": "str", "default": ""},
    "token": {"type": "str", "default": "", "no_log": True},
    "token_file": {"type": "path", "default": "", "no_log": False},
    "python": {"type": "path", "default": ""},
    "manifest": {"type": "dict", "default": {}},
    "transferred": {"type": "bool", "default": False},
    "needs_tokenizer": {"type": "bool", "default": True},
    "allow_pickle": {"type": "bool", "default": False},
    "ignore_patterns": {
        "type": "list",
        "elements": "str",
        "default": [
            "*.bin",
            "*.pt",
            "*.pth",
            "*.ckpt",
            "*.pkl",
            "*.h5",
            "*.msgpack",
            "*.onnx",
            "*.gguf",
            "*.ot",
        ],
    },
    "space_margin_mb": {"type": "int", "default": 1024},
    "concurrency": {"type": "int", "default": 4},
    "file_timeout": {"type": "int", "default": 3600},
    "timeout": {"type": "int", "default": 86400},
    "progress_interval": {"type": "float", "default": 10},
    "verify": {"type": "str", "default": "quick", "choices": ["quick", "full"]},
    "log_path": {"type": "path", "required": True},
    "facts_dir": {"type": "path"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    # A mirror URL's credentials (http://user:TOKEN@mirror) are masked wherever Ansible prints this module's
    # result or arguments (-v, the invocation); the log and the manifest get the redacted URL (Request.where).
    module.no_log_values.update(url_secrets(module.params["endpoint"]))
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    p = module.params
    request = Request(module)
    log = Log(p["log_path"], module.check_mode, secrets=(request.token, *url_secrets(p["endpoint"])))
    report = Report(module, request)
    directory = ModelDirectory(module, request, log, report)
    request.refuse_bad_input()
    manifest = directory.stamped_manifest()
    if manifest is None:
        log.line(f"checking {p['name']}: {p['repo'] or request.path} ({p['source']})")
        if p["source"] == "local":
            source = LocalSource(module, request, log, directory)
        elif p["source"] == "controller":
            source = ControllerSource(module, request, directory, report)
        else:
            source = HubSource(module, request, log, directory, report)
        manifest = source.manifest()
        if not (report.result["needs_transfer"] or source.pending):
            directory.complete(manifest)
            if not module.check_mode:
                directory.place_modes()
            directory.stamp(manifest)
            log.line(
                f"verified {request.path}: {len(manifest['files'])} files, {report.result['verified']} "
                f"hashed, {len(report.result['fetched'])} fetched ({human(report.result['bytes_fetched'])})"
            )
    report.finish(manifest)
    module.exit_json(**report.result)


if __name__ == "__main__":
    main()
