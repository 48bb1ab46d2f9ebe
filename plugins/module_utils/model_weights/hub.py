"""module model_weights' third job, sources hub and mirror: the requested revision resolved once to its
commit (the recorded commit answers a rerun unless update), the files wanted from it refused before any byte
moves when they are no model SGLang loads, and what is missing or does not match fetched (fetch.py) - the
safetensors indexes first and alone - into the model directory, where files of an older commit are removed.
Tested through the module in tests/unit/test_model_weights.py and tests/unit/test_model_refusals.py."""

from __future__ import annotations

import contextlib
import os

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.directory import ModelDirectory
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.fetch import Fetcher
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.report import Report
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact_url


class HubSource:
    def __init__(self, module, request: Request, log: Log, directory: ModelDirectory, report: Report) -> None:
        self.module = module
        self.p = module.params
        self.path = request.path
        self.token = request.token
        self.where = request.where
        self.log = log
        self.directory = directory
        self.result = report.result
        self.fetcher = Fetcher(module, request, log, report)
        self.pending = False

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
        events = self.fetcher.call("resolve", {"revision": revision})
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

    def manifest(self) -> dict:
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
                self.directory.stamp(manifest)
            return manifest
        missing = self.directory.verify_against(manifest)
        self.result["needs_fetch"] = missing
        if not missing:
            self.directory.stamp(manifest)
            return manifest
        self.directory.space_check(missing, {n: f["size"] for n, f in files.items()})
        if self.module.check_mode:
            self.result["changed"] = True
            self.pending = True  # files would be fetched: nothing to check for completeness yet
            return manifest
        self.directory.unstamp()
        # The safetensors indexes first and alone: a shard an index names that the commit lacks is refused
        # before any shard moves (issue 35 item 10: it was refused after every other file was downloaded).
        indexes = [n for n in missing if n.endswith(model_files.INDEX_SUFFIX)]
        if indexes:
            self.fetcher.fetch(manifest, indexes)
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
            self.fetcher.fetch(manifest, rest)
        # Files of a previous commit that this one does not have: a stale shard must not be loaded.
        for name in sorted(set(old.get("files", {})) - set(files)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.path, name))
                self.log.line(f"removed {name} (not in commit {manifest['commit']})")
        return manifest
