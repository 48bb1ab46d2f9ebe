"""module model_weights' third job, source controller: a copy the controller sends (role model runs
ansible.posix.synchronize) verified against the controller's manifest - before the transfer, what is missing
or does not match (needs_transfer) and a refusal of a host without room; after it (transferred), any mismatch
fails. Tested through the module in tests/unit/test_model_controller.py."""

from __future__ import annotations

from ansible_collections.epforge.ep.plugins.module_utils.model_weights.directory import ModelDirectory
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.report import Report
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request


class ControllerSource:
    pending = False  # what the controller must still send is needs_transfer, in the result

    def __init__(self, module, request: Request, directory: ModelDirectory, report: Report) -> None:
        self.module = module
        self.p = module.params
        self.path = request.path
        self.directory = directory
        self.result = report.result

    def manifest(self) -> dict:
        manifest = self.p["manifest"]
        bad = self.directory.verify_against(manifest)
        if bad and self.p["transferred"]:
            self.module.fail_json(
                msg=f"after the transfer from the controller, {len(bad)} files in {self.path} do not match "
                f"the controller's manifest: {', '.join(bad[:5])}",
                mismatched=bad,
            )
        if bad:
            self.directory.space_check(bad, {n: f["size"] for n, f in manifest["files"].items()})
            self.directory.unstamp()
            self.result["needs_transfer"] = bad
            self.result["changed"] = True
        return manifest
