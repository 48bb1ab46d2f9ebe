#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: publish a fetched wheel build into the controller-side cache, atomically."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_cache
short_description: Publish a wheel and its manifest into the controller's wheel cache atomically
description:
  - Checks that O(src) holds a C(manifest.json) and the wheel it names with the recorded sha256 and key,
    then renames O(src) to C(DEST) (O(cache_dir)C(/KEY)), so readers see either no entry or a complete one.
  - When C(DEST) already holds a complete entry the entry is left as it is and O(src) is removed; that
    removal is a change (changed=true) when O(src) is a directory, and nothing is left to do (changed=false)
    when it is not there (a rerun).
options:
  src:
    description: Directory holding the fetched wheel and C(manifest.json) (on the same file system as the
      cache).
    type: path
    required: true
  cache_dir:
    description: The extension's cache directory (C(<cache>/wheels/<name>)).
    type: path
    required: true
  key:
    description: The build key; the entry is C(cache_dir/key).
    type: str
    required: true
extends_documentation_fragment:
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode changes nothing and reports the change a real run makes - publishing O(src), or removing
      O(src) beside an entry already complete.
  diff_mode:
    support: partial
    details: >-
      A real run that publishes the entry returns a diff naming it, one that removes O(src) a diff naming
      O(src); check mode returns none.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Publish the fetched canary wheel
  epforge.ep.cuda_extension_cache:
    src: /root/.cache/epforge/wheels/canary/.incoming-3f0c9a1b2d4e5f607182
    cache_dir: /root/.cache/epforge/wheels/canary
    key: 3f0c9a1b2d4e5f607182
  delegate_to: localhost
"""

RETURN = r"""
wheel:
  description: The wheel's path in the cache.
  returned: success
  type: str
manifest:
  description: The entry's manifest.
  returned: success
  type: dict
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import cache_entry, publish_dir


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "cache_dir": {"type": "path", "required": True},
            "key": {"type": "str", "required": True, "no_log": False},  # a build key (a digest)
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = os.path.join(p["cache_dir"], p["key"])
    manifest = cache_entry(dest)
    if manifest:
        # The entry is there already: O(src) is a second copy, removed (a change where it exists).
        removed = os.path.isdir(p["src"]) and not os.path.islink(p["src"])
        out = {"changed": removed, "wheel": os.path.join(dest, manifest["wheel"]), "manifest": manifest}
        if removed and not module.check_mode:
            shutil.rmtree(p["src"], ignore_errors=True)
            out["diff"] = {"before": {"src": p["src"]}, "after": {"src": None}}
        module.exit_json(**out)
    incoming = cache_entry(p["src"])
    if not incoming:
        module.fail_json(
            msg=f"{p['src']} holds no complete build (manifest.json and a wheel with its sha256)"
        )
    if incoming.get("key") != p["key"]:
        module.fail_json(msg=f"{p['src']} holds key {incoming.get('key')}, not {p['key']}")
    if module.check_mode:
        module.exit_json(changed=True, wheel=os.path.join(dest, incoming["wheel"]), manifest=incoming)
    publish_dir(p["src"], dest)
    manifest = cache_entry(dest)
    module.exit_json(
        changed=True,
        wheel=os.path.join(dest, manifest["wheel"]),
        manifest=manifest,
        diff={"before": {"entry": None}, "after": {"entry": dest}},
    )


if __name__ == "__main__":
    main()
