# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: what the attributes check_mode, diff_mode and platform mean, said once for every module.

Issue 40: a user reads in ansible-doc, before running a play with --check or --diff, what each module does
there. DOCUMENTATION only describes the three attributes; the support levels are each module's own, in the
`attributes:` block of its DOCUMENTATION (check_mode and diff_mode: full, partial with details, or none;
platform: platforms posix), and tests/unit/test_module_docs.py holds them to the module's code. READ_ONLY
(`epforge.ep.attributes.read_only`) says the levels once for the modules that only read: Ansible merges each
attribute's keys into the one the module declares (a module's own key wins), as community.general's
`attributes.info_module` does.
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

    # The modules that change nothing on the host: the same run in check mode, never a diff.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    details: Reads only; the same run in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
