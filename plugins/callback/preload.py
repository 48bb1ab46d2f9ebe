# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the worker Ansible forks for every task cheaper: load once, in ansible-playbook itself, the plugins
every worker would otherwise load again, and freeze the heap before the workers fork.

- Ansible runs each task in a worker forked from ansible-playbook, and what a worker imports ends with it: the
  filter, test and lookup plugins its templates use, its action plugin, and the modules epforge runs in the
  controller (plugins/action/controller_side.py) were imported again by every task - about 0.3-0.5 s of a
  5 s no-op rerun of site.yml on a 2-core controller (bench/noop_rerun.py, issue 21). Loaded here before the
  first task, every worker inherits them.
- A forked worker shares ansible-playbook's memory until it writes to it, and Python's cyclic garbage
  collector writes to every object it scans: a worker's first collections copied much of the parent's heap,
  page by page. gc.freeze() before the task's workers fork moves the parent's objects out of the collector's
  reach in those workers (the pattern the gc module documents for pre-fork servers); the parent unfreezes
  when the task's first result arrives, so its own garbage is collected as before. Measured side by side on
  the 2-core machine: a no-op site.yml about 10% faster.
Nothing else changes: a plugin not loaded here is loaded by the worker that needs it, as before.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: preload
type: aggregate
short_description: Load the plugins every task uses once, before Ansible forks a worker per task
description:
  - Imports, in ansible-playbook's own process, the filter, test and lookup plugins, the action plugins
    and the controller-side modules of epforge's roles, so that the worker forked for each task finds them
    loaded.
  - Freezes the garbage collector's view of ansible-playbook's heap before each task's workers fork
    (gc.freeze), and unfreezes it when the task's first result arrives, so that the workers do not copy the
    parent's memory page by page when they collect.
  - Prints nothing. Enable it with C(callbacks_enabled = epforge.ep.preload) in C(ansible.cfg) (the
    project's does); without it everything works, each worker loading what it needs.
requirements:
  - enabled in C(callbacks_enabled)
"""

import gc
import os

import yaml
from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import action_loader, filter_loader, lookup_loader, module_loader, test_loader

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILTIN_ACTIONS = (
    "ansible.builtin.set_fact",
    "ansible.builtin.assert",
    "ansible.builtin.debug",
    "ansible.builtin.validate_argument_spec",
    "ansible.builtin.normal",
    "ansible.builtin.fail",
    "ansible.builtin.slurp",
)
LOOKUPS = ("ansible.builtin.file", "ansible.builtin.env", "epforge.ep.collection_dir")
FILTERS = ("epforge.ep.step_appended",)


def routed_modules(action: str) -> list[str]:
    """The modules meta/runtime.yml routes through an action plugin of this collection."""
    try:
        with open(os.path.join(COLLECTION_ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
            routing = (yaml.safe_load(handle) or {}).get("plugin_routing", {}).get("modules", {})
    except (OSError, yaml.YAMLError):
        return []
    return [name for name, route in routing.items() if (route or {}).get("action_plugin") == action]


def preload() -> None:
    list(filter_loader.all(class_only=True))
    list(test_loader.all(class_only=True))
    for name in FILTERS:
        filter_loader.get(name)
    for name in LOOKUPS:
        lookup_loader.get(name)
    for name in (*BUILTIN_ACTIONS, "epforge.ep.controller_side", "epforge.ep.probe_cache"):
        action_loader.get(name, class_only=True)
    from ansible_collections.epforge.ep.plugins.action import controller_side  # noqa: PLC0415

    for name in routed_modules("epforge.ep.controller_side"):
        path = module_loader.find_plugin(f"epforge.ep.{name}")
        if path:
            controller_side.code_of(name, path)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "epforge.ep.preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        try:
            preload()
        except Exception as exc:  # a speed-up only: never the reason a run fails
            self._display.vvv(f"epforge.ep.preload: nothing preloaded ({type(exc).__name__}: {exc})")

    # The task's workers fork right after this event (strategy: callback, then one worker per host).
    def v2_playbook_on_task_start(self, task, is_conditional):
        gc.freeze()

    def v2_playbook_on_handler_task_start(self, task):
        gc.freeze()

    # In the parent, once its workers run: their copies keep the frozen state; the parent collects again.
    def _unfreeze(self, *_args, **_kwargs):
        gc.unfreeze()

    v2_runner_on_start = _unfreeze
    v2_runner_on_ok = _unfreeze
    v2_runner_on_failed = _unfreeze
    v2_runner_on_skipped = _unfreeze
    v2_runner_on_unreachable = _unfreeze
