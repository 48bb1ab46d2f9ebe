#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: assemble a versioned CUDA_HOME from NVIDIA's PyPI wheels (CUDA 13 and later)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_toolkit_pypi
short_description: Assemble a versioned CUDA_HOME from NVIDIA's PyPI wheels
description:
  - Downloads the pinned wheels (C(pip download --no-deps)) into a cache directory and unpacks their
    C(nvidia/cuMAJOR/{bin,include,lib,nvvm}) trees into O(prefix), then adds what a full toolkit has and
    the wheels lack, so nvcc and torch's C(cpp_extension) accept the prefix as C(CUDA_HOME)
    (C(lib64 -> lib), C(targets/x86_64-linux/{include,lib}), unversioned C(libcudart.so)-style links,
    the wheels' C(*.dist-info) under C(dist-info/) for provenance).
  - CCCL (thrust, cub, cuda/std) stays in C(include/cccl) as in CUDA 13 toolkits; nvcc adds it through
    C(bin/nvcc.profile); host compilers need C(-I PREFIX/include/cccl).
  - With O(link_stub), builds C(lib/stubs/libcuda.so) (SONAME C(libcuda.so.1)), a link-only stub of the
    driver library that a full toolkit ships and no wheel has, from the prefix's own C(cuda.h) with the C
    compiler O(cc). Code that links C(-lcuda) (FlashInfer's JIT) needs it; at run time the driver's
    C(libcuda.so.1) is loaded instead.
  - Work happens in C(PREFIX.epforge-new); nvcc there must report O(cuda_version) before the prefix is
    replaced, so a wrong wheel set changes nothing. A prefix holding another CUDA version, or not made by
    this module, is never overwritten.
  - Idempotent by evidence, a stamp C(PREFIX/.epforge-cuda-toolkit.json) of the inputs (version, wheel
    list, prefix, stub); when it matches and C(bin/nvcc) is there, nothing runs.
  - Refuses CUDA 12.x (NVIDIA's CUDA 12 wheels carry no nvcc) and unpinned wheels, before anything changes.
  - Check mode reports what would change; diff mode shows the stamp before and after.
options:
  prefix:
    description: The CUDA_HOME to create, one per version (for example C(/opt/epforge/cuda-13.0)).
    type: path
    required: true
  cuda_version:
    description: CUDA MAJOR.MINOR the wheels must provide (nvcc is checked against it).
    type: str
    required: true
  packages:
    description: Wheels as C(name==version); C(nvidia-cuda-nvcc) must be one of them.
    type: list
    elements: str
    required: true
  wheel_dir:
    description: Download cache of the wheels (kept, so a rebuild does not download again).
    type: path
    required: true
  pip_command:
    description: The pip to run as argv (default the module's Python, C(python -m pip)).
    type: list
    elements: str
    default: []
  index_url:
    description: C(--index-url) for pip (empty uses pip's configuration).
    type: str
    default: ""
  extra_index_urls:
    description: C(--extra-index-url) values.
    type: list
    elements: str
    default: []
  find_links:
    description: C(--find-links) values (a local directory of wheels works offline).
    type: list
    elements: str
    default: []
  link_stub:
    description: Build C(lib/stubs/libcuda.so) with O(cc).
    type: bool
    default: true
  cc:
    description: C compiler for the link stub.
    type: str
    default: gcc
  timeout:
    description: Seconds allowed for the download (each external command).
    type: int
    default: 900
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode downloads and unpacks nothing; it reports a change when the stamp does not hold the inputs.
  diff_mode:
    support: full
    details: The diff is the stamp (version, wheels, prefix, stub) before and after.
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: CUDA 13.0 from NVIDIA's wheels
  epforge.ep.cuda_toolkit_pypi:
    prefix: /opt/epforge/cuda-13.0
    cuda_version: "13.0"
    packages: "{{ epforge_stack_spec.cuda.pypi_packages }}"
    wheel_dir: /var/lib/epforge/cuda_toolkit/wheels
    log_path: /var/log/epforge/cuda_toolkit.log
"""

RETURN = r"""
home:
  description: The prefix (a CUDA_HOME).
  returned: always
  type: str
nvcc:
  description: Path of nvcc in the prefix.
  returned: always
  type: str
cuobjdump:
  description: Path of cuobjdump in the prefix, or empty when no wheel provides it.
  returned: success
  type: str
nvcc_release:
  description: Full nvcc version of a fresh install (for example C(13.0.88)).
  returned: changed and not check mode
  type: str
stamp:
  description: The input stamp (inputs and their sha256).
  returned: always
  type: dict
wheels:
  description: Wheel files unpacked (fresh install only).
  returned: changed and not check mode
  type: list
  elements: str
stub_symbols:
  description: Number of driver API symbols in the libcuda link stub (fresh install with link_stub).
  returned: changed and not check mode
  type: int
seconds:
  description: Time the install took.
  returned: changed and not check mode
  type: float
"""

import importlib.util
import json
import os
import re
import shutil
import sys
import time
import zipfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail
from ansible_collections.epforge.ep.plugins.module_utils.cuda import (
    TOOLKIT_LINKS,
    driver_api_symbols,
    parse_nvcc_release,
    stub_source,
    unversioned_links,
    wheel_root,
)
from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    read_stamp,
    stamp_holds,
    stamp_of,
    stamp_rewrite,
    write_stamp,
)
from ansible_collections.epforge.ep.plugins.module_utils.files import replace_dir
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv, pip_command
from ansible_collections.epforge.ep.plugins.module_utils.process import run_bounded, run_logged
from ansible_collections.epforge.ep.plugins.module_utils.pynames import normalize, wheel_name_version
from ansible_collections.epforge.ep.plugins.module_utils.stack import version_tuple

STAMP_NAME = ".epforge-cuda-toolkit.json"
# Bump when the assembled layout changes, so existing prefixes are rebuilt.
LAYOUT_VERSION = 1


class InstallError(Exception):
    def __init__(self, msg: str, argv: list[str] | None = None, rc: int | None = None):
        super().__init__(msg)
        self.msg, self.argv, self.rc = msg, argv, rc


def pinned(requirement: str) -> tuple[str, str] | None:
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!]+)\s*$", requirement)
    if not match:
        return None
    return normalize(match.group(1)), match.group(2)


def nvcc_release(nvcc: str) -> tuple[str, str] | None:
    proc = run_bounded([nvcc, "--version"], timeout=60)
    return parse_nvcc_release(proc.out) if proc.rc == 0 else None


def extract_wheel(path: str, root: str, dest: str) -> int:
    """Unpack the wheel's ROOT/ tree into dest (file modes kept) and its dist-info into dest/dist-info."""
    count = 0
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            name = info.filename
            if info.is_dir():
                continue
            if name.startswith(root + "/"):
                rel = name[len(root) + 1 :]
                first = rel.split("/", 1)[0]
                if first.startswith(".") and first != "..":  # .metadata: build provenance, not toolkit
                    continue
            elif name.split("/", 1)[0].endswith(".dist-info"):
                rel = "dist-info/" + name
            else:
                continue
            target = os.path.normpath(os.path.join(dest, rel))
            if not target.startswith(dest + os.sep):
                raise InstallError(f"wheel {os.path.basename(path)} has an unsafe path {name}")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with wheel.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            # Wheels store owner-only exec bits (0744); a toolkit is readable and runnable by every user.
            os.chmod(target, 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
            count += 1
    return count


def add_links(home: str) -> None:
    for link, target in TOOLKIT_LINKS.items():
        path = os.path.join(home, link)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            os.symlink(target, path)
    lib = os.path.join(home, "lib")
    if os.path.isdir(lib):
        for link, target in unversioned_links(os.listdir(lib)).items():
            os.symlink(target, os.path.join(lib, link))


def build_stub(home: str, cc: str, log_path: str, timeout: int) -> int:
    """lib/stubs/libcuda.so from this prefix's cuda.h; returns the number of symbols."""
    cuda_h = os.path.join(home, "include", "cuda.h")
    if not os.path.isfile(cuda_h):
        raise InstallError(
            "no include/cuda.h in the wheels (nvidia-cuda-runtime provides it): add that "
            "wheel or set link_stub false"
        )
    stubs = os.path.join(home, "lib", "stubs")
    os.makedirs(stubs, exist_ok=True)
    names: set[str] = set()
    # Three views of cuda.h: default names (cuMemAlloc_v2), per-thread-stream names (_ptsz/_ptds) and the
    # unversioned legacy names the real libcuda also exports.
    for defines in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], ["-D__CUDA_API_VERSION_INTERNAL"]):
        argv = [cc, "-E", "-P", *defines, "-I", os.path.join(home, "include"), "-x", "c", cuda_h]
        proc = run_bounded(argv, timeout=timeout)
        if proc.rc == 127:
            raise InstallError(
                f"C compiler '{cc}' not runnable ({proc.err}): install gcc (apt install gcc) "
                "or set link_stub false",
                argv,
                127,
            )
        if proc.rc != 0:
            raise InstallError(f"preprocessing cuda.h failed: {tail(proc.err, 10)}", argv, proc.rc)
        names.update(driver_api_symbols(proc.out))
    if not names:
        raise InstallError("found no driver API declarations in include/cuda.h")
    source = os.path.join(stubs, "libcuda-stub.c")
    with open(source, "w", encoding="utf-8") as handle:
        handle.write(stub_source(sorted(names)))
    argv = [
        cc,
        "-shared",
        "-fPIC",
        "-O0",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        os.path.join(stubs, "libcuda.so"),
        source,
    ]
    rc, _unused = run_logged(argv, log_path, timeout=timeout, header="libcuda link stub")
    if rc != 0:
        raise InstallError("building the libcuda link stub failed", argv, rc)
    return len(names)


def request_problem(p: dict, prefix: str, version: str, pins: list) -> str | None:
    """Why the requested version, pins or prefix cannot be installed, before anything changes; else None."""
    vt = version_tuple(version)
    if len(vt) < 2:
        return f"cuda_version '{version}' is not MAJOR.MINOR"
    if vt[0] < 13:
        return (
            f"the pypi method cannot install CUDA {version}: NVIDIA's CUDA 12 wheels "
            "(nvidia-cuda-nvcc-cu12) carry ptxas and headers but no nvcc; use method "
            "nvidia_repo (cuda-toolkit-12-x from NVIDIA's apt repository) or existing"
        )
    unpinned = [req for req, pin in pins if pin is None]
    if not p["packages"] or unpinned:
        return (
            "every wheel must be pinned as name==version so the prefix is reproducible; "
            f"not pinned: {', '.join(unpinned) or '(empty list)'}"
        )
    if "nvidia-cuda-nvcc" not in {pin[0] for _req, pin in pins}:
        return "packages lack nvidia-cuda-nvcc: without it the prefix has no nvcc"
    if prefix in ("", "/") or len(prefix.split("/")) < 3:
        return (
            f"prefix '{prefix}' is too close to / for a toolkit prefix: use e.g. /opt/epforge/cuda-{version}"
        )
    return None


def existing_prefix_problem(prefix: str, old: dict | None, version: str) -> str | None:
    """Why an existing prefix must not be replaced (not ours, not a directory, another CUDA); else None."""
    if not os.path.lexists(prefix):
        return None
    if not os.path.isdir(prefix) or os.path.islink(prefix):
        return (
            f"prefix {prefix} exists and is not a directory: choose another cuda_toolkit_prefix or remove it"
        )
    if old is None and os.listdir(prefix):
        return (
            f"prefix {prefix} exists, is not empty and was not assembled by epforge "
            f"(no {STAMP_NAME}): it is never overwritten; choose another "
            "cuda_toolkit_prefix or remove it"
        )
    old_version = (old or {}).get("inputs", {}).get("cuda_version")
    if old_version and old_version != version:
        return (
            f"prefix {prefix} holds CUDA {old_version}; it is never replaced by CUDA "
            f"{version}: use a versioned prefix such as /opt/epforge/cuda-{version}"
        )
    return None


def pip_download_argv(p: dict) -> list[str]:
    """pip download of the pinned wheels, binary only, from the configured indexes and links."""
    pip = p["pip_command"] or pip_command(sys.executable)
    if not p["pip_command"] and importlib.util.find_spec("pip") is None:
        raise InstallError(
            f"pip is not installed for {sys.executable}: install it (apt install "
            "python3-pip) or set cuda_toolkit_pip_command to a pip that is"
        )
    argv = pip_argv(pip, "download", "--no-deps", "--only-binary", ":all:", "-d", p["wheel_dir"])
    if p["index_url"]:
        argv += ["--index-url", p["index_url"]]
    for url in p["extra_index_urls"]:
        argv += ["--extra-index-url", url]
    for link in p["find_links"]:
        argv += ["--find-links", link]
    return argv + p["packages"]


def download_wheels(p: dict, pins: list, version: str) -> list[str]:
    """Download the pinned wheels into wheel_dir; return their paths in the order of the pins."""
    os.makedirs(p["wheel_dir"], exist_ok=True)
    argv = pip_download_argv(p)
    rc, _unused = run_logged(
        argv, p["log_path"], timeout=p["timeout"], header=f"cuda_toolkit pypi {version} download"
    )
    if rc != 0:
        hint = " (timed out)" if rc == 124 else ""
        raise InstallError(
            f"pip download of the CUDA {version} wheels failed{hint}: check the index "
            "(cuda_toolkit_pip_index_url) and the pins in the stack",
            argv,
            rc,
        )
    available = {}
    for name in os.listdir(p["wheel_dir"]):
        dist = wheel_name_version(name)
        if dist:
            available[dist] = os.path.join(p["wheel_dir"], name)
    wheels = []
    for req, pin in pins:
        if pin not in available:
            raise InstallError(f"pip reported success but no wheel for {req} is in {p['wheel_dir']}")
        wheels.append(available[pin])
    return wheels


def assemble(p: dict, staging: str, wheels: list[str], *, version: str, prefix: str, stamp: dict):
    """Unpack the wheels into staging as a CUDA_HOME, check its nvcc, add the link stub and the stamp.

    Returns (nvcc's (version, release), number of stub symbols).
    """
    if os.path.lexists(staging):
        shutil.rmtree(staging)
    os.makedirs(staging)
    root = wheel_root(version_tuple(version)[0])
    files = sum(extract_wheel(path, root, staging) for path in wheels)
    if not os.access(os.path.join(staging, "bin", "nvcc"), os.X_OK):
        raise InstallError(f"the wheels hold no {root}/bin/nvcc (unpacked {files} files)")
    add_links(staging)
    found = nvcc_release(os.path.join(staging, "bin", "nvcc"))
    if not found or found[0] != version:
        raise InstallError(
            f"the wheels' nvcc reports CUDA {found[0] if found else 'unknown'}, not "
            f"{version}: fix the nvidia-cuda-nvcc pin in the stack; {prefix} was not "
            "changed"
        )
    symbols = build_stub(staging, p["cc"], p["log_path"], p["timeout"]) if p["link_stub"] else 0
    write_stamp(os.path.join(staging, STAMP_NAME), stamp)
    return found, symbols


ARGUMENT_SPEC = {
    "prefix": {"type": "path", "required": True},
    "cuda_version": {"type": "str", "required": True},
    "packages": {"type": "list", "elements": "str", "required": True},
    "wheel_dir": {"type": "path", "required": True},
    "pip_command": {"type": "list", "elements": "str", "default": []},
    "index_url": {"type": "str", "default": ""},
    "extra_index_urls": {"type": "list", "elements": "str", "default": []},
    "find_links": {"type": "list", "elements": "str", "default": []},
    "link_stub": {"type": "bool", "default": True},
    "cc": {"type": "str", "default": "gcc"},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 900},
}


class CudaToolkitPypi:
    """A CUDA toolkit prefix assembled from pinned PyPI wheels: kept when its stamp holds the same inputs,
    else built beside it and swapped in whole, so a failed install never leaves a half prefix."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        self.prefix = os.path.abspath(self.p["prefix"]).rstrip("/")
        self.version = str(self.p["cuda_version"])
        self.stamp_path = os.path.join(self.prefix, STAMP_NAME)
        self.nvcc = os.path.join(self.prefix, "bin", "nvcc")
        self.cuobjdump = os.path.join(self.prefix, "bin", "cuobjdump")

    def inputs(self, pins: list) -> dict:
        """What the prefix is built from (the stamp's inputs); fails on a request that cannot be installed,
        before anything changes."""
        p, prefix, version = self.p, self.prefix, self.version
        problem = request_problem(p, prefix, version, pins)
        if problem:
            self.module.fail_json(msg=problem)
        return {
            "method": "pypi",
            "cuda_version": version,
            "packages": sorted(p["packages"]),
            "prefix": prefix,
            "link_stub": p["link_stub"],
            "layout": LAYOUT_VERSION,
        }

    def keep_current(self, old: dict | None, inputs: dict, *, stamp: dict, result: dict) -> None:
        """Answer when the prefix already holds these inputs; returns when it does not."""
        module, cuobjdump = self.module, self.cuobjdump
        if stamp_holds(old, inputs) and os.access(self.nvcc, os.X_OK):
            # a stamp an older epforge wrote for the same inputs: rewritten once in the current layout
            result["changed"] = stamp_rewrite(old, inputs)
            if result["changed"] and not module.check_mode:
                write_stamp(self.stamp_path, stamp)
            module.exit_json(cuobjdump=cuobjdump if os.access(cuobjdump, os.X_OK) else "", **result)

    def stamp_diff(self, old: dict | None, stamp: dict) -> dict:
        """The change a (re)build makes, shown as the stamp before and after."""
        return {
            "before": json.dumps(old, indent=2, sort_keys=True) + "\n" if old else "",
            "after": json.dumps(stamp, indent=2, sort_keys=True) + "\n",
            "before_header": self.stamp_path,
            "after_header": self.stamp_path,
        }

    def install(self, pins: list, *, stamp: dict, result: dict, diff: dict) -> None:
        """Download, assemble in a staging dir and swap it in; on failure the staging dir is removed and
        the old prefix stays."""
        module, p, prefix, version = self.module, self.p, self.prefix, self.version
        cuobjdump = self.cuobjdump
        started = time.monotonic()
        log_path = p["log_path"]
        staging = prefix + ".epforge-new"
        try:
            wheels = download_wheels(p, pins, version)
            found, symbols = assemble(p, staging, wheels, version=version, prefix=prefix, stamp=stamp)
            # The old prefix (same version, other inputs) is retired only once the new one is complete.
            replace_dir(staging, prefix, retired=prefix + ".epforge-old")
        except InstallError as exc:
            if os.path.lexists(staging):
                shutil.rmtree(staging, ignore_errors=True)
            if exc.argv:
                fail_cmd(
                    module,
                    exc.msg,
                    exc.argv,
                    exc.rc if exc.rc is not None else 1,
                    log_path=log_path,
                    **result,
                )
            module.fail_json(msg=exc.msg, log_path=log_path, **result)

        module.exit_json(
            changed=True,
            diff=diff,
            nvcc_release=found[1],
            wheels=[os.path.basename(w) for w in wheels],
            stub_symbols=symbols,
            seconds=round(time.monotonic() - started, 1),
            cuobjdump=cuobjdump if os.access(cuobjdump, os.X_OK) else "",
            **{k: v for k, v in result.items() if k != "changed"},
        )

    def run(self) -> None:
        """Keep a current prefix, refuse one that must not be replaced, else (re)build it (check mode: the
        diff only)."""
        module, p, prefix, version = self.module, self.p, self.prefix, self.version
        pins = [(req, pinned(req)) for req in p["packages"]]
        inputs = self.inputs(pins)
        old = read_stamp(self.stamp_path)
        stamp = stamp_of(inputs)
        result = {"home": prefix, "nvcc": self.nvcc, "stamp": stamp, "changed": False}
        self.keep_current(old, inputs, stamp=stamp, result=result)
        problem = existing_prefix_problem(prefix, old, version)
        if problem:
            module.fail_json(msg=problem, **result)

        diff = self.stamp_diff(old, stamp)
        if module.check_mode:
            module.exit_json(
                changed=True, diff=diff, cuobjdump="", **{k: v for k, v in result.items() if k != "changed"}
            )
        self.install(pins, stamp=stamp, result=result, diff=diff)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    CudaToolkitPypi(module).run()


if __name__ == "__main__":
    main()
