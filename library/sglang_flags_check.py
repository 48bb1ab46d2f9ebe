#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: validate SGLang server settings with the installed SGLang's own argument parser."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_flags_check
short_description: Validate SGLang server flags with the installed SGLang's own parser
description:
  - Renders epforge server settings (C(epforge_server)) to the argv of C(python -m sglang.launch_server)
    with C(plugins/module_utils/sglang_args.py), after refusing shape errors (unknown keys, wrong types).
  - Runs the parser of the SGLang installed in the ML env (C(ServerArgs.add_cli_args) on an
    C(argparse.ArgumentParser)) in that env's python, as an argv list with the argv passed as JSON on
    stdin. An unknown flag, a bad choice or a non-integer number fails with SGLang's own argparse message
    (for example C(argument --deepep-mode) C(invalid choice)), the exit code 2 and the parser's output.
  - Where SGLang's construction of C(ServerArgs) is free of resolution (SGLang releases whose C(ServerArgs)
    has C(resolve_once), such as 0.5.23), also builds C(ServerArgs.from_cli_args), and checks the
    speculative algorithm name with SGLang's C(SpeculativeAlgorithm.from_string). Both need no GPU.
    Releases whose C(ServerArgs.__post_init__) resolves the whole configuration (it inspects the GPU and
    the model) get the parser check only.
  - The C(api_key) setting is never rendered into the checked argv and never returned; put secrets in
    I(settings), not in I(argv).
  - Changes no managed state, so it always reports changed=false. Its one write is the verdict cache
    O(cache_path) - this collection's own bookkeeping, which only this module and role C(sglang_server) (the
    check before a launch) read and which no user manages - and recording a verdict there is not reported as
    a change. In check mode it writes no verdict; otherwise the same run.
options:
  python:
    description: The python of the environment SGLang is installed in (the ML env).
    type: path
    required: true
  settings:
    description:
      - Server settings (keys in C(roles/sglang/README.md)); rendered with C(build_server_argv).
      - Exactly one of I(settings), I(argv) and I(server_object) is required.
    type: dict
  server_object:
    description:
      - A server settings object (C(plugins/module_utils/server_object.py); the sweep builds one per
        configuration). Its argv is judged as it is, and a success is remembered in I(cache_path) under the
        object's digest, which role C(sglang_server) requires before it launches that object. Refused when
        edited after it was built or rendered for another release than the installed one.
    type: dict
  argv:
    description: Flags of C(sglang.launch_server) to check as they are (instead of I(settings)).
    type: list
    elements: str
  sglang_version:
    description:
      - SGLang release whose flag names to render (some flags were renamed between releases).
      - Default the version of the sglang distribution installed for I(python) (read from its metadata).
    type: str
  require_model:
    description: Refuse settings without C(model_path).
    type: bool
    default: true
  use_parser:
    description:
      - Run SGLang's parser. When false only the shape checks run (for check mode before SGLang is
        installed).
    type: bool
    default: true
  construct:
    description: Also build C(ServerArgs) and check the speculative algorithm where that needs no GPU.
    type: bool
    default: true
  timeout:
    description: Seconds the parser may take (importing SGLang imports torch).
    type: int
    default: 180
  cache_path:
    description:
      - JSON file of the verdicts of successful checks, one per settings object's digest (a raw I(argv) or
        I(settings) by its flags). When the flags, the SGLang version, I(python), I(cache_evidence) and this
        module's check script are unchanged, the earlier outcome is returned without running the parser
        (no import of torch and SGLang on a rerun).
      - The parser never sees the environment, so an object whose flags were judged for another object
        (same argv, another env) is answered from that run, and its own verdict is recorded under its
        digest, which role C(sglang_server) looks for before a launch.
      - Keeps the newest 32 verdicts besides those of the current I(plan). Not written in check mode.
        Failed checks are never remembered.
      - An internal cache, not managed state - writing it is not reported as a change.
    type: path
  cache_evidence:
    description: Extra evidence the remembered outcome depends on (the install stamp's hash, for example).
    type: str
    default: ""
  plan:
    description:
      - The plan this object belongs to (a tuner run, a sweep). The verdicts of the plan named by the
        latest write are never dropped from I(cache_path), however many candidates it has, so its winner
        is not judged a second time; empty for a single object.
    type: str
    default: ""
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode writes no verdict to O(cache_path) (bookkeeping a real run does not report as a change
      either); otherwise the same run, with the same changed=false.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Validate the server settings against the installed SGLang
  epforge.ep.sglang_flags_check:
    python: /opt/epforge/ml/bin/python
    settings:
      model_path: /models/Qwen3-30B-A3B
      tp_size: 4
      ep_size: 4
      moe_a2a_backend: deepep
      deepep_mode: normal

- name: Check raw flags
  epforge.ep.sglang_flags_check:
    python: /opt/epforge/ml/bin/python
    argv: [--model-path, /models/x, --deepep-mode, low_latency]
"""

RETURN = r"""
argv:
  description: The checked flags (secrets never included).
  returned: always
  type: list
  elements: str
sglang_version:
  description: SGLang release the flags were rendered for and checked with.
  returned: when the parser ran
  type: str
parsed:
  description: The parsed value of every flag in I(argv), keyed by SGLang's argument name (dest).
  returned: success
  type: dict
  sample: {tp_size: 8, ep_size: 8, moe_a2a_backend: deepep, deepep_mode: low_latency}
constructed:
  description: Whether C(ServerArgs.from_cli_args) was built (false where that would resolve on a GPU).
  returned: success
  type: bool
warnings_sglang:
  description: Lines SGLang printed while parsing (deprecated flags, for example).
  returned: success
  type: list
  elements: str
cached:
  description: Whether the outcome came from I(cache_path) instead of a run of the parser.
  returned: success
  type: bool
notes:
  description: Findings of epforge about the flags (abbreviated flags that a later release may reject).
  returned: success
  type: list
  elements: str
parser_error:
  description: SGLang's own error line (argparse's C(error:) text) when the flags were refused.
  returned: failure
  type: str
problems:
  description: Shape errors found before SGLang was asked.
  returned: failure
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import tail
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import redact
from ansible_collections.epforge.ep.plugins.module_utils.server_object import problems as object_problems
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    build_server_argv,
    validate_settings,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_flags import (
    check_flags,
    hide_secrets,
    installed_version,
)


def sglang_version_of(module: AnsibleModule) -> str | None:
    """The SGLang version the flags are checked for: the option, else the installed one (with the parser)."""
    params = module.params
    python, version = params["python"], params["sglang_version"]
    if not params["use_parser"]:
        return version
    if not os.access(python, os.X_OK):
        module.fail_json(
            msg=f"python {python} does not exist or is not executable: install the ML env "
            "(role ml_env) and SGLang (role sglang) first, or point python at them"
        )
    if version:
        return version
    version, out, query = installed_version(python)
    if not version:
        module.fail_json(
            msg=f"SGLang is not installed for {python}: run the sglang role first",
            cmd=query,
            rc=1,
            log_tail=tail(out),
        )
    return version


def argv_to_check(module: AnsibleModule, version: str | None) -> list[str]:
    """The raw argv, or the one rendered from the settings (refused first by epforge's own checks)."""
    params = module.params
    server = params["server_object"]
    if server is not None:
        problems = object_problems(server, version)
        if problems:
            module.fail_json(msg="server settings object refused: " + "; ".join(problems), problems=problems)
        return list(server["argv"])
    if params["settings"] is None:
        return list(params["argv"])
    problems = validate_settings(params["settings"], require_model=params["require_model"])
    if problems:
        module.fail_json(
            msg="server settings refused before SGLang was asked: " + "; ".join(problems),
            problems=problems,
        )
    return build_server_argv(params["settings"], include_secrets=False, sglang_version=version)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "settings": {"type": "dict"},
            "server_object": {"type": "dict"},
            "argv": {"type": "list", "elements": "str"},
            "sglang_version": {"type": "str"},
            "require_model": {"type": "bool", "default": True},
            "use_parser": {"type": "bool", "default": True},
            "construct": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 180},
            "cache_path": {"type": "path"},
            "cache_evidence": {"type": "str", "default": ""},
            "plan": {"type": "str", "default": ""},
        },
        required_one_of=[("settings", "argv", "server_object")],
        mutually_exclusive=[("settings", "argv", "server_object")],
        supports_check_mode=True,
    )
    params = module.params
    hide_secrets(module, module.params["settings"], module.params["argv"])
    version = sglang_version_of(module)
    argv = argv_to_check(module, version)
    shown_argv = redact(argv)
    if not params["use_parser"]:
        module.exit_json(
            changed=False,
            argv=shown_argv,
            parsed={},
            constructed=False,
            notes=[],
            warnings_sglang=[],
            sglang_version=version,
        )

    outcome = check_flags(
        module,
        params["python"],
        argv,
        version,
        construct=params["construct"],
        timeout=params["timeout"],
        cache_path=params["cache_path"],
        evidence=params["cache_evidence"],
        digest=(params["server_object"] or {}).get("digest", ""),
        reuse_digest=params["server_object"] is not None,
        plan=params["plan"],
    )
    module.exit_json(changed=False, argv=shown_argv, **outcome)


if __name__ == "__main__":
    main()
