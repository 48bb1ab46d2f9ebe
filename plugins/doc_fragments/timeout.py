# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(timeout) where modules bound the same kind of command with the same default.

Most modules' timeouts bound a command of their own (a git command, the torch import, the writer, one
request) with a default of their own, and keep their own text; only these are shared:
CUOBJDUMP: each cuobjdump call (cuda_binary_archs, deepep_prebuilt).
PIP: each pip run that installs into the environment (ml_env_torch, sglang_install).
There is no plain DOCUMENTATION: every timeout has a default, and the documented one must be the module's.
"""

from __future__ import annotations


class ModuleDocFragment:
    CUOBJDUMP = r"""
options:
  timeout:
    description:
      - Seconds allowed for each cuobjdump call; a call that takes longer is stopped with its process group.
    type: int
    default: 120
"""

    PIP = r"""
options:
  timeout:
    description:
      - Seconds each pip run may take before it is stopped with its process group (the module then fails).
    type: int
    default: 1800
"""
