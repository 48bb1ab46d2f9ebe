"""module model_weights' first job: the request - the options refused before anything is read or fetched
(refuse_bad_input), and what the other jobs take from them: the model directory's path, the token (O(token),
else O(token_file); never logged or recorded) and the mirror's URL as it may be shown. Tested through the
module in tests/unit/test_model_weights.py and tests/unit/test_model_refusals.py."""

from __future__ import annotations

import os

from ansible_collections.epforge.ep.plugins.module_utils.model_paths import is_repo_id
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact_url


class Request:
    def __init__(self, module) -> None:
        self.module = module
        self.p = module.params
        self.path = self.p["path"].rstrip("/") or "/"
        self.token = self.p["token"] or self.read_token()
        # The mirror's URL as it may be shown (messages, the log, the manifest): its credentials redacted.
        self.where = redact_url(self.p["endpoint"]) or "the Hugging Face Hub"

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
