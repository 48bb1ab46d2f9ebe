#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: find the stack's prebuilt DeepEP wheel and say whether it carries every target arch."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deepep_prebuilt
short_description: Find the downloaded prebuilt DeepEP wheel and judge its SASS against the target archs
description:
  - Looks in O(folder) for the wheel that C(pip download) gives O(requirement) (C(name-version-*.whl)).
    No wheel is an answer (RV(wheels) empty; the role downloads it), unless O(require_wheel); more than one
    is refused (stale downloads).
  - Reads the SASS of the wheel's binaries (C(*.so), host-only ones left out) with C(cuobjdump), from a
    temporary copy of each binary, and judges them against O(required_archs) with the rule of
    C(cuda_binary_archs) (plugins/module_utils/arch.py).
  - Keeps the reading in a stamp next to the wheel (C(WHEEL.archs.json)) keyed by the wheel file's sha256,
    the required archs and the reading rule; a rerun with the same wheel and archs answers from the stamp
    without running cuobjdump. A changed wheel or arch list reads the wheel again. A failed reading is not
    stamped.
  - Never fails for a wheel that lacks an arch or that cuobjdump cannot read; RV(ok) and RV(verdict) say
    so and the role decides (build from source, or refuse).
  - Check mode reads the wheel (or answers from the stamp) as a real run does but writes no stamp; it reports
    changed=true exactly where a real run would write the stamp (no stamp, or one of another wheel or arch
    list, and a reading that succeeded).
options:
  folder:
    description: Folder the wheel was downloaded to.
    type: path
    required: true
  requirement:
    description: The pip requirement of the wheel (V(sgl-deep-ep==0.1.2.post1)).
    type: str
    required: true
  required_archs:
    description: Target archs the wheel's binary must carry SASS for (V(12.0), V(9.0a), ...).
    type: list
    elements: str
    required: true
  cuobjdump:
    description: Path of C(cuobjdump).
    type: path
    required: true
  require_wheel:
    description: Fail when no wheel is in O(folder) (after the download that should have put it there).
    type: bool
    default: false
extends_documentation_fragment:
  - epforge.ep.timeout.cuobjdump
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode reads and judges the wheel as a real run does and writes no stamp; its changed is the real
      run's (true where the stamp would be written, by the same comparison of the stamp's key).
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Judge the stack's prebuilt DeepEP for sm_120
  epforge.ep.deepep_prebuilt:
    folder: /var/lib/epforge/deepep/prebuilt
    requirement: sgl-deep-ep==0.1.2.post1
    required_archs: ["12.0"]
    cuobjdump: /opt/epforge/cuda-13.0/bin/cuobjdump
  register: prebuilt
"""

RETURN = r"""
wheels:
  description: The wheels in O(folder) matching RV(pattern) (empty when none was downloaded yet).
  returned: always
  type: list
  elements: str
pattern:
  description: The file pattern of the requirement.
  returned: always
  type: str
  sample: sgl_deep_ep-0.1.2.post1-*.whl
wheel:
  description: The one wheel judged (empty when none).
  returned: always
  type: str
sha256:
  description: sha256 of RV(wheel).
  returned: when a wheel was found
  type: str
ok:
  description: The wheel carries SASS for every required arch.
  returned: always
  type: bool
verdict:
  description: One line naming the SASS found and the archs lacking (empty when no wheel was found).
  returned: always
  type: str
  sample: sgl-deep-ep==0.1.2.post1 carries SASS sm_90, sm_100, sm_103 and lacks 12.0 needed for arch list 12.0
sass_archs:
  description: Union of the SASS archs of the wheel's binaries.
  returned: always
  type: list
  elements: str
missing_archs:
  description: Required archs some binary lacks.
  returned: always
  type: list
  elements: str
files:
  description: Per binary with device code, its member name, SASS, PTX and the required archs it lacks.
  returned: always
  type: list
  elements: dict
error:
  description: Why the wheel could not be read (empty when it was).
  returned: always
  type: str
stamp:
  description: C(hit) (answered from the stamp), C(written) (read and stamped), C(would_write) (check mode,
    where a real run would stamp the reading), C(not_written) (a failed reading), C(none) (no wheel).
  returned: always
  type: str
watch:
  description:
    - For the probe cache (plugins/module_utils/watch.py), on an answer from the stamp (RV(stamp) C(hit)),
      whether the wheel is usable or not - the sorted paths it depends on - O(folder) (a wheel added or
      removed), the wheel and its stamp. C(cuobjdump) is not among them - a hit does not run it.
    - Empty when there is no wheel (the role downloads one), the stamp was written, or the reading failed.
  returned: always
  type: list
  elements: str
"""

import fnmatch
import os
import zipfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.arch import arch_sort_key, check_required, parse_arch
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import file_sha256
from ansible_collections.epforge.ep.plugins.module_utils.cuobjdump import CuobjdumpError, read_wheel
from ansible_collections.epforge.ep.plugins.module_utils.deepep import (
    PREBUILT_BINARY_PATTERNS,
    prebuilt_stamp_key,
    prebuilt_verdict,
    prebuilt_wheel_glob,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import read_json, write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.watch import watch_list


def find_wheels(folder: str, pattern: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(os.path.join(folder, n) for n in names if fnmatch.fnmatch(n, pattern))


def read_archs(cuobjdump: str, wheel: str, archs: list[str], timeout: int) -> dict:
    """The reading a stamp keeps: each device-code binary's SASS/PTX and what it lacks, and the unions."""
    files = []
    for member, listing in read_wheel(cuobjdump, wheel, PREBUILT_BINARY_PATTERNS, timeout).items():
        if listing["host_only"]:
            continue
        lacks = check_required(listing["sass"], listing["ptx"], archs, False)["missing"]
        files.append({"member": member, "sass": listing["sass"], "ptx": listing["ptx"], "missing": lacks})
    missing: list[str] = []
    for entry in files:
        missing.extend(a for a in entry["missing"] if a not in missing)
    sass = sorted({a for entry in files for a in entry["sass"]}, key=arch_sort_key)
    return {"files": files, "sass_archs": sass, "missing_archs": missing}


ARGUMENT_SPEC = {
    "folder": {"type": "path", "required": True},
    "requirement": {"type": "str", "required": True},
    "required_archs": {"type": "list", "elements": "str", "required": True},
    "cuobjdump": {"type": "path", "required": True},
    "require_wheel": {"type": "bool", "default": False},
    "timeout": {"type": "int", "default": 120},
}


class DeepEPPrebuilt:
    """The verdict on a prebuilt DeepEP wheel in the folder: its device code against the required archs,
    read once per wheel and archs and kept in a stamp beside it."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params

    def the_wheel(self) -> tuple[str, dict]:
        """The one wheel for the requirement and the answer's base fields; answers (no wheel) or fails
        (bad archs, several wheels, or none when one is required) here."""
        module, p = self.module, self.p
        bad = [arch for arch in p["required_archs"] if parse_arch(arch) is None]
        if bad or not p["required_archs"]:
            module.fail_json(
                msg=f"required_archs must list GPU archs such as 12.0, not {p['required_archs']}"
            )
        pattern = prebuilt_wheel_glob(p["requirement"])
        wheels = find_wheels(p["folder"], pattern)
        out = {
            "changed": False,
            "wheels": wheels,
            "pattern": pattern,
            "wheel": "",
            "ok": False,
            "verdict": "",
        }
        out.update({"sass_archs": [], "missing_archs": [], "files": [], "error": "", "stamp": "none"})
        out["watch"] = []
        if len(wheels) > 1 or (p["require_wheel"] and not wheels):
            module.fail_json(
                msg=f"expected one wheel for {p['requirement']} in {p['folder']}, found {wheels}: "
                "remove the stale ones",
                **out,
            )
        if not wheels:
            module.exit_json(**out)
        return wheels[0], out

    def reading(self, wheel: str, *, sha256: str, stamp_path: str) -> tuple[dict, str, str]:
        """(the archs reading, the stamp's state, an error): the stamp's reading when its key matches, else
        cuobjdump's, written to the stamp (check mode: would_write); an unreadable wheel is an error, not a
        failure, so the verdict can say why."""
        p = self.p
        key = prebuilt_stamp_key(sha256, p["required_archs"])
        stamp = read_json(stamp_path) or {}
        error = ""
        if stamp.get("key") == key and "reading" in stamp:
            return stamp["reading"], "hit", error
        reading, state = {}, "not_written"
        if not os.access(p["cuobjdump"], os.X_OK):
            error = f"cuobjdump not found at {p['cuobjdump']} (set deepep_cuobjdump)"
        else:
            try:
                reading = read_archs(p["cuobjdump"], wheel, p["required_archs"], p["timeout"])
            except CuobjdumpError as exc:
                error = f"{exc.msg}: {exc.log_tail.strip()}"
            except zipfile.BadZipFile as exc:
                error = f"{wheel} is not a readable wheel ({exc})"
        if not error and self.module.check_mode:
            state = "would_write"  # what a real run does below, written nowhere
        elif not error:
            write_json_atomic(
                stamp_path,
                {
                    "key": key,
                    "wheel": wheel,
                    "wheel_sha256": sha256,
                    "required_archs": p["required_archs"],
                    "reading": reading,
                },
            )
            state = "written"
        return reading, state, error

    def run(self) -> None:
        """Read (or recall) the wheel's archs and answer with the verdict."""
        p = self.p
        wheel, out = self.the_wheel()
        sha256 = file_sha256(wheel)
        stamp_path = wheel + ".archs.json"
        reading, state, error = self.reading(wheel, sha256=sha256, stamp_path=stamp_path)
        ok, verdict = prebuilt_verdict(p["requirement"], p["required_archs"], reading, error)
        out.update(reading)
        out.update(
            {
                "changed": state in ("written", "would_write"),
                "wheel": wheel,
                "sha256": sha256,
                "ok": ok,
                "verdict": verdict,
                "error": error,
                "stamp": state,
                # a hit is the no-op answer: the same wheel bytes (sha256) and stamp give it again
                "watch": watch_list([p["folder"], wheel, stamp_path]) if state == "hit" else [],
            }
        )
        self.module.exit_json(**out)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    DeepEPPrebuilt(module).run()


if __name__ == "__main__":
    main()
