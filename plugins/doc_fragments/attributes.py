# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: what the attributes check_mode, diff_mode and platform mean, said once for every module.

Issue 40: a user reads in ansible-doc, before running a play with --check or --diff, what each module does
there. This fragment only describes the three attributes; the support levels are each module's own, in the
`attributes:` block of its DOCUMENTATION (check_mode and diff_mode: full, partial with details, or none;
platform: platforms posix), and tests/unit/test_module_docs.py holds them to the module's code.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description:
      - Under C(--check) the module leaves the host as it is and reports whether a real run would change it.
      - Ansible skips a module without check mode support when the play runs in check mode.
  diff_mode:
    description:
      - Under C(--diff) the module returns, before and after, what it changed (in check mode, what it would
        change).
  platform:
    description: The systems the module can manage.
    support: N/A
"""
