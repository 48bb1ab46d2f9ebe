#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: adopt an existing python whose torch matches the stack (a GPU image's venv), read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ml_env_existing
short_description: Adopt an existing python whose torch matches the stack, verified and changed in no way
description:
  - For hosts whose image already holds torch (for example C(/opt/torch/.venv/bin/python3) with
    torch 2.11.0+cu130) it imports torch once in O(python) (no GPU needed) and reads C(torch.__version__),
    C(torch.version.cuda), C(torch.cuda.get_arch_list()), where torch is installed and the interpreter's
    prefix.
  - Adopts it only when the torch version equals O(torch_version) (a local part such as C(+cu130) is ignored)
    and its CUDA major equals the major of O(torch_cuda) and of O(toolkit_cuda), and its arch list covers
    every arch in O(archs). Otherwise it fails with a message naming what was found and what the stack wants.
  - Never creates, installs or replaces anything in the env (it runs the same in check mode).
  - With O(facts_dir) set the same call records the adopted env as the local fact C(epforge_ml_env) (JSON in
    O(facts_dir)C(/epforge_ml_env.fact)), written only when its content changes (nothing in check mode);
    that is the only change it can report. Supports diff mode.
    Later roles keep this torch by passing C(torch==VERSION) to every pip run (C(sglang_keep)) and by
    refusing a pip plan that would replace it.
  - Refuses, before running anything, a stack whose torch CUDA major differs from the toolkit's.
options:
  python:
    description: The interpreter to adopt (its torch is the ML env's torch).
    type: path
    required: true
  torch_version:
    description: torch version the stack wants (e.g. C(2.11.0)).
    type: str
    required: true
  torch_cuda:
    description: CUDA version the stack's torch build is made for (e.g. C(13.0)); only the major must match.
    type: str
    required: true
  toolkit_cuda:
    description: CUDA version of the toolkit extensions are built with; torch's CUDA major must equal it.
    type: str
    required: true
  archs:
    description: Target archs (C(12.0), C(9.0)); C(torch.cuda.get_arch_list()) must cover each.
    type: list
    elements: str
    required: true
  timeout:
    description: Seconds the torch import may take.
    type: int
    default: 300
extends_documentation_fragment:
  - epforge.ep.facts_dir.optional
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details: The only change, the local fact C(epforge_ml_env), is shown.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Adopt the image's torch as the ML env
  epforge.ep.ml_env_existing:
    python: /opt/torch/.venv/bin/python3
    torch_version: "{{ epforge_stack_spec.torch.version }}"
    torch_cuda: "{{ epforge_stack_spec.torch.cuda }}"
    toolkit_cuda: "{{ epforge_stack_spec.cuda.version }}"
    archs: "{{ epforge_stack_spec.arch_list }}"
"""

RETURN = r"""
python:
  description: The adopted interpreter.
  returned: always
  type: str
  sample: /opt/torch/.venv/bin/python3
prefix:
  description: The interpreter's sys.prefix (the env's directory).
  returned: success
  type: str
torch_version:
  description: torch.__version__.
  returned: success
  type: str
  sample: 2.11.0+cu130
torch_cuda:
  description: torch.version.cuda.
  returned: success
  type: str
  sample: "13.0"
torch_arch_list:
  description: torch.cuda.get_arch_list().
  returned: success
  type: list
  elements: str
torch_location:
  description: Directory torch is imported from.
  returned: success
  type: str
key:
  description: Hash of the inputs and the evidence.
  returned: success
  type: str
actions:
  description: Always empty (nothing is ever changed).
  returned: always
  type: list
  elements: str
verified:
  description: Whether torch was imported in this run (always true on success).
  returned: always
  type: bool
reason:
  description: C(adopted).
  returned: success
  type: str
fact_changed:
  description: Whether the local fact C(epforge_ml_env) changed (would change in check mode).
  returned: when facts_dir is set
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import torch_arch_missing
from ansible_collections.epforge.ep.plugins.module_utils.build import cuda_major, input_key
from ansible_collections.epforge.ep.plugins.module_utils.ml_env_fact import record_ml_env_fact
from ansible_collections.epforge.ep.plugins.module_utils.torch_env import torch_evidence, torch_inputs
from ansible_collections.epforge.ep.plugins.module_utils.version import base_version


def mismatches(evidence: dict, p: dict, archs: list[str]) -> list[str]:
    """Why this torch cannot be the stack's (empty when it can)."""
    problems = []
    if base_version(evidence["torch"]) != base_version(p["torch_version"]):
        problems.append(f"its torch is {evidence['torch']}, the stack wants {p['torch_version']}")
    found_major = cuda_major(evidence.get("cuda") or "")
    if found_major is None:
        problems.append(
            f"its torch {evidence['torch']} is a build without CUDA (torch.version.cuda is "
            f"{evidence.get('cuda')}), the stack wants CUDA {p['torch_cuda']}"
        )
    elif found_major != cuda_major(p["torch_cuda"]):
        problems.append(
            f"its torch {evidence['torch']} is built for CUDA {evidence['cuda']}, the stack "
            f"wants CUDA {p['torch_cuda']} (major {cuda_major(p['torch_cuda'])})"
        )
    not_covered = torch_arch_missing(evidence.get("archs") or [], archs)
    if not_covered:
        problems.append(
            f"torch.cuda.get_arch_list() {evidence.get('archs')} does not cover {', '.join(not_covered)}"
        )
    return problems


ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "torch_version": {"type": "str", "required": True},
    "torch_cuda": {"type": "str", "required": True},
    "toolkit_cuda": {"type": "str", "required": True},
    "archs": {"type": "list", "elements": "str", "required": True},
    "timeout": {"type": "int", "default": 300},
    "facts_dir": {"type": "path"},
}


class MlEnvExisting:
    """The module's one job: adopt an env that already holds torch, after its import proves the torch is
    the stack's; it changes nothing on the host."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.python = self.p["python"]
        self.result = {"changed": False, "python": self.python, "actions": [], "verified": False}

    def run(self) -> None:
        """Refuse bad input, import torch, refuse a torch that is not the stack's, else adopt the env."""
        p, python, result = self.p, self.python, self.result
        archs = self.checked_archs()
        evidence = self.evidence()
        self.refuse_mismatch(evidence, archs)
        inputs = {
            "python": python,
            "torch_version": p["torch_version"],
            "torch_cuda": p["torch_cuda"],
            "toolkit_cuda": p["toolkit_cuda"],
            "archs": archs,
        }
        result.update(reason="adopted", key=input_key({"inputs": inputs, "evidence": evidence}))
        record_ml_env_fact(self.module, "existing", evidence.get("prefix"), result)
        self.module.exit_json(**result)

    def checked_archs(self) -> list[str]:
        """The arch list, after the stack's own inputs and the interpreter's presence are checked (bad input
        fails before torch is imported)."""
        module, p, python, result = self.module, self.p, self.python, self.result
        _toolkit_major, archs = torch_inputs(
            module,
            p,
            result,
            lambda _toolkit, _torch: (
                f"the stack's torch {p['torch_version']} is built for CUDA {p['torch_cuda']} "
                f"but the toolkit is CUDA {p['toolkit_cuda']}: torch refuses to build "
                "extensions with an nvcc of another major version. Nothing was changed."
            ),
        )
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            module.fail_json(
                msg=(
                    f"ml_env method existing: {python} does not exist or is not executable; set "
                    "ml_env_existing_python to the interpreter of the env that holds torch. "
                    "Nothing was changed."
                ),
                **result,
            )
        return archs

    def evidence(self) -> dict:
        """Import torch with the env's interpreter; its answer goes into the result."""
        p, python, result = self.p, self.python, self.result
        evidence = torch_evidence(
            self.module,
            python,
            timeout=p["timeout"],
            failed=(
                f"ml_env method existing: importing torch with {python} failed, so it cannot "
                "be adopted (no torch there?). Nothing was changed."
            ),
            timed_out=f"importing torch in {python} took more than {p['timeout']} s",
            result=result,
        )
        result.update(
            verified=True,
            torch_version=evidence["torch"],
            torch_cuda=evidence.get("cuda"),
            torch_arch_list=evidence.get("archs") or [],
            torch_location=evidence.get("location"),
            prefix=evidence.get("prefix"),
        )
        return evidence

    def refuse_mismatch(self, evidence: dict, archs: list[str]) -> None:
        """Fail naming every way this torch differs from the stack's, and the remedies."""
        problems = mismatches(evidence, self.p, archs)
        if problems:
            self.module.fail_json(
                msg=(
                    f"ml_env method existing refuses {self.python}: "
                    + "; ".join(problems)
                    + ". Choose the stack that matches this env's torch (stacks/*.yml), or "
                    "ml_env_method: venv for a venv of its own. Nothing was changed."
                ),
                **self.result,
            )


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    MlEnvExisting(module).run()


if __name__ == "__main__":
    main()
