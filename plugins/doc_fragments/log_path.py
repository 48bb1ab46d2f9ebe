# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(log_path), the log that a module's long commands append to."""

from __future__ import annotations


class ModuleDocFragment:
    # What plugins/module_utils/process.py run_logged() does with it. Modules that write more than the
    # commands' output there (final_env_check), give it a default (sglang_bench) or send it elsewhere when
    # empty (sglang_server) keep their own text.
    DOCUMENTATION = r"""
options:
  log_path:
    description:
      - Log file that the output (stdout and stderr) of the long commands the module runs (pip, builds,
        probes) is appended to, each run under a header line with its command; its directory is created
        when missing. Follow a run with C(tail -f).
    type: path
    required: true
"""
