"""module model_weights' third job, source local: a directory already on the host, verified and never copied
- against its own manifest or role smoke_model's when there is one (a mismatch is refused, never repaired),
else by every safetensors header against the file size, then each file's hashes recorded as its first
manifest. Tested through the module in tests/unit/test_model_weights.py."""

from __future__ import annotations

import os

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.directory import (
    ModelDirectory,
    smoke_files,
)
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log


class LocalSource:
    pending = False  # a local directory is verified in place: nothing is ever still to come

    def __init__(self, module, request: Request, log: Log, directory: ModelDirectory) -> None:
        self.module = module
        self.path = request.path
        self.log = log
        self.directory = directory

    def manifest(self) -> dict:
        if not os.path.isdir(self.path):
            self.module.fail_json(msg=f"source local: {self.path} is not a directory on this host")
        own = model_files.read_json(os.path.join(self.path, model_files.MANIFEST))
        smoke = model_files.read_json(os.path.join(self.path, model_files.SMOKE_MANIFEST))
        if smoke is not None:
            manifest = {
                "source": "local",
                "manifest_from": model_files.SMOKE_MANIFEST,
                "files": smoke_files(smoke),
            }
        elif own is not None:
            manifest = own
        else:
            manifest = self.first_local_manifest()
        bad = self.directory.verify_against(manifest)
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
