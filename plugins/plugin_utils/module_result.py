# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A module's result as an action plugin hands it on, the same on every tested ansible-core (2.19-2.21).

Why an owner: the action plugins controller_side and probe_cache read a module's printed JSON and keep a
module's answer, and the controller API they need moved in ansible-core 2.21 - ActionBase.
_parse_returned_data returns a UnifiedTaskResult there instead of a dict, and ansible.vars.clean.
remove_internal_keys is gone (Debian 13's controller with 2.21.5 failed on the import, 2026-12-04). What an
internal key is stays one rule here: names Ansible reserves for itself (`_ansible_*`), and interpreter
discovery's facts, which belong to the run and not to the module's answer.
"""

from __future__ import annotations

# The results an action plugin may add but a module may not (ansible.constants.INTERNAL_RESULT_KEYS on 2.19).
ACTION_ONLY_KEYS = ("add_host", "add_group")
DISCOVERED_PREFIXES = ("discovered_interpreter_", "ansible_discovered_interpreter_")


def without_internal_keys(result: dict) -> dict:
    """result without Ansible's internal keys, empty warnings and deprecations, and discovered-interpreter
    facts (edits result and the facts mapping in it; the caller copies first where it must stay whole)."""
    for key in list(result):
        if (key.startswith("_ansible_") and key != "_ansible_parsed") or key in ACTION_ONLY_KEYS:
            del result[key]
    for key in ("warnings", "deprecations"):
        if key in result and not result[key]:
            del result[key]
    facts = result.get("ansible_facts")
    if isinstance(facts, dict):
        for key in [k for k in facts if k.startswith(DISCOVERED_PREFIXES)]:
            del facts[key]
    return result


def parsed_result(action, printed: str) -> dict:
    """The dict a module's printed JSON result stands for, as ActionBase._execute_module would return it."""
    parsed = action._parse_returned_data({"stdout": printed, "stderr": "", "rc": 0}, "legacy")
    if not isinstance(parsed, dict):  # ansible-core 2.21: a UnifiedTaskResult
        parsed.remove_internal_keys()
        parsed = parsed.as_result_dict(for_round_trip=True)
    return without_internal_keys(parsed)
