#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: the tuner's plan for one host - its candidates, each judged before any launch."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tune_plan
short_description: Plan a tuning run - the candidate server settings of one host, judged before any launch
description:
  - Builds the search space of one host (issue 22, the tuner) - by default from its GPU facts and the
    requested settings (tensor parallel over every GPU; with two GPUs or more expert parallel with each
    all-to-all backend the installed SGLang offers of C(none) and C(deepep); speculative decoding off, and
    with O(draft_model) EAGLE3 at the two parameter sets the release picks from by architecture
    (C(3/1/4) and C(5/4/8) steps/topk/draft tokens), and NGRAM (no draft weights) when O(dataset) is a
    prompt file and the release has it; CUDA graphs off, at SGLang's default and up to the workload's largest
    concurrency; on PCIe hosts NCCL as it is and with C(NCCL_P2P_LEVEL=SYS NCCL_PROTO=LL,LL128,Simple), and
    SGLang's PCIe-IPC all-reduce on with NCCL as it is where known-issues row C(pcie_ipc_allreduce_opt_in)
    applies to TP over every GPU and the model is bf16 - see O(model_config)), or the grid or list given in
    O(space).
  - In the default space each CUDA-graph candidate sets every CUDA-graph setting of the decode phase itself,
    whatever O(server) says - graphs on drop its C(disable_cuda_graph), graphs off drop its batch sizes -
    and the request's own graph settings are one more candidate (C(graph-request)) when they are none of
    these. Such a candidate's C(note) and its plan line say what it replaces of the request.
  - Every candidate is the request with its changes over it, checked against the settings schema and the
    release's flag table (a malformed space fails here, naming each problem, before anything changes), then
    judged by the known-issues table - a known dead end is listed as refused with the rule and never
    launched - and rendered as its server settings object (argv, environment, digest) for the stack's
    SGLang. Two candidates that render the same argv and environment are one launch.
  - Where an earlier run decided on this host (O(earlier)), the candidates it found valid are tried first,
    its winner first, then the rest of its ranking (matched by name); then, where the collective probe
    measured the host (O(estimate)), the parallelism it found cheaper per decode step.
  - Runs in the controller's worker (meta/runtime.yml routes it through C(epforge.ep.controller_side));
    changes nothing, so check mode gives the same plan.
options:
  server:
    description: The requested settings the candidates change (C(epforge_server_request)).
    type: dict
    required: true
  gpu_facts:
    description: The host's GPU facts (C(epforge_gpu_facts) - C(gpu_count), C(archs), C(interconnect)).
    type: dict
    default: {}
  stack:
    description: The stack (C(epforge_stack_spec)).
    type: dict
    required: true
  table:
    description: The known-issues table (C(data/known_issues.yml)).
    type: dict
    required: true
  sglang_version:
    description: The stack's SGLang release; each planned candidate's object is rendered for it.
    type: str
    required: true
  flag_table:
    description: That release's flag table (C(data/sglang_flags/VERSION.json)); its C(moe_a2a_backend) choices
      bound the default space's backends.
    type: dict
    default: {}
  space:
    description:
      - The search space instead of the default - C(grid), a mapping of settings to the lists of values to try
        (every combination; the key C(env) lists environment sets), or C(list), candidates as
        C({name, server, env}).
    type: dict
    default: {}
  draft_model:
    description: >-
      A draft model for speculative decoding (EAGLE3, tried at two parameter sets); empty leaves EAGLE3 out
      of the space (NGRAM needs none - see O(dataset)).
    type: str
    default: ""
  concurrencies:
    description: The workload's concurrencies; the largest sets the bigger CUDA-graph batch size tried.
    type: list
    elements: int
    default: []
  dataset:
    description:
      - The workload's dataset. A speculative candidate planned on C(random-ids) is warned about - a draft's
        acceptance on random token ids says nothing about real text; tune speculation on a prompt file.
      - With a prompt file (C(custom) or C(sharegpt)) the default space also tries NGRAM speculation where the
        release's parser has it.
    type: str
    default: random-ids
  estimate:
    description: The collective probe's TP-vs-EP estimate rows (C(epforge_collective_probe.estimate)).
    type: list
    elements: dict
    default: []
  curve:
    description:
      - The collective probe's latency curve, each point with its variant's C(env) (role tuner adds it from
        C(epforge_collective_probe.variants)). Within the parallelism the estimate puts first, candidates
        whose NCCL settings (C(NCCL_*) of their env) had the lowest allreduce latency over decode's message
        sizes (up to 8 MiB) come first; settings the probe did not measure come after.
    type: list
    elements: dict
    default: []
  earlier:
    description:
      - The text of this host's last tuning fact (C(epforge_tuning), role tuner reads it from the host); empty
        when there is none. Its winner and the rest of its valid candidates, best first, go first in the plan
        (by name) - measured evidence from this host, ahead of the probe's estimate. Unreadable text is
        ignored, and the plan's C(order) says so.
    type: raw
    default: ""
  max_candidates:
    description:
      - The most candidates a space may hold. A larger one is refused from its size alone (a grid's is the
        product of its value lists' lengths, a list's its length), before any candidate is built or judged.
    type: int
    default: 128
  model_config:
    description:
      - The text of the model's C(config.json) as read from the host (role tuner reads it); empty when unread.
        Its C(torch_dtype) decides, under C(dtype=auto), whether SGLang's PCIe-IPC all-reduce (bf16 only) is
        tried in the default space; unread, it is tried with that reason in the plan.
    type: raw
    default: ""
extends_documentation_fragment:
  - epforge.ep.model_dir
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: Changes nothing; check mode gives the same plan.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Plan the tuning run of this host
  epforge.ep.tune_plan:
    server: "{{ epforge_server_request }}"
    gpu_facts: "{{ ansible_facts['epforge_gpu_facts'] }}"
    stack: "{{ epforge_stack_spec }}"
    table: "{{ lookup('ansible.builtin.file', epforge_data_dir ~ '/known_issues.yml') | from_yaml }}"
    sglang_version: "{{ epforge_stack_spec.sglang.version }}"
    flag_table: "{{ epforge_sglang_flag_table }}"
    concurrencies: [1, 16, 64]
    space:
      grid:
        cuda_graph_max_bs: [32, 64]
        env: [{}, {NCCL_P2P_LEVEL: SYS}]
"""

RETURN = r"""
candidates:
  description:
    - Every candidate in the order the tuner tries them - planned ones first (the cheaper parallelism first
      where the probe measured), then duplicates and refused ones.
    - Each has C(name), C(status) (C(planned), C(duplicate) or C(refused)), C(changes) and C(env) (what it
      lays over the request), C(settings) (the request with them), C(reason); a planned one its
      C(server_object) and C(adjustments); a duplicate the C(same_as) candidate; a refused one the known
      issues it hit (C(refused_by), each with C(id), C(consequence), C(remedy)).
    - A default-space candidate that changes the request's own CUDA-graph settings, or keeps them, says so
      in C(note).
  returned: always
  type: list
  elements: dict
space:
  description: How the space was made - C(kind) (default, grid or list) and its C(dimensions).
  returned: always
  type: dict
order:
  description: Why the candidates are in this order.
  returned: always
  type: str
counts:
  description: How many candidates are planned, duplicate and refused.
  returned: always
  type: dict
plan:
  description: >-
    The plan as lines to print (check mode shows it and launches nothing); the first gives the space's size
    and where it comes from (C(default space, 3 parallel x 4 cuda_graph x 2 nccl = 24 candidates (8 planned,
    16 duplicate, 0 refused))). Role tuner's README states the default space's bound.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.known_issues import TableError, evaluate
from ansible_collections.epforge.ep.plugins.module_utils.pcie_ipc import can_act
from ansible_collections.epforge.ep.plugins.module_utils.prompt_file import FILE_DATASETS
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import secret_values
from ansible_collections.epforge.ep.plugins.module_utils.server_env import env_warnings
from ansible_collections.epforge.ep.plugins.module_utils.server_object import build as build_server_object
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import validate_settings
from ansible_collections.epforge.ep.plugins.module_utils.tune_plan.space import (
    SpaceTooLarge,
    check_names,
    described_graphs,
    earlier_ranks,
    ep_first,
    graph_settings,
    nccl_costs,
    ordered,
    space_candidates,
)
from ansible_collections.epforge.ep.plugins.module_utils.tune_settings import settings_of

ARGUMENT_SPEC = {
    "server": {"type": "dict", "required": True},
    "gpu_facts": {"type": "dict", "default": {}},
    "stack": {"type": "dict", "required": True},
    "table": {"type": "dict", "required": True},
    "sglang_version": {"type": "str", "required": True},
    "flag_table": {"type": "dict", "default": {}},
    "model_dir": {"type": "path", "default": "/var/lib/epforge/models"},
    "model_config": {"type": "raw", "default": ""},
    "space": {"type": "dict", "default": {}},
    "draft_model": {"type": "str", "default": ""},
    "concurrencies": {"type": "list", "elements": "int", "default": []},
    "dataset": {"type": "str", "default": "random-ids"},
    "estimate": {"type": "list", "elements": "dict", "default": []},
    "curve": {"type": "list", "elements": "dict", "default": []},
    "max_candidates": {"type": "int", "default": 128},
    "earlier": {"type": "raw", "default": ""},
}


class Planner:
    """Builds, checks, judges and orders the candidates of one host."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params

    def pcie_ipc(self) -> tuple[bool, str]:
        """Whether the default space tries SGLang's PCIe-IPC all-reduce, and why (one plan line)."""
        p = self.params
        if p["space"]:
            return False, ""
        try:
            return can_act(p["table"], p["gpu_facts"], p["stack"], p["server"], p["model_config"])
        except TableError as exc:
            self.module.fail_json(
                msg=f"the known-issues table is malformed: {exc}; fix data/known_issues.yml"
            )
        return False, ""

    def space(self, pcie_ipc: bool = False) -> tuple[str, list[dict], list[str]]:
        p = self.params
        try:
            kind, candidates, dimensions = space_candidates(
                p["space"],
                p["gpu_facts"],
                flag_table=p["flag_table"],
                draft_model=p["draft_model"],
                concurrencies=p["concurrencies"],
                request=p["server"],
                limit=p["max_candidates"],
                pcie_ipc=pcie_ipc,
                prompt_file=p["dataset"] in FILE_DATASETS,
            )
        except SpaceTooLarge as exc:
            self.module.fail_json(msg=str(exc))
        except ValueError as exc:
            self.module.fail_json(msg=f"the search space is malformed: {exc}")
        problems = check_names(candidates)
        if problems:
            self.module.fail_json(msg="the search space is malformed: " + "; ".join(problems))
        return kind, candidates, dimensions

    def checked(self, candidates: list[dict]) -> list[dict]:
        """Each candidate with its settings; fails naming every schema problem (bad input, nothing judged)."""
        problems = []
        for candidate in candidates:
            candidate["settings"] = settings_of(self.params["server"], candidate)
            for problem in validate_settings(candidate["settings"], flag_table=self.params["flag_table"]):
                problems.append(f"{candidate['name']}: {problem}")
            # PATH or LD_PRELOAD of the candidate's own env (the request's were warned about in preflight)
            for warning in env_warnings(candidate.get("env"), f"tuner candidate {candidate['name']}: env"):
                self.module.warn(warning)
        if problems:
            self.module.fail_json(
                msg=f"{len(problems)} problem(s) in the candidates' settings: " + " | ".join(problems),
                problems=problems,
            )
        speculative = [c["name"] for c in candidates if c["settings"].get("speculative_algorithm")]
        if speculative and self.params["dataset"] == "random-ids":
            self.module.warn(
                f"{len(speculative)} speculative candidate(s) ({', '.join(speculative[:4])}"
                f"{', ...' if len(speculative) > 4 else ''}) are planned on random-ids: a draft's acceptance "
                "on random token ids will not match real text - tune them on your own prompts (dataset "
                "custom with prompt_file; docs/workloads.md)"
            )
        return candidates

    def judged(self, candidate: dict, digests: dict) -> dict:
        p = self.params
        try:
            verdict = evaluate(p["table"], p["gpu_facts"], p["stack"], candidate["settings"])
        except TableError as exc:
            self.module.fail_json(
                msg=f"the known-issues table is malformed: {exc}; fix data/known_issues.yml"
            )
        errors = verdict["findings"]["errors"]
        if errors:
            refused_by = [{k: f.get(k, "") for k in ("id", "consequence", "remedy")} for f in errors]
            reason = "refused by the known issues: " + ", ".join(f["id"] for f in refused_by)
            return dict(candidate, status="refused", refused_by=refused_by, reason=reason)
        try:
            server_object = build_server_object(verdict, p["sglang_version"], p["flag_table"], p["model_dir"])
        except ValueError as exc:
            self.module.fail_json(msg=f"candidate {candidate['name']} cannot be rendered for SGLang: {exc}")
        adjustments = [a["id"] for a in verdict["findings"]["adjustments"]]
        same = digests.get(server_object["digest"])
        if same:
            return dict(
                candidate, status="duplicate", same_as=same, reason=f"renders the same launch as {same}"
            )
        digests[server_object["digest"]] = candidate["name"]
        reason = "planned" + (f" (adjusted: {', '.join(adjustments)})" if adjustments else "")
        return dict(
            candidate, status="planned", server_object=server_object, adjustments=adjustments, reason=reason
        )

    def run(self) -> dict:
        pcie_ipc, pcie_ipc_reason = self.pcie_ipc()
        kind, candidates, dimensions = self.space(pcie_ipc)
        digests: dict = {}
        judged = [self.judged(c, digests) for c in self.checked(candidates)]
        ep_cheaper, order = ep_first(self.params["estimate"])
        nccl, nccl_order = nccl_costs(self.params["curve"])
        earlier, earlier_order = earlier_ranks(self.params["earlier"])
        order = f"{earlier_order}; {order}; {nccl_order}"
        planned = ordered([c for c in judged if c["status"] == "planned"], ep_cheaper, nccl, earlier)
        rest = [c for c in judged if c["status"] == "duplicate"] + [
            c for c in judged if c["status"] == "refused"
        ]
        counts = {
            status: sum(1 for c in judged if c["status"] == status)
            for status in ("planned", "duplicate", "refused")
        }
        tally = ", ".join(f"{number} {status}" for status, number in counts.items())
        # the count and where it comes from (roles/tuner/README.md states the default space's bound)
        sizes = " x ".join(f"{size} {name}" for name, size in dimensions)
        plan = [f"{kind} space, {sizes + ' = ' if sizes else ''}{len(judged)} candidates ({tally}); {order}"]
        if pcie_ipc_reason:
            plan.append(pcie_ipc_reason)
        own = graph_settings(self.params["server"]) if kind == "default" else {}
        if own:
            plan.append(
                f"cuda_graph: every candidate sets CUDA graphs itself over the request's "
                f"{described_graphs(own)} (each one's note says what it replaces or keeps)"
            )

        def line(c: dict) -> str:
            return f"{c['name']}: {c['reason']}" + (f" - {c['note']}" if c.get("note") else "")

        plan += [f"{i + 1:>3}. {line(c)}" for i, c in enumerate(planned)]
        plan += [f"  -  {line(c)}" for c in rest]
        return {
            "candidates": planned + rest,
            "space": {"kind": kind, "dimensions": [name for name, _size in dimensions]},
            "order": order,
            "counts": counts,
            "plan": plan,
        }


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.no_log_values.update(secret_values(module.params["server"] or {}))
    module.exit_json(changed=False, **Planner(module).run())


if __name__ == "__main__":
    main()
