#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: refuse malformed SGLang server settings (epforge_server) before anything changes."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_server_settings
short_description: Check the shape and ranges of the requested SGLang server settings before anything changes
description:
  - Checks the requested server settings (C(epforge_server)) against epforge's flag model
    (C(plugins/module_utils/sglang_args.py), C(SETTINGS_SCHEMA)) - the one list of keys epforge knows with
    their kinds, ranges and fixed choices.
  - "Refuses, naming the setting, the value and what would be accepted: a value that is not a mapping (for
    example the string C(tp=8)), unknown keys (with the closest known key, e.g. C(tpsize) -> C(tp_size)),
    values of the wrong type (C(port: 30000x)), values out of range (tp_size, ep_size, dp_size, nnodes >= 1,
    port 1-65535, node_rank < nnodes) and contradicting settings (ep_size must divide tp_size, as SGLang
    places expert-parallel ranks inside the tensor-parallel group; CUDA graphs turned off -
    C(disable_cuda_graph), C(disable_decode_cuda_graph) or C(cuda_graph_backend_decode=disabled) - together
    with a graph batch size - C(cuda_graph_max_bs), C(cuda_graph_bs) or their per-release names - which
    SGLang accepts and then runs without graphs, ignoring the size)."
  - A C(model_path) or C(speculative_draft_model_path) that is neither a Hub repo ID (C(org/name)) nor an
    absolute directory (C(m), C(./m), C(../m)) is refused here, by the rule of
    C(plugins/module_utils/model_paths.py), before preflight records anything (role C(model) refused it only
    after preflight).
  - "With O(env_table_path), refuses a variable of C(env) named C(SGLANG_*) or C(SGL_*) (SGLang reads C(SGL_X)
    as C(SGLANG_X)) that the stack's SGLang release reads nowhere - neither the typed table of its
    C(sglang/srt/environ.py) nor any literal of its modules names it - with the closest name it does read,
    and a value that does not parse as the variable's type (an C(EnvBool) takes only the spellings its
    C(parse) accepts; an C(EnvInt) an integer, an C(EnvFloat) a number, and so does a variable a module reads
    through C(int) or C(float)). SGLang itself only warns on such a value and runs with the default.
    Other variables (C(NCCL_*), C(CUDA_*), ...) pass as they are."
  - "With O(flag_successors_path), a setting or an C(extra_args) flag the release does not know is named with
    what became of it - removed in which release, and the successor an older release's own parser names
    (C(elastic_ep_rejoin) -> C(ep_join_mode: recover)) - instead of a look-alike name."
  - Warns (and accepts) when C(env) sets C(PATH) or C(LD_PRELOAD) - epforge puts the env's C(bin/) first on
    every server's PATH (C(plugins/module_utils/server_env.py)), which a PATH of the request replaces, and a
    preload reaches every process of the server (C(server_env.env_warnings)).
  - Role C(preflight) runs it first, before any role installs anything. The installed SGLang's own parser
    stays the final judge of choices that move between releases (role C(sglang), module
    C(sglang_flags_check)).
  - Pure evaluation; it reads nothing on the host and changes nothing, so it behaves the same in check mode.
  - The value of C(api_key) never appears in results or messages.
options:
  settings:
    description:
      - The requested server settings, usually C(epforge_server). Any value is accepted here so that a
        value that is not a mapping is refused with a message about the setting rather than a type error.
    type: raw
    required: true
  require_model:
    description: Refuse settings without C(model_path).
    type: bool
    default: false
  name:
    description: The variable name used in messages.
    type: str
    default: epforge_server
  flag_table:
    description:
      - The flag table of the SGLang release the settings are for (C(data/sglang_flags/VERSION.json), written
        from that release's own parser by C(scripts/sglang_flag_data.py)). A setting named after any of its
        flags (C(chunked_prefill_size), C(attention_backend), ...) is checked against the flag's kind and
        choices; a misspelt one is refused with the closest known name.
      - Empty knows only epforge's own settings.
    type: dict
    default: {}
  flag_table_path:
    description:
      - The same table read from its file where the module runs (the controller, through
        C(epforge.ep.controller_side)); a release without a file knows only epforge's own settings. Cheaper
        than passing the table through a template. Mutually exclusive with O(flag_table).
    type: path
  env_table_path:
    description:
      - The environment variables of the same release (C(data/sglang_env/VERSION.json), written from the
        release's wheel by C(scripts/sglang_env_data.py)), read where the module runs. A release without a
        file checks no variable by name.
    type: path
  env_allowed_prefixes:
    description:
      - Prefixes of C(SGLANG_*) variables the user vouches for although the release's files name them nowhere
        (a patched SGLang build, or epforge's test double, whose knobs are C(SGLANG_STANDIN_*)). Their values
        are not checked.
    type: list
    elements: str
    default: []
  flag_successors_path:
    description:
      - What became of the releases' retired flags (C(data/sglang_flag_successors.json), written from the
        releases' wheels and flag tables by C(scripts/sglang_flag_successors.py)), read where the module runs.
        Without it an unknown flag gets the closest name only.
    type: path
extends_documentation_fragment:
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Refuse malformed server settings before anything changes
  epforge.ep.epforge_server_settings:
    settings: "{{ epforge_server }}"
    require_model: "{{ epforge_server is mapping and epforge_server | length > 0 }}"
"""

RETURN = r"""
problems:
  description: One sentence per problem (empty when the settings are well formed).
  returned: always
  type: list
  elements: str
  sample:
    - "unknown server setting 'tpsize' (did you mean 'tp_size'?) (value 8); known settings: ..."
    - "env.SGLANG_ENABLE_PCIE_IPC_ALLREDUCE must be one of true, 1, yes, y, false, 0, no, n (any case) for
      SGLang 0.5.23 (EnvBool in sglang/srt/environ.py), got 'on': SGLang would only warn and use its
      default False"
setting_names:
  description: The settings given (names only), sorted.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.model_paths import model_path_problems
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import secret_values
from ansible_collections.epforge.ep.plugins.module_utils.server_env import env_warnings
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import load_flag_table, validate_settings

# option -> what the table is called in messages: the release's tables read from their files
TABLE_FILES = {
    "flag_table_path": "flag table",
    "env_table_path": "env table",
    "flag_successors_path": "flag successors table",
}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "settings": {"type": "raw", "required": True},
            "require_model": {"type": "bool", "default": False},
            "name": {"type": "str", "default": "epforge_server"},
            "flag_table": {"type": "dict", "default": {}},
            "flag_table_path": {"type": "path"},
            "env_table_path": {"type": "path"},
            "flag_successors_path": {"type": "path"},
            "env_allowed_prefixes": {"type": "list", "elements": "str", "default": []},
        },
        mutually_exclusive=[("flag_table", "flag_table_path")],
        supports_check_mode=True,
    )
    settings = module.params["settings"]
    if isinstance(settings, dict):
        module.no_log_values.update(secret_values(settings))
    tables = {}
    for option, what in TABLE_FILES.items():
        try:
            tables[option] = load_flag_table(module.params[option], what) if module.params[option] else {}
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    if tables["env_table_path"] and module.params["env_allowed_prefixes"]:
        # read as the run-time prefixes the release itself completes (sglang_env.reading)
        allowed = dict.fromkeys(module.params["env_allowed_prefixes"], "epforge_sglang_env_allowed")
        tables["env_table_path"]["prefixes"] = {**(tables["env_table_path"].get("prefixes") or {}), **allowed}
    problems = validate_settings(
        settings,
        require_model=module.params["require_model"],
        flag_table=tables["flag_table_path"] or module.params["flag_table"],
        env_table=tables["env_table_path"],
        flag_successors=tables["flag_successors_path"],
    ) + model_path_problems(settings)
    keys = sorted(str(key) for key in settings) if isinstance(settings, dict) else []
    if problems:
        numbered = " ".join(f"({number}) {problem}" for number, problem in enumerate(problems, 1))
        module.fail_json(
            msg=f"{module.params['name']} is refused before anything changes: {numbered}",
            problems=problems,
            setting_names=keys,
        )
    for warning in env_warnings(
        settings.get("env") if isinstance(settings, dict) else None, module.params["name"] + ".env"
    ):
        module.warn(warning)
    module.exit_json(changed=False, problems=[], setting_names=keys)


if __name__ == "__main__":
    main()
