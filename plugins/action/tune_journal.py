"""Module tune_journal's action plugin: the journal's seal key, derived on the controller.

The controller's sealing secret (plugins/module_utils/seal.py, the one the probe cache seals its records
with) never leaves the controller; the module gets a key derived from it for the tuner's journals alone
(no_log), seals each journal it writes and believes only a journal whose seal holds. A secret that others can
read, or an empty one, fails the task with the remedy.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.epforge.ep.plugins.module_utils import seal

PURPOSE = "tune_journal"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        try:
            secret = seal.controller_key()
        except seal.SealKeyError as exc:
            raise AnsibleActionFail(str(exc)) from None
        args = dict(self._task.args, seal_key=seal.derived_key(secret, PURPOSE))
        answer = self._execute_module(
            module_name=self._task.action, module_args=args, task_vars=task_vars or {}
        )
        return dict(result, **answer)
