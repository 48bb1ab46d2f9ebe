#!/usr/bin/python
# Copyright: (c) 2026, epforge developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: build a PyTorch CUDA extension wheel in a temp dir and publish it atomically."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cuda_extension_build
short_description: Build a PyTorch CUDA extension wheel once per key, atomically
description:
  - Builds C(pip wheel --no-deps --no-build-isolation) of the source with the venv of O(python), CUDA_HOME
    O(cuda_home), C(TORCH_CUDA_ARCH_LIST) from O(archs) and a bounded C(MAX_JOBS), then O(build_env) on top.
  - The source is copied (or unpacked) into a fresh temp dir C(OUT_DIR/.tmp-KEY-*) and the wheel is built
    there; only a complete build (one wheel holding at least one C(.so)) is renamed to C(OUT_DIR/KEY/)
    together with its C(manifest.json) (wheel name, sha256, inputs). A killed or failed build leaves no
    entry; its temp dir is removed on the next run.
  - Does nothing when C(OUT_DIR/KEY/) already holds a complete entry.
  - The compiler output goes to O(log_path) (C(tail -f) it); O(timeout) bounds the build.
  - When the venv has NVIDIA's CUDA header wheels (C(site-packages/nvidia/cu*/include)), they are appended
    to C(CPATH), since a toolkit assembled from wheels may lack the cuBLAS/cuSPARSE headers that torch's
    ATen includes.
options:
  name:
    description: Extension name (log header, manifest).
    type: str
    required: true
  key:
    description: The build key (from M(epforge.ep.cuda_extension_plan)); names the output directory.
    type: str
    required: true
  inputs:
    description: The inputs the key was computed from (recorded in the manifest).
    type: dict
    default: {}
  source:
    description: >-
      Source directory, or a C(.tar.gz) made by M(epforge.ep.cuda_extension_source) (its C(src/) is
      built).
    type: path
    required: true
  subdir:
    description: Directory of C(setup.py) inside the source.
    type: str
    default: ""
  python:
    description: Interpreter of the venv with torch and the build tools.
    type: path
    required: true
  cuda_home:
    description: CUDA_HOME of the toolchain.
    type: path
    required: true
  archs:
    description: Target archs; joined with C(;) into C(TORCH_CUDA_ARCH_LIST).
    type: list
    elements: str
    required: true
  build_env:
    description: Extra build environment, applied last.
    type: dict
    default: {}
  include_dirs:
    description: Extra include directories, prepended to C(CPATH).
    type: list
    elements: str
    default: []
  max_jobs:
    description: C(MAX_JOBS); 0 = min(CPUs, available GiB / 3, O(max_jobs_cap)).
    type: int
    default: 0
  max_jobs_cap:
    description: Upper bound of the automatic C(MAX_JOBS).
    type: int
    default: 16
  out_dir:
    description: Parent of the C(KEY/) output directory (a wheel cache).
    type: path
    required: true
  timeout:
    description: Seconds the build may take before it is killed.
    type: int
    default: 3600
extends_documentation_fragment:
  - epforge.ep.log_path
  - epforge.ep.attributes
attributes:
  check_mode:
    support: full
    details: >-
      Check mode builds nothing; it reports a change when the cache holds no complete entry for the key.
  diff_mode:
    support: none
  platform:
    platforms: posix
author: epforge developers (@epforge)
"""

EXAMPLES = r"""
- name: Build the canary (tail -f /var/log/epforge/cuda_extension-canary.log)
  epforge.ep.cuda_extension_build:
    name: canary
    key: "{{ plan.key }}"
    inputs: "{{ plan.inputs }}"
    source: /work/epforge/extensions/canary
    python: /opt/epforge/ml-env/bin/python
    cuda_home: /opt/epforge/cuda-13.0
    archs: ["12.0"]
    max_jobs: 2
    out_dir: /root/.cache/epforge/wheels/canary
    log_path: /var/log/epforge/cuda_extension-canary.log
    timeout: 1800
"""

RETURN = r"""
wheel:
  description: Path of the wheel in O(out_dir)C(/KEY/).
  returned: success
  type: str
  sample: /root/.cache/epforge/wheels/canary/3f0c9a1b2d4e5f607182/epforge_canary-0.1.0-cp311-linux_x86_64.whl
entry_dir:
  description: O(out_dir)C(/KEY).
  returned: success
  type: str
manifest:
  description: The entry's manifest (key, wheel, sha256, inputs, so_members).
  returned: success
  type: dict
seconds:
  description: Build time (0 when the entry already existed).
  returned: success
  type: float
max_jobs:
  description: C(MAX_JOBS) used.
  returned: success
  type: int
log_path:
  description: The build log.
  returned: always
  type: str
error_lines:
  description: On a failed build, the log lines that name the cause (compiler errors, missing tools).
  returned: failure
  type: list
  elements: str
"""

import glob
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.epforge.ep.plugins.module_utils.build import (
    MANIFEST,
    auto_max_jobs,
    build_env,
    cache_entry,
    clean_stale_staging,
    error_lines,
    find_wheels,
    make_manifest,
    publish_dir,
    safe_extract,
    staging_dir,
)
from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd, tail_file
from ansible_collections.epforge.ep.plugins.module_utils.content_hashes import tree_ignore
from ansible_collections.epforge.ep.plugins.module_utils.files import write_json_atomic
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv
from ansible_collections.epforge.ep.plugins.module_utils.process import run_logged


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def without_log(result: dict) -> dict:
    """The result's fields other than log_path (fail_cmd sets that one itself)."""
    return {k: v for k, v in result.items() if k != "log_path"}


def venv_cuda_includes(python: str) -> list[str]:
    venv = os.path.dirname(os.path.dirname(python))
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cu[0-9]*", "include")
    return sorted(glob.glob(pattern))


def stage_source(source: str, dest: str) -> str:
    """Copy a directory (without build products) or unpack a tarball into dest; return the tree root."""
    if os.path.isdir(source):
        shutil.copytree(
            source,
            dest,
            symlinks=True,
            ignore=tree_ignore,
        )
        return dest
    safe_extract(source, dest)
    # cuda_extension_source packs the tree under one top-level "src/" (the tree may have its own src/).
    entries = os.listdir(dest)
    if len(entries) == 1 and os.path.isdir(os.path.join(dest, entries[0])):
        return os.path.join(dest, entries[0])
    return dest


def fail_if_inputs_missing(module: AnsibleModule, p: dict, result: dict) -> None:
    """Refuse before anything changes when the interpreter, nvcc or the source is absent."""
    for path in (p["python"], os.path.join(p["cuda_home"], "bin", "nvcc"), p["source"]):
        if not os.path.exists(path):
            module.fail_json(msg=f"{path} does not exist on the build host", **result)


def extension_build_env(p: dict, max_jobs: int) -> dict:
    """The build environment: toolchain, archs, jobs, then the venv's CUDA headers appended to CPATH."""
    env = build_env(
        os.environ,
        cuda_home=p["cuda_home"],
        archs=p["archs"],
        max_jobs=max_jobs,
        extra_env=p["build_env"],
        include_dirs=p["include_dirs"],
        tool_dirs=[os.path.dirname(p["python"])],
    )
    extra_cpath = venv_cuda_includes(p["python"])
    if extra_cpath:
        env["CPATH"] = os.pathsep.join([*([env["CPATH"]] if env.get("CPATH") else []), *extra_cpath])
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    return env


def pip_wheel_argv(python: str, wheel_dir: str, build_dir: str) -> list[str]:
    return pip_argv(
        python, "wheel", "--no-deps", "--no-build-isolation", "--no-input", "-v", "-w", wheel_dir, build_dir
    )


def build_log_header(p: dict, env: dict, max_jobs: int, removed: list[str]) -> str:
    return (
        f"cuda_extension {p['name']} key {p['key']}: "
        f"TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']} "
        f"CUDA_HOME={p['cuda_home']} MAX_JOBS={max_jobs} CPATH={env.get('CPATH', '')}"
        + (f" (removed stale {', '.join(removed)})" if removed else "")
    )


def fail_build(module: AnsibleModule, p: dict, argv: list[str], rc: int, *, seconds: float, result: dict):
    log = p["log_path"]
    why = f"timed out after {p['timeout']} s" if rc == 124 else f"failed (rc {rc})"
    causes = error_lines(tail_file(log, lines=5000, max_bytes=2 * 1024 * 1024))
    cause = f"; first error lines: {' | '.join(causes[:3])}" if causes else ""
    msg = f"building {p['name']} {why} after {seconds:.0f} s{cause}; full log: {log}"
    fail_cmd(module, msg, argv, rc, log_path=log, error_lines=causes, **without_log(result))


def build_and_publish(
    module: AnsibleModule,
    p: dict,
    *,
    staging: str,
    entry_dir: str,
    max_jobs: int,
    removed: list[str],
    result: dict,
) -> None:
    """Build the wheel in staging, check it is one wheel with a compiled .so, publish it as entry_dir."""
    log = p["log_path"]
    tree = stage_source(p["source"], os.path.join(staging, "src"))
    build_dir = os.path.join(tree, p["subdir"]) if p["subdir"] else tree
    wheel_dir = os.path.join(staging, "wheel")
    env = extension_build_env(p, max_jobs)
    argv = pip_wheel_argv(p["python"], wheel_dir, build_dir)
    header = build_log_header(p, env, max_jobs, removed)
    rc, seconds = run_logged(argv, log, env=env, cwd=build_dir, timeout=p["timeout"], header=header)
    result["seconds"] = round(seconds, 1)
    if rc != 0:
        fail_build(module, p, argv, rc, seconds=seconds, result=result)
    wheels = find_wheels(wheel_dir)
    if len(wheels) != 1:
        fail_cmd(
            module,
            f"the build of {p['name']} produced {len(wheels)} wheels, expected 1",
            argv,
            rc,
            log_path=log,
            wheels=wheels,
            **without_log(result),
        )
    out = os.path.join(staging, "out")
    os.makedirs(out)
    wheel = os.path.join(out, os.path.basename(wheels[0]))
    os.rename(wheels[0], wheel)
    manifest = make_manifest(
        wheel,
        p["key"],
        p["inputs"],
        {"name": p["name"], "archs": p["archs"], "build_seconds": round(seconds, 1), "max_jobs": max_jobs},
    )
    if not manifest["so_members"]:
        fail_cmd(
            module,
            f"the wheel of {p['name']} holds no compiled .so: is it a CUDA extension?",
            argv,
            rc,
            log_path=log,
            **without_log(result),
        )
    write_json_atomic(os.path.join(out, MANIFEST), manifest)
    os.chmod(out, 0o755)  # noqa: S103  (a cache readers on the host may list)
    publish_dir(out, entry_dir)


ARGUMENT_SPEC = {
    "name": {"type": "str", "required": True},
    "key": {"type": "str", "required": True, "no_log": False},
    "inputs": {"type": "dict", "default": {}},
    "source": {"type": "path", "required": True},
    "subdir": {"type": "str", "default": ""},
    "python": {"type": "path", "required": True},
    "cuda_home": {"type": "path", "required": True},
    "archs": {"type": "list", "elements": "str", "required": True},
    "build_env": {"type": "dict", "default": {}},
    "include_dirs": {"type": "list", "elements": "str", "default": []},
    "max_jobs": {"type": "int", "default": 0},
    "max_jobs_cap": {"type": "int", "default": 16},
    "out_dir": {"type": "path", "required": True},
    "log_path": {"type": "path", "required": True},
    "timeout": {"type": "int", "default": 3600},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    p = module.params
    entry_dir = os.path.join(p["out_dir"], p["key"])
    result = {"changed": False, "entry_dir": entry_dir, "log_path": p["log_path"], "seconds": 0.0}

    manifest = cache_entry(entry_dir)
    if manifest:
        module.exit_json(
            wheel=os.path.join(entry_dir, manifest["wheel"]), manifest=manifest, max_jobs=0, **result
        )
    fail_if_inputs_missing(module, p, result)
    max_jobs = p["max_jobs"] or auto_max_jobs(os.cpu_count(), available_memory(), p["max_jobs_cap"])
    if module.check_mode:
        result["changed"] = True
        module.exit_json(
            wheel="",
            manifest={},
            max_jobs=max_jobs,
            msg=f"check mode: would build {p['name']} into {entry_dir}",
            **result,
        )

    removed = clean_stale_staging(p["out_dir"])
    staging = staging_dir(p["out_dir"], p["key"])
    try:
        build_and_publish(
            module, p, staging=staging, entry_dir=entry_dir, max_jobs=max_jobs, removed=removed, result=result
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = cache_entry(entry_dir)
    module.exit_json(
        changed=True,
        wheel=os.path.join(entry_dir, manifest["wheel"]),
        manifest=manifest,
        max_jobs=max_jobs,
        **{k: v for k, v in result.items() if k != "changed"},
    )


if __name__ == "__main__":
    main()
