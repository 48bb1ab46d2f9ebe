"""Run a module that only judges its arguments in the controller's worker instead of on the host.

Some epforge modules read nothing on the host (a stack's coherence, server settings, known dead ends, a
source resolved into the controller's cache): shipping them there costs a Python start and an AnsiballZ
unpack per task (0.35-0.6 s on a 2-core controller) for an answer the controller can give itself, and a
no-op rerun is made of such tasks. The module file in library/ stays the single owner of the rule, its
documentation and its argument_spec: this runs that same main() with the task's arguments, check and diff
mode included, and returns its result exactly as a host run would. The worker is a forked process per task,
so nothing the module sets outlives the task; and the task does not outlive the play: while main() runs, the
worker watches its controller chain as a module's running command does (process.ending_with_controller) and
ends when ansible-playbook is gone, SIGKILL included.

A module opts in with `action_plugin: epforge.ep.controller_side` under its name in meta/runtime.yml. On an
ansible-core without module_utils.testing.patch_module_args the task runs the module on the host as before.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import traceback

from ansible.plugins.action import ActionBase
from ansible.plugins.loader import module_loader

from ansible_collections.epforge.ep.plugins.module_utils.process import ending_with_controller
from ansible_collections.epforge.ep.plugins.plugin_utils.module_result import parsed_result

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core < 2.19: no supported way to hand a module its arguments in-process
    patch_module_args = None


# The compiled code of each module file, by path: filled in ansible-playbook itself by the callback
# epforge.ep.preload (plugins/callback/preload.py) so that forked workers inherit it, else by the worker.
_CODE: dict = {}


def code_of(name: str, path: str):
    """The module file's compiled code (compiled once per process; its imports run once, here too)."""
    if path not in _CODE:
        with open(path, "rb") as handle:
            code = compile(handle.read(), path, "exec")
        # run it once so that the module_utils it imports are in sys.modules before any worker forks
        exec(code, {"__name__": f"epforge_controller_side_{name}", "__file__": path})  # noqa: S102
        _CODE[path] = code
    return _CODE[path]


def load_module_file(name: str, path: str):
    """A fresh module object running the file's code: nothing one task sets outlives it."""
    spec = importlib.util.spec_from_file_location(f"epforge_controller_side_{name}", path)
    module = importlib.util.module_from_spec(spec)
    exec(code_of(name, path), module.__dict__)  # noqa: S102 - the collection's own module file
    return module


def run_main(module, args: dict) -> str:
    """main() of the module with `args`; returns what it printed (the result JSON).

    module.warn() in the controller shows the warning at once through Display (ansible-core 2.19), so
    nothing collects across the items of a loop."""
    printed = io.StringIO()
    with ending_with_controller(), patch_module_args(args), contextlib.redirect_stdout(printed):
        try:
            module.main()
        except SystemExit:
            pass
    return printed.getvalue()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True  # the module's own supports_check_mode decides, in main()
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        name = self._task.action
        if patch_module_args is None:
            result.update(self._execute_module(module_name=name, task_vars=task_vars))
            return result
        path = module_loader.find_plugin(name)
        if path is None:
            return dict(result, failed=True, msg=f"no module file for {name} in the configured library")
        args = dict(self._task.args)
        self._update_module_args(name, args, task_vars)
        try:
            printed = run_main(load_module_file(name, path), args)
        except Exception as exc:  # a crash becomes a failed task, as on a host
            return dict(
                result,
                failed=True,
                msg=f"{name} raised {type(exc).__name__}: {exc}",
                exception=traceback.format_exc(),
            )
        if not printed.strip():
            return dict(result, failed=True, msg=f"{name} ended without a result")
        result.update(parsed_result(self, printed))
        return result
