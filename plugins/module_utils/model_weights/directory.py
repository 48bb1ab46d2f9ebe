"""module model_weights' second job: the model directory's bookkeeping - the probe (the stamp still vouches
for the manifest and the manifest answers this request: a rerun is a stat() per file), the stamp written and
removed, the files verified against a manifest, the directory complete, its modes, and the room for what is
still to come. The sources (local.py, controller.py, hub.py) lean on it. Tested through the module in
tests/unit/test_model_weights.py, tests/unit/test_model_refusals.py and
tests/unit/test_model_controller.py."""

from __future__ import annotations

import contextlib
import os

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.report import Report
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.shown import human, shown
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.worker_process import Log

MIB = 1 << 20


def smoke_files(smoke: dict) -> dict:
    """Role smoke_model's manifest of a directory, in this module's manifest's terms."""
    return {n: {"size": f["size"], "sha256": f["sha256"]} for n, f in sorted(smoke.get("files", {}).items())}


class ModelDirectory:
    def __init__(self, module, request: Request, log: Log, report: Report) -> None:
        self.module = module
        self.p = module.params
        self.path = request.path
        self.log = log
        self.result = report.result

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
            return manifest if smoke is None or manifest.get("files") == smoke_files(smoke) else None
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
