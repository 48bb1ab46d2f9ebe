# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter epforge.ep.model_list: the models a server settings object names, as role model handles them.

The rule (repo ID or local directory, where a repo goes) has one owner: plugins/module_utils/model_paths.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.epforge.ep.plugins.module_utils.model_paths import models_of


def model_list(server_object):
    """[{name, path, repo, draft}] for each of model_path and speculative_draft_model_path the object sets."""
    if server_object in (None, ""):
        return []
    if not isinstance(server_object, dict):
        raise AnsibleFilterError(
            f"model_list needs a server settings object, got {type(server_object).__name__}"
        )
    return models_of(server_object)


class FilterModule:
    def filters(self):
        return {"model_list": model_list}
