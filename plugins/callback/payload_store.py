# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reuse, run after run, the payloads ansible-core packs for this collection's modules (the rules:
plugins/plugin_utils/payload_store.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: payload_store
type: aggregate
short_description: Keep the packed payloads of epforge's modules from one run to the next
description:
  - ansible-core packs each module it sends to a host (the module and the module_utils it imports) once per
    run and throws the packed payload away when the run ends. This keeps the payloads of this collection's
    modules in C(~/.cache/epforge/payloads), sealed with the controller's key and filed under a key of the
    ansible-core version, the collection's path and the content of its modules and module_utils, and gives
    them back to the next run with the same key before its first task.
  - A payload whose seal does not match is removed and packed again. Prints nothing; any error leaves the run
    to pack as it always does.
  - Enable it with C(callbacks_enabled = epforge.ep.payload_store) in C(ansible.cfg) (the project's does).
requirements:
  - enabled in C(callbacks_enabled)
"""

import os

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ansible_version

from ansible_collections.epforge.ep.plugins.plugin_utils import payload_store

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "epforge.ep.payload_store"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        # ansible-core's own per-run cache dir (module_common._find_module_utils), made at its first use
        self.run_cache = os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        self.key = ""

    def v2_playbook_on_start(self, playbook):
        try:
            self.key = payload_store.code_key(COLLECTION_ROOT, ansible_version)
            restored = payload_store.restore(self.run_cache, self.key)
            self._display.vvv(f"epforge.ep.payload_store: {len(restored)} payloads restored")
        except Exception as exc:  # a speed-up only: never the reason a run fails
            self._display.vvv(f"epforge.ep.payload_store: nothing restored ({type(exc).__name__}: {exc})")

    def v2_playbook_on_stats(self, stats):
        if not self.key:
            return
        try:
            kept = payload_store.keep(self.run_cache, self.key)
            self._display.vvv(f"epforge.ep.payload_store: {len(kept)} payloads kept")
        except Exception as exc:
            self._display.vvv(f"epforge.ep.payload_store: nothing kept ({type(exc).__name__}: {exc})")
