# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(python), the interpreter of the environment a module works on."""

from __future__ import annotations


class ModuleDocFragment:
    # Used by modules whose own text only named that environment (the one whose FlashInfer, DeepEP or
    # extension they probe, build or install). A module keeps its own text where its python must hold more
    # than the module's subject (build tools, numpy and tokenizers, the stack's torch), must be absolute,
    # is adopted, may be a name on PATH or is optional (sglang_server, epforge_preflight_checks).
    DOCUMENTATION = r"""
options:
  python:
    description:
      - Python interpreter of the environment the module works on (for example the ML env's
        C(/opt/venv/bin/python)). The module runs its commands with it, so what it probes, builds or
        installs is that environment's.
    type: path
    required: true
"""
