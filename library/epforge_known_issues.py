#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: evaluate the known-issues table against a host's GPUs, its stack and server settings."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: epforge_known_issues
short_description: Refuse, warn about or adjust known dead ends of SGLang expert-parallel serving
description:
  - Evaluates the known-issues table (C(data/known_issues.yml)) against the GPUs found on the host, the
    stack (version set) and the requested SGLang server settings (C(epforge_server)).
  - Each matching row is an error (the module fails, naming the problem, the remedy and the source), a
    warning (reported, the play goes on) or an adjustment (the settings change that the row names, with
    the reason).
  - Adjustments apply until nothing changes; errors and warnings are then read from the adjusted settings.
  - The table's condition grammar is documented in C(plugins/module_utils/known_issues.py); conditions are
    data, never templates or code.
  - Pure evaluation; it reads nothing on the host and changes nothing, so it behaves the same in check mode.
    Role C(preflight) evaluates the same table in its host call (C(epforge_preflight_checks)); the sweep
    runs this module for each configuration.
  - With O(sglang_version), it also builds that configuration's server settings object
    (C(plugins/module_utils/server_object.py), returned as C(server_object)) - the adjusted settings rendered
    for that release to argv and environment, with their digest, as role C(sglang_server) launches them.
  - "Secrets never come back in results or messages: settings and env entries whose names end in api_key,
    token, secret, password or another word of plugins/module_utils/secret_scrub.py are left out. Apply the
    adjustments with C(epforge_server | combine(result.settings_changes, recursive=true))."
options:
  table:
    description:
      - The known-issues table, a mapping with C(server_defaults) and C(issues), usually
        C(lookup('ansible.builtin.file', 'data/known_issues.yml') | from_yaml).
    type: dict
    required: true
  gpu_facts:
    description:
      - GPU facts of the host in the schema of module C(nvidia_gpu_facts) (C(epforge_gpu_facts)), with keys
        C(available), C(gpu_count), C(gpus[].arch), C(archs), C(interconnect), C(driver_version),
        C(cuda_driver_version). An empty mapping means no GPU.
    type: dict
    default: {}
  stack:
    description:
      - The stack, either the full C(epforge_stack_spec) or its summary (C(name), C(cuda), C(arch_list)).
    type: dict
    required: true
  server:
    description:
      - The requested SGLang server settings (C(epforge_server)); keys the rules read include C(tp_size),
        C(ep_size), C(nnodes), C(dist_init_addr), C(moe_a2a_backend), C(deepep_mode), C(disable_cuda_graph),
        C(disable_custom_all_reduce), C(enable_torch_symm_mem), C(enable_flashinfer_allreduce_fusion) and
        C(env).
    type: dict
    default: {}
  fail_on_error:
    description: Fail when an error row matches (false returns the errors and lets the caller decide).
    type: bool
    default: true
  env:
    description:
      - A Python env (venv directory) whose installed releases the rows read as C(installed.sglang),
        C(installed.flashinfer), C(installed.torch) and C(installed.nccl), from its distributions' dist-info
        names (nothing is imported). Empty reads the stack's planned releases (C(installed.source) C(stack)).
    type: path
    default: ""
  expect_adjustments:
    description:
      - The ids of the adjustments the server settings object was built with (role preflight's verdict, before
        the install). When given, the module fails if the installed releases give other adjustments or an
        error. The argv is never changed after the install, so such a launch is refused instead, naming the
        rows and releases.
    type: list
    elements: str
  sglang_version:
    description: The SGLang release to render the server settings object for; empty builds none.
    type: str
    default: ""
  flag_table:
    description:
      - The flag table of that release (C(data/sglang_flags/VERSION.json)); settings named after any of its
        flags are known. Empty knows only epforge's own settings.
    type: dict
    default: {}
extends_documentation_fragment:
  - epforge.ep.model_dir
  - epforge.ep.attributes
  - epforge.ep.attributes.read_only
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Check the requested server settings against the known dead ends
  epforge.ep.epforge_known_issues:
    table: "{{ lookup('ansible.builtin.file', playbook_dir ~ '/../data/known_issues.yml') | from_yaml }}"
    gpu_facts: "{{ epforge_gpu_facts }}"
    stack: "{{ epforge_stack_spec }}"
    server: "{{ epforge_server }}"
  register: known_issues

- name: Launch with the adjusted settings
  ansible.builtin.set_fact:
    sglang_server_settings: "{{ epforge_server | combine(known_issues.settings_changes, recursive=true) }}"
"""

RETURN = r"""
findings:
  description: The matching rows by severity.
  returned: always
  type: dict
  contains:
    errors:
      description: >-
        Error rows that match (the module fails when any exist unless fail_on_error is false); each with
        id, title, severity, consequence, remedy, source.
      type: list
      elements: dict
      sample:
        - id: torch_symm_mem_sm120_pcie
          title: torch symmetric-memory allreduce needs SM90/SM10x and NVLink multicast
          severity: error
          consequence: 'SGLang''s torch symmetric-memory allreduce ... fails with "KeyError: 12" ...'
          remedy: remove enable_torch_symm_mem from epforge_server ...
          source: sglang python/sglang/srt/distributed/device_communicators/torch_symm_mem.py ...
    warnings:
      description: Warning rows that match (same keys as errors); also emitted as Ansible warnings.
      type: list
      elements: dict
    adjustments:
      description: >-
        Adjust rows applied, each with the keys of errors plus C(changes)
        ({KEY: {from, to, requested}}; for a mapping such as env, from/to hold the changed entries).
      type: list
      elements: dict
      sample:
        - id: deepep_normal_mode_needs_nvlink
          changes: {deepep_mode: {from: auto, to: low_latency, requested: false}}
matched:
  description: Ids of every matching row (errors, warnings, adjustments).
  returned: always
  type: list
  elements: str
adjusted_settings:
  description: The server settings with every adjustment applied, secrets left out.
  returned: always
  type: dict
settings_changes:
  description: Only the changed settings (env entries merged); combine recursively onto epforge_server.
  returned: always
  type: dict
  sample: {deepep_mode: low_latency, env: {FLASHINFER_CUDA_ARCH_LIST: "12.0a"}}
messages:
  description: One plain line per finding (errors, then adjustments, then warnings).
  returned: always
  type: list
  elements: str
context:
  description: The facts the rules read (gpu, target, stack), for the record.
  returned: always
  type: dict
server_object:
  description:
    - The server settings object (schema, sglang_version, settings, adjustments, argv, env, digest); {} when
      the settings are empty. Not built when an error row matched.
  returned: when sglang_version is set
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import (
    TableError,
    evaluate,
    format_adjustment,
    format_finding,
)
from ansible_collections.epforge.ep.plugins.module_utils.releases import env_site_dirs, installed_releases
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import secret_values
from ansible_collections.epforge.ep.plugins.module_utils.server_object import build as build_server_object


def refuse_another_verdict(module: AnsibleModule, expected: list[str] | None, result: dict) -> None:
    """After the install: the releases now installed must give the verdict the settings were built with."""
    if expected is None:
        return
    got = [a["id"] for a in result["findings"]["adjustments"]]
    errors = [f["id"] for f in result["findings"]["errors"]]
    if sorted(got) == sorted(expected) and not errors:
        return
    installed = result["context"]["installed"]
    releases = ", ".join(f"{k} {v}" for k, v in installed.items() if k != "source" and v)
    module.fail_json(
        msg=f"the installed releases ({releases}) give another known-issues verdict than the one the server "
        f"settings were built with (adjusted then: {', '.join(expected) or 'none'}; now: "
        f"{', '.join(got) or 'none'}; errors now: {', '.join(errors) or 'none'}). The argv is not changed "
        "after the install, so the launch is refused: pin the stack's releases, or run preflight again "
        "against this env",
        **result,
    )


ARGUMENT_SPEC = {
    "table": {"type": "dict", "required": True},
    "gpu_facts": {"type": "dict", "default": {}},
    "stack": {"type": "dict", "required": True},
    "server": {"type": "dict", "default": {}},
    "fail_on_error": {"type": "bool", "default": True},
    "env": {"type": "path", "default": ""},
    "expect_adjustments": {"type": "list", "elements": "str"},
    "sglang_version": {"type": "str", "default": ""},
    "flag_table": {"type": "dict", "default": {}},
    "model_dir": {"type": "path", "default": "/var/lib/epforge/models"},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    params = module.params
    # Mask secrets of the settings everywhere in the output, the invocation record included.
    module.no_log_values.update(secret_values(params["server"] or {}))
    installed = None
    if params["env"]:
        if not os.path.isdir(params["env"]):
            module.fail_json(msg=f"env {params['env']} does not exist: no installed release to judge")
        installed = installed_releases(env_site_dirs(params["env"]))
    try:
        result = evaluate(
            params["table"], params["gpu_facts"] or {}, params["stack"], params["server"] or {}, installed
        )
    except TableError as exc:
        module.fail_json(msg=f"the known-issues table is malformed: {exc}; fix data/known_issues.yml")
    findings = result["findings"]
    result["messages"] = (
        [f"ERROR {format_finding(f)}" for f in findings["errors"]]
        + [f"ADJUSTED {format_adjustment(a)}" for a in findings["adjustments"]]
        + [f"WARNING {format_finding(f)}" for f in findings["warnings"]]
    )
    if findings["errors"] and params["fail_on_error"]:
        module.fail_json(
            msg=f"{len(findings['errors'])} known dead end(s) in the requested server settings: "
            + " | ".join(format_finding(f) for f in findings["errors"]),
            **result,
        )
    refuse_another_verdict(module, params["expect_adjustments"], result)
    for warning in findings["warnings"]:
        module.warn(format_finding(warning))
    version = params["sglang_version"]
    if version and not findings["errors"]:
        try:
            result["server_object"] = build_server_object(
                result, version, params["flag_table"], params["model_dir"]
            )
        except ValueError as exc:
            module.fail_json(
                msg=f"the server settings cannot be rendered for SGLang {version}: {exc}", **result
            )
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
