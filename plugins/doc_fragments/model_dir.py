# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Doc fragment: O(model_dir), where role model puts the models the server settings name by repo ID.

Every module that builds a server settings object takes it (plugins/module_utils/model_paths.py maps a repo
ID to its directory there), so the object's argv names the directory role model verified.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  model_dir:
    description:
      - Directory under which role model puts models named by Hugging Face repo ID (C(ORG/NAME) goes to
        C(MODEL_DIR/ORG/NAME)). A C(model_path) or C(speculative_draft_model_path) given as a repo ID is
        rendered into the server settings object as that directory (an adjustment says so), and the
        object's environment always has C(HF_HUB_OFFLINE=1), so SGLang never downloads at launch.
      - Role epforge sets it from C(epforge_model_dir).
    type: path
    default: /var/lib/epforge/models
"""
