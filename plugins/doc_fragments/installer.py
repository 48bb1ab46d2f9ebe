# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(installer) and O(uv_home), the choice plugins/module_utils/installer.py owns (its
INSTALLER_ARGUMENT_SPEC is the spec these options document)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  installer:
    description:
      - Which installer puts packages into the env. V(auto) uses uv (C(uv pip install --python ENV)) when
        every pip setting for this env (pip's files and C(PIP_*) variables - mirrors, a wheelhouse's
        C(--no-index --find-links), certificates, constraints) has a uv translation and uv itself can be
        installed under those settings, and pip otherwise; the result's RV(installer) says which ran and why.
      - V(uv) fails, before anything is installed, where V(auto) would fall back; V(pip) always uses pip.
      - Which installer ran is not part of the stamp, so changing it reinstalls nothing.
    type: str
    choices: [auto, uv, pip]
    default: auto
  uv_home:
    description:
      - A venv of its own that holds uv (installed there by pip on first use, built beside it and moved in
        whole); the env being installed gets no package of uv's. Empty = C(uv) next to the env's directory.
    type: path
"""
