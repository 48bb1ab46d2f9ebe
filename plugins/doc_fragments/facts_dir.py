# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(facts_dir), the directory a module writes its local fact to.

DOCUMENTATION: the module always writes its fact (the option is required).
OPTIONAL: the module writes its fact only when the option is set.
Each module's description names its fact. Modules that read the fact there (cuda_extension_plan, with a
default), or whose text says more about when and what is written (ml_env_torch, epforge_preflight_checks),
keep their own text.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  facts_dir:
    description:
      - Directory of local facts (for example C(/etc/ansible/facts.d)). The module's fact is written there
        as JSON in C(NAME.fact), read back by setup as C(ansible_local.NAME); only when its content changes,
        and never in check mode.
    type: path
    required: true
"""

    OPTIONAL = r"""
options:
  facts_dir:
    description:
      - Directory of local facts (for example C(/etc/ansible/facts.d)). When set, the module's fact is
        written there as JSON in C(NAME.fact), read back by setup as C(ansible_local.NAME); only when its
        content changes, and never in check mode. Unset, no fact is written.
    type: path
"""
