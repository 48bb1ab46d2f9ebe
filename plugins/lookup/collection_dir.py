# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a directory the collection carries (stacks/, data/, extensions/) lies on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
name: collection_dir
short_description: The controller path of a directory epforge.ep carries (stacks, data, extensions)
description:
  - Returns the absolute path of a top-level directory of this collection, found from the collection's own
    files, whether it runs from an installed collection or from a checkout of the repository (whose
    C(collections/) links back to the checkout).
  - Roles read stack files and project data through it instead of climbing from C(role_path).
options:
  _terms:
    description: Names of the directories, one of C(stacks), C(data) or C(extensions).
    required: true
    type: list
    elements: str
author:
  - epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Read the cu130 stack the collection carries
  ansible.builtin.set_fact:
    stacks: "{{ lookup('epforge.ep.collection_dir', 'stacks') }}"
"""

RETURN = r"""
_raw:
  description: The absolute path of each named directory.
  type: list
  elements: path
"""

from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

# plugins/lookup/collection_dir.py -> the collection's root
ROOT = Path(__file__).resolve().parents[2]
CARRIED = ("stacks", "data", "extensions")


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        found = []
        for term in terms:
            if term not in CARRIED:
                raise AnsibleLookupError(f"collection_dir knows {', '.join(CARRIED)}, not {term!r}")
            path = ROOT / term
            if not path.is_dir():
                raise AnsibleLookupError(f"the collection has no {term}/ at {path}")
            found.append(str(path))
        return found
