"""module model_weights' last job: the report - the result the other jobs fill (made first, with the run's
clock), finished with the manifest the directory is verified against, as it may be shown, and this model's
entry in the fact epforge_model (not written while the controller must still send files). Tested through the
module in tests/unit/test_model_weights.py and tests/unit/test_model_controller.py."""

from __future__ import annotations

import time

from ansible_collections.epforge.ep.plugins.module_utils import model_files
from ansible_collections.epforge.ep.plugins.module_utils.local_facts import fact_path, write_local_fact
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.request import Request
from ansible_collections.epforge.ep.plugins.module_utils.model_weights.shown import shown

FACT = "epforge_model"


class Report:
    def __init__(self, module, request: Request) -> None:
        self.module = module
        self.p = module.params
        self.path = request.path
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

    def finish(self, manifest: dict) -> None:
        self.result["seconds"] = round(time.monotonic() - self.started, 3)
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
