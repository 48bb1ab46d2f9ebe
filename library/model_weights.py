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

import contextlib
import os
import shutil
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.model_paths import is_repo_id
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log, Worker
from ansible_collections.epforge.ep.plugins.module_utils.process import (
    Interrupted,
    _stop_group_on_interrupt,
    chain_intact,
    controller_chain,
)
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact_url, url_secrets

FACT = "epforge_model"
MIB = 1 << 20


def shown(manifest: dict) -> dict:
    """A manifest as it may be written and returned: the mirror's URL without its credentials."""
    if not manifest.get("endpoint"):
        return manifest
    return {**manifest, "endpoint": redact_url(manifest["endpoint"])}


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


class ModelWeights:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.path = self.p["path"].rstrip("/") or "/"
        self.token = self.p["token"] or self.read_token()
        # The mirror's URL as it may be shown (messages, the log, the manifest): its credentials redacted.
        self.where = redact_url(self.p["endpoint"]) or "the Hugging Face Hub"
        self.log = Log(
            self.p["log_path"], module.check_mode, secrets=(self.token, *url_secrets(self.p["endpoint"]))
        )
        self.started = time.monotonic()
        self.result: dict = {
            "changed": False,
            "name": self.p["name"],
            "path": self.path,
            "source": self.p["source"],
            "commit": "",
            "files": 0,
            "bytes": 0,
            "verified": 0,
            "fetched": [],
            "bytes_fetched": 0,
            "seconds": 0.0,
            "needs_transfer": [],
            "manifest": {},
            "log_path": self.p["log_path"],
        }
        self.pending = False

    # -- input
    def read_token(self) -> str:
        path = self.p["token_file"]
        if not path or not os.path.isfile(path):
            return ""
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()

    def refuse_bad_input(self) -> None:
        p = self.p
        if not os.path.isabs(self.path):
            self.module.fail_json(msg=f"path must be absolute, got {self.path!r}")
        if p["source"] != "local" and not is_repo_id(p["repo"]):
            self.module.fail_json(msg=f"source {p['source']} needs repo as ORG/NAME, got {p['repo']!r}")
        if p["source"] == "mirror" and not p["endpoint"]:
            self.module.fail_json(
                msg="source mirror needs endpoint (the mirror's URL, what HF_ENDPOINT names)"
            )
        if p["source"] in ("hub", "mirror") and not (p["python"] and os.access(p["python"], os.X_OK)):
            self.module.fail_json(
                msg=f"python {p['python']!r} is not an executable interpreter: source {p['source']} fetches "
                "with huggingface_hub in that python (model_python; default the ML env's)"
            )
        if p["source"] == "controller" and not p["manifest"].get("files"):
            self.module.fail_json(msg="source controller needs manifest (the controller's, with its files)")
        for option in ("file_timeout", "timeout", "concurrency"):
            if p[option] < 1:
                self.module.fail_json(msg=f"{option} must be at least 1, got {p[option]}")

    # -- the probe
    def stamped_manifest(self) -> dict | None:
        """The directory's manifest when the stamp still vouches for it and it answers this request."""
        if self.p["verify"] == "full":
            return None  # every file is hashed, the stamp notwithstanding
        manifest = model_files.read_json(os.path.join(self.path, model_files.MANIFEST))
        if not manifest or not model_files.stamped(self.path, manifest):
            return None
        # written by an epforge that kept the mirror's credentials in it, or stamped in an older digest layout
        if shown(manifest) != manifest or model_files.stamp_in_older_layout(self.path, manifest):
            self.stamp(manifest)
            manifest = shown(manifest)
        p = self.p
        if p["source"] == "local":
            smoke = model_files.read_json(os.path.join(self.path, model_files.SMOKE_MANIFEST))
            return manifest if smoke is None or manifest.get("files") == self.smoke_files(smoke) else None
        if p["source"] == "controller":
            return manifest if manifest.get("files") == p["manifest"].get("files") else None
        if p["update"] or manifest.get("repo") != p["repo"] or manifest.get("revision") != p["revision"]:
            return None
        return manifest

    # -- shared ends
    def space_check(self, names: list[str], sizes: dict[str, int]) -> None:
        needed = sum(sizes[n] for n in names)
        margin = self.p["space_margin_mb"] * MIB
        probe = self.path
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        st = os.statvfs(probe)
        free = st.f_bavail * st.f_frsize
        if needed + margin > free:
            self.module.fail_json(
                msg=f"not enough free space for {self.p['repo'] or self.path}: {len(names)} files to fetch "
                f"need {human(needed)} plus the {human(margin)} margin (space_margin_mb) in {probe}, which "
                f"has {human(free)} free; nothing was fetched",
                needed_bytes=needed,
                free_bytes=free,
            )

    def place_modes(self) -> None:
        """Files 0644 and directories 0755: the server's user reads, nobody but the owner writes."""
        for root, dirs, files in os.walk(self.path):
            dirs[:] = [d for d in dirs if d != model_files.PARTIAL]
            for name in dirs:
                os.chmod(os.path.join(root, name), 0o755)  # noqa: S103 - readable by the server user, on purpose
            for name in files:
                os.chmod(os.path.join(root, name), 0o644)
        os.chmod(self.path, 0o755)  # noqa: S103 - as above

    def complete(self, manifest: dict) -> None:
        problems = model_files.completeness_problems(
            self.path, manifest["files"], self.p["needs_tokenizer"], self.p["allow_pickle"]
        )
        if problems:
            self.module.fail_json(msg=f"{self.path} is not a model SGLang can load: " + "; ".join(problems))

    def stamp(self, manifest: dict) -> None:
        """Write the manifest (when it differs) and the stamp: the verdict a rerun's probe reads."""
        manifest = shown(manifest)
        manifest_path = os.path.join(self.path, model_files.MANIFEST)
        stamp_path = os.path.join(self.path, model_files.STAMP)
        stats = model_files.stats(self.path, manifest["files"]) if os.path.isdir(self.path) else None
        digest = model_files.manifest_digest(manifest)
        stamp = {"schema": model_files.SCHEMA, "manifest": digest, "stats": stats}
        same = model_files.read_json(manifest_path) == manifest and model_files.read_json(stamp_path) == stamp
        if stats is not None and same:  # a full verification that found everything as stamped changes nothing
            return
        if self.module.check_mode:
            self.result["changed"] = True
            return
        os.makedirs(self.path, mode=0o755, exist_ok=True)
        if model_files.read_json(manifest_path) != manifest:
            write_json_atomic(manifest_path, manifest)
        stamp["stats"] = model_files.stats(self.path, manifest["files"])
        write_json_atomic(stamp_path, stamp)
        self.result["changed"] = True

    def unstamp(self) -> None:
        if not self.module.check_mode:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, model_files.STAMP))

    def verify_against(self, manifest: dict) -> list[str]:
        """Names whose file is missing or does not match; hashes each present file once."""
        bad = []
        for name, expected in sorted(manifest["files"].items()):
            problem, _found = model_files.file_problem(os.path.join(self.path, name), expected)
            if problem:
                self.log.line(f"{name}: {problem}")
                bad.append(name)
            else:
                self.result["verified"] += 1
        return bad

    # -- local
    @staticmethod
    def smoke_files(smoke: dict) -> dict:
        return {
            n: {"size": f["size"], "sha256": f["sha256"]} for n, f in sorted(smoke.get("files", {}).items())
        }

    def local(self) -> dict:
        if not os.path.isdir(self.path):
            self.module.fail_json(msg=f"source local: {self.path} is not a directory on this host")
        own = model_files.read_json(os.path.join(self.path, model_files.MANIFEST))
        smoke = model_files.read_json(os.path.join(self.path, model_files.SMOKE_MANIFEST))
        if smoke is not None:
            manifest = {
                "source": "local",
                "manifest_from": model_files.SMOKE_MANIFEST,
                "files": self.smoke_files(smoke),
            }
        elif own is not None:
            manifest = own
        else:
            manifest = self.first_local_manifest()
        bad = self.verify_against(manifest)
        if bad:
            self.module.fail_json(
                msg=f"source local: {self.path} does not match its manifest ({', '.join(bad[:5])}); a local "
                "directory is never repaired: restore it, or remove its .epforge-model.json to accept it as "
                "it is",
                mismatched=bad,
            )
        return manifest

    def first_local_manifest(self) -> dict:
        """No manifest yet: every safetensors header against its size, then each file's hashes recorded."""
        names = model_files.local_files(self.path)
        problems = [
            f"{n}: {problem}"
            for n in names
            if n.endswith(".safetensors")
            and (problem := model_files.safetensors_problem(os.path.join(self.path, n)))
        ]
        if problems:
            self.module.fail_json(
                msg=f"source local: {self.path} has damaged weights: " + "; ".join(problems)
            )
        files = {}
        for name in names:
            found = model_files.hashes(os.path.join(self.path, name), ("sha256",))
            files[name] = {"size": os.path.getsize(os.path.join(self.path, name)), "sha256": found["sha256"]}
        self.log.line(f"{self.path}: no manifest; headers checked, {len(files)} files hashed and recorded")
        return {"source": "local", "manifest_from": "first check", "files": files}

    # -- controller
    def controller(self) -> dict:
        manifest = self.p["manifest"]
        bad = self.verify_against(manifest)
        if bad and self.p["transferred"]:
            self.module.fail_json(
                msg=f"after the transfer from the controller, {len(bad)} files in {self.path} do not match "
                f"the controller's manifest: {', '.join(bad[:5])}",
                mismatched=bad,
            )
        if bad:
            self.space_check(bad, {n: f["size"] for n, f in manifest["files"].items()})
            self.unstamp()
            self.result["needs_transfer"] = bad
            self.result["changed"] = True
        return manifest

    # -- hub and mirror
    def call(self, command: str, request: dict, on_event=None) -> list[dict]:
        """Run the worker to its end (bounded); return its events, failing on its error event."""
        request = {"endpoint": self.p["endpoint"], "token": self.token, "repo": self.p["repo"], **request}
        worker = Worker(self.module, self.log, command, request)
        events = []
        deadline = self.started + self.p["timeout"]
        chain = controller_chain()  # the play that started this module: when it is gone, so is the fetch
        try:
            with _stop_group_on_interrupt(worker.proc):
                return self.follow(worker, events, deadline, chain, on_event)
        except Interrupted as exc:
            self.log.line(f"interrupted ({exc}): the fetch stopped; a rerun resumes it")
            raise
        except BaseException:
            if worker.proc.poll() is None:
                worker.stop()
            raise

    def follow(self, worker: Worker, events: list, deadline: float, chain, on_event) -> list[dict]:
        """Read the worker's events until it ends, enforcing the bounds."""
        while True:
            if chain and not chain_intact(chain):
                worker.stop()
                raise Interrupted("the controller's ansible-playbook run that started this is gone")
            if time.monotonic() > deadline:
                worker.fail(
                    f"fetching {self.p['repo']} took more than timeout={self.p['timeout']} s; completed "
                    "files are kept and a rerun fetches only the rest",
                    timed_out="total",
                )
            for event in worker.events(0.5):
                if event["event"] == "eof":
                    worker.proc.wait(timeout=30)
                    worker.drain_stderr()
                    return self.ended(worker, events)
                if event["event"] == "versions":
                    self.result["libraries"] = {k: v for k, v in event.items() if k != "event"}
                events.append(event)
                if on_event:
                    on_event(worker, event)
            if on_event:
                on_event(worker, {"event": "tick"})

    def ended(self, worker: Worker, events: list[dict]) -> list[dict]:
        errors = [e for e in events if e["event"] == "error"]
        if errors or worker.proc.returncode != 0:
            error = (
                errors[0] if errors else {"kind": "error", "message": "the worker exited without a result"}
            )
            worker.fail(self.error_message(error), kind=error["kind"])
        return events

    def error_message(self, error: dict) -> str:
        repo, rev, where = self.p["repo"], self.p["revision"], self.where
        kind = error["kind"]
        if kind in ("unknown_repo", "unknown_revision"):
            return (
                f"{repo} at revision {rev} was not found at {where} (unknown repository or revision; a "
                f"private or gated repository answers the same without a token): {error['message']}"
            )
        if kind == "missing_revision":
            return (
                f"{repo} at revision {rev} was not found at {where}: the repository answers at its branch "
                f"main, this revision does not ({error['message']}); set model_revision to a branch, a tag "
                f"or a full commit id of {repo}"
            )
        if kind == "gated":
            return f"{repo} is gated: its files need a token with access (model_token or model_token_file)"
        if kind == "missing_library":
            return (
                f"{self.p['python']} has no huggingface_hub: install it there (role sglang does) or set "
                "model_python"
            )
        if kind == "unreachable":
            return f"{where} could not be reached: {error['message']}"
        return f"fetching {repo} failed: {error['message']}"

    def resolve(self) -> dict:
        """The commit and its files: the recorded commit when the request is the same (resolved once)."""
        recorded = model_files.read_json(os.path.join(self.path, model_files.MANIFEST)) or {}
        same = recorded.get("repo") == self.p["repo"] and recorded.get("revision") == self.p["revision"]
        revision = (
            recorded["commit"]
            if same and recorded.get("commit") and not self.p["update"]
            else self.p["revision"]
        )
        self.log.line(f"resolving {self.p['repo']} at {revision} ({self.where})")
        events = self.call("resolve", {"revision": revision})
        resolved = next(e for e in events if e["event"] == "resolved")
        if resolved["gated"] and not self.token:
            self.module.fail_json(
                msg=f"{self.p['repo']} is gated ({resolved['gated']}): set model_token (no_log) or "
                "model_token_file to a token with access; nothing was fetched"
            )
        return resolved

    def wanted(self, resolved: dict) -> dict:
        files = {f["path"]: f for f in resolved["files"]}
        names = list(files)
        if any(model_files.matches_any(n, model_files.SAFE_WEIGHTS) for n in names):
            names = [n for n in names if not model_files.matches_any(n, self.p["ignore_patterns"])]
        # What the file list alone shows (config, tokenizer, loadable weights): refused before any byte moves.
        problems = model_files.completeness_problems(
            "", names, self.p["needs_tokenizer"], self.p["allow_pickle"], indexes=False
        )
        if problems:
            self.module.fail_json(msg=f"{self.p['repo']}: " + "; ".join(problems) + "; nothing was fetched")
        return {
            n: {
                k: v
                for k, v in (
                    ("size", files[n]["size"]),
                    ("sha256", files[n]["sha256"]),
                    ("blob_id", files[n]["blob_id"]),
                )
                if v != ""
            }
            for n in sorted(names)
        }

    def hub(self) -> dict:
        resolved = self.resolve()
        files = self.wanted(resolved)
        manifest = {
            "source": self.p["source"],
            "repo": self.p["repo"],
            "revision": self.p["revision"],
            "commit": resolved["commit"],
            "endpoint": redact_url(self.p["endpoint"]),
            "files": files,
        }
        old = model_files.read_json(os.path.join(self.path, model_files.MANIFEST)) or {}
        quick = self.p["verify"] == "quick"
        if quick and old.get("files") == files and model_files.stamped(self.path, old):
            if old != manifest or model_files.stamp_in_older_layout(self.path, old):
                self.stamp(manifest)
            return manifest
        missing = self.verify_against(manifest)
        self.result["needs_fetch"] = missing
        if not missing:
            self.stamp(manifest)
            return manifest
        self.space_check(missing, {n: f["size"] for n, f in files.items()})
        if self.module.check_mode:
            self.result["changed"] = True
            self.pending = True  # files would be fetched: nothing to check for completeness yet
            return manifest
        self.unstamp()
        # The safetensors indexes first and alone: a shard an index names that the commit lacks is refused
        # before any shard moves (issue 35 item 10: it was refused after every other file was downloaded).
        indexes = [n for n in missing if n.endswith(model_files.INDEX_SUFFIX)]
        if indexes:
            self.fetch(manifest, indexes)
        problems = [
            problem
            for index in model_files.index_names(files)
            for problem in model_files.index_problems(self.path, index, files)
        ]
        if problems:
            self.module.fail_json(
                msg=f"{self.p['repo']} at commit {manifest['commit']} is not a model SGLang can load: "
                + "; ".join(problems)
                + "; only its index was fetched, no shard",
                **self.result,
            )
        rest = [n for n in missing if n not in indexes]
        if rest:
            self.fetch(manifest, rest)
        # Files of a previous commit that this one does not have: a stale shard must not be loaded.
        for name in sorted(set(old.get("files", {})) - set(files)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name))
                self.log.line(f"removed {name} (not in commit {manifest['commit']})")
        return manifest

    def fetch(self, manifest: dict, names: list[str]) -> None:
        files = manifest["files"]
        names = sorted(names, key=lambda n: (-files[n]["size"], n))
        staging = os.path.join(self.path, model_files.PARTIAL)
        os.makedirs(staging, mode=0o700, exist_ok=True)
        # A part cut off midway is fetched again whole (resume per file: a mirror may ignore HTTP Range).
        shutil.rmtree(os.path.join(staging, ".cache"), ignore_errors=True)
        total = sum(files[n]["size"] for n in names)
        self.log.line(
            f"fetching {len(names)} of {len(files)} files ({human(total)}) of {self.p['repo']} at "
            f"{manifest['commit']} into {self.path}"
        )
        state = {"started": {}, "done": 0, "bytes": 0, "last": time.monotonic(), "t0": time.monotonic()}

        def on_event(worker: Worker, event: dict) -> None:
            now = time.monotonic()
            if event["event"] == "start":
                state["started"][event["file"]] = now
            elif event["event"] == "done":
                name = event["file"]
                state["started"].pop(name, None)
                self.place(worker, os.path.join(staging, name), name, files[name])
                state["done"] += 1
                state["bytes"] += files[name]["size"]
            for name, since in state["started"].items():
                if now - since > self.p["file_timeout"]:
                    worker.fail(
                        f"{name} took more than file_timeout={self.p['file_timeout']} s; completed files are "
                        "kept and a rerun fetches only the rest",
                        timed_out="file",
                        file=name,
                    )
            if now - state["last"] >= self.p["progress_interval"] or event["event"] == "done":
                state["last"] = now
                partial = self.partial_bytes(staging)
                moved = state["bytes"] + partial
                rate = moved / max(now - state["t0"], 1e-6)
                eta = (total - moved) / rate if rate > 0 else float("inf")
                self.log.line(
                    f"progress: files {state['done']}/{len(names)}, {human(moved)}/{human(total)}, "
                    f"{human(rate)}/s, ETA {eta:.0f} s"
                )

        self.call(
            "fetch",
            {
                "commit": manifest["commit"],
                "staging": staging,
                "files": names,
                "concurrency": self.p["concurrency"],
            },
            on_event,
        )
        self.result["fetched"] += names
        self.result["bytes_fetched"] += total
        shutil.rmtree(staging, ignore_errors=True)
        # so far in this run (the indexes are fetched first, alone)
        fetched, moved = len(self.result["fetched"]), human(self.result["bytes_fetched"])
        self.log.line(f"fetched {fetched} files, {moved}")

    @staticmethod
    def partial_bytes(staging: str) -> int:
        size = 0
        for root, _dirs, files in os.walk(staging):
            for name in files:
                with contextlib.suppress(OSError):
                    size += os.path.getsize(os.path.join(root, name))
        return size

    def place(self, worker: Worker, fetched: str, name: str, expected: dict) -> None:
        """A fetched file is checked against the Hub's hash, then moved into the model directory."""
        problem, _found = model_files.file_problem(fetched, expected)
        if problem:
            os.unlink(fetched)
            worker.fail(f"{name} as fetched from {self.where} does not match its metadata: {problem}")
        target = os.path.join(self.path, name)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        os.chmod(fetched, 0o644)
        os.replace(fetched, target)
        self.result["verified"] += 1

    # -- the run
    def run(self) -> None:
        self.refuse_bad_input()
        manifest = self.stamped_manifest()
        if manifest is None:
            self.log.line(f"checking {self.p['name']}: {self.p['repo'] or self.path} ({self.p['source']})")
            manifest = {"local": self.local, "controller": self.controller}.get(self.p["source"], self.hub)()
            if not (self.result["needs_transfer"] or self.pending):
                self.complete(manifest)
                if not self.module.check_mode:
                    self.place_modes()
                self.stamp(manifest)
                self.log.line(
                    f"verified {self.path}: {len(manifest['files'])} files, {self.result['verified']} "
                    f"hashed, {len(self.result['fetched'])} fetched ({human(self.result['bytes_fetched'])})"
                )
        self.result["seconds"] = round(time.monotonic() - self.started, 3)
        self.report(manifest)
        self.module.exit_json(**self.result)

    def report(self, manifest: dict) -> None:
        manifest = shown(manifest)
        files = manifest.get("files", {})
        self.result.update(
            manifest=manifest,
            commit=manifest.get("commit", ""),
            files=len(files),
            bytes=sum(f["size"] for f in files.values()),
        )
        record = {
            "repo": manifest.get("repo", ""),
            "revision": manifest.get("revision", ""),
            "commit": manifest.get("commit", ""),
            "source": self.p["source"],
            "path": self.path,
            "files": len(files),
            "bytes": self.result["bytes"],
            "verified": len(files) if not self.result["needs_transfer"] else 0,
        }
        facts_dir = self.p["facts_dir"]
        fact = (model_files.read_json(fact_path(facts_dir, FACT)) or {}) if facts_dir else {}
        previous = fact.get(self.p["name"], {})
        if self.result["changed"] or not previous:
            # Figures of the run that did the work; a probe-only rerun keeps them (and reports changed=0).
            record.update(seconds=self.result["seconds"], bytes_fetched=self.result["bytes_fetched"])
        else:
            record.update(
                seconds=previous.get("seconds", 0.0), bytes_fetched=previous.get("bytes_fetched", 0)
            )
        self.result["record"] = record
        if facts_dir and not self.result["needs_transfer"]:
            written = write_local_fact(
                facts_dir, FACT, {**fact, self.p["name"]: record}, self.module.check_mode
            )
            self.result["changed"] = self.result["changed"] or written["changed"]


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
    # result or arguments (-v, the invocation); the log and the manifest get the redacted URL (ModelWeights).
    module.no_log_values.update(url_secrets(module.params["endpoint"]))
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    ModelWeights(module).run()


if __name__ == "__main__":
    main()
