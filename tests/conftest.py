"""Make the project's Ansible modules and module_utils importable the way Ansible loads them."""

from __future__ import annotations

import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# `from ansible.module_utils.epforge_x import ...` resolves to module_utils/epforge_x.py, as with
# ansible.cfg's module_utils setting; library/ modules import as plain modules.
ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
sys.path.insert(0, str(ROOT / "library"))
