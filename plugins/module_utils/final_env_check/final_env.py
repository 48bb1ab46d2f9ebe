"""The final ML env as the server will import it: which distribution provides each module, which binaries
belong to each component, which SGLang feature needs which component, and whether a component's binaries
carry code for the hosts' GPU archs.

Pure functions (the env itself is read by payload env_owners, without importing its GPU packages). The
arch rule is plugins/module_utils/arch.py's (check_required), the cuobjdump parser epforge_cuda.py's; this
file only says what to check and what a missing arch means for the server. Used by library/final_env_check.py;
unit-tested in tests/unit/test_final_env.py.
"""

from __future__ import annotations

import fnmatch

from ansible_collections.epforge.ep.plugins.module_utils.arch import arch_sort_key, check_required
from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import dest_flag, flag_values
from ansible_collections.epforge.ep.plugins.module_utils.digests import digest_matches
from ansible_collections.epforge.ep.plugins.module_utils.pynames import normalize, wheel_name_version

# What the server imports, per component: the import name, further import names of the same package (DeepEP
# v1.x ships its extension as the top-level module deep_ep_cpp), and which of the owner's binaries hold the
# component's kernels (fnmatch on the path inside site-packages; all .so files when empty). A component
# marked jit compiles its kernels at first use when it ships none (flashinfer-python).
COMPONENTS: dict[str, dict] = {
    "torch": {"module": "torch", "binaries": ["torch/lib/libtorch_cuda.so"]},
    # sgl_kernel loads sm90/common_ops on compute capability 9.0 and sm100/common_ops on every other GPU
    # (sgl_kernel/load_utils.py); coverage is the union of both.
    "sgl_kernel": {"module": "sgl_kernel", "binaries": ["sgl_kernel/*common_ops*.so"]},
    # FlashAttention 3, imported by the fa3 attention backend only (inside try/except at import).
    "sgl_kernel.flash_ops": {"module": "sgl_kernel", "binaries": ["sgl_kernel/flash_ops*.so"]},
    "flashinfer": {"module": "flashinfer", "binaries": [], "jit": True},
    "deep_ep": {"module": "deep_ep", "also": ["deep_ep_cpp"], "binaries": []},
}

# SGLang features and the component whose kernels they need. A feature is requested when its predicate holds
# for the server settings; `serving` marks what every launch imports.
FEATURES: list[dict] = [
    {"feature": "serving (torch CUDA kernels)", "component": "torch", "serving": True},
    {"feature": "serving (sgl_kernel common ops)", "component": "sgl_kernel", "serving": True},
    {
        "feature": "attention_backend fa3",
        "component": "sgl_kernel.flash_ops",
        "setting": "attention_backend",
        "value": "fa3",
    },
    {
        "feature": "moe_a2a_backend deepep",
        "component": "deep_ep",
        "setting": "moe_a2a_backend",
        "value": "deepep",
    },
    {"feature": "flashinfer sampling/attention (JIT)", "component": "flashinfer", "serving": True},
]

ATTENTION_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


def wheel_distribution(wheel_name: str) -> tuple[str, str]:
    """'deep_ep-1.2.1+9af0e0d-cp311-cp311-linux_x86_64.whl' -> ('deep-ep', '1.2.1+9af0e0d')."""
    found = wheel_name_version(wheel_name)
    if found is None:
        raise ValueError(f"{wheel_name} is not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    return found


def setting_values(settings: dict, key: str) -> list[str]:
    """The values a setting takes in epforge_server: the key itself and the same flag in extra_args
    (['--attention-backend', 'fa3'] or '--attention-backend=fa3'). For attention_backend the prefill and
    decode variants count too."""
    keys = ATTENTION_KEYS if key == "attention_backend" else (key,)
    values = [str(settings[k]) for k in keys if settings.get(k) not in (None, "")]
    return values + flag_values(settings.get("extra_args"), {dest_flag(k) for k in keys})


def requested_features(settings: dict, serving: bool) -> list[dict]:
    """The FEATURES entries the server settings ask for (serving ones only when the env is meant to serve)."""
    out = []
    for feature in FEATURES:
        if feature.get("serving"):
            if serving:
                out.append(feature)
        elif feature["value"] in setting_values(settings or {}, feature["setting"]):
            out.append(feature)
    return out


def owner_of(module: dict) -> dict | None:
    """The claim (distribution) the module is imported from: the one whose RECORD matches the origin file."""
    providers = [c for c in module.get("claims", []) if c.get("provides_origin")]
    return providers[0] if len(providers) == 1 else None


def component_binaries(name: str, modules: dict, site_dirs: list[str]) -> tuple[dict | None, list[str]]:
    """(owner claim, binaries of the component) from the inspect script's modules."""
    spec = COMPONENTS[name]
    owner = owner_of(modules.get(spec["module"]) or {})
    if owner is None:
        return None, []
    files = list(owner["binaries"])
    for extra in spec.get("also", []):
        other = owner_of(modules.get(extra) or {})
        # deep_ep_cpp belongs to the same distribution as deep_ep, or it is not the one deep_ep loads
        if other and normalize(other["distribution"]) == normalize(owner["distribution"]):
            files += other["binaries"]
    if spec["binaries"]:
        files = [
            f for f in files if any(fnmatch.fnmatch(relative(f, site_dirs), pat) for pat in spec["binaries"])
        ]
    return owner, sorted(set(files))


def relative(path: str, site_dirs: list[str]) -> str:
    for base in sorted(site_dirs, key=len, reverse=True):
        if path.startswith(base.rstrip("/") + "/"):
            return path[len(base.rstrip("/")) + 1 :]
    return path


def coverage(listings: dict[str, dict], archs: list[str], accept_ptx: bool) -> dict:
    """Binaries' cuobjdump listings ({path: {sass, ptx, host_only}}) -> per arch what covers it.

    A component covers an arch when ANY of its binaries does (sgl_kernel picks one of its per-arch builds at
    load time; DeepEP's code is in one binary). Returns {'sass': [...], 'ptx': [...],
    'covered': {arch: 'sass sm_120 (file)'}, 'missing': [...]}."""
    sass = sorted({a for x in listings.values() for a in x["sass"]}, key=arch_sort_key)
    ptx = sorted({a for x in listings.values() for a in x["ptx"]}, key=arch_sort_key)
    covered: dict[str, str] = {}
    for arch in archs:
        for path, listing in sorted(listings.items()):
            hit = check_required(listing["sass"], listing["ptx"], [arch], accept_ptx)["covered"].get(arch)
            if hit:
                covered[arch] = f"{hit} ({path.rsplit('/', 1)[-1]})"
                break
    return {"sass": sass, "ptx": ptx, "covered": covered, "missing": [a for a in archs if a not in covered]}


# ---------------------------------------------------------------- the stamp of a verdict
# A full check hashes RECORD files of GB-sized distributions (tens of seconds). Its verdict depends on the
# inputs (module options) and on the env's files: every installed distribution's RECORD (pip rewrites it on
# any install, upgrade or uninstall), the site dirs themselves, the python, cuobjdump, the verified wheel and
# the binaries the verdict listed. When none of them changed (path, size, mtime), the stored verdict stands.
# Which files those are and their states: plugins/module_utils/watch.py (record_files, file_states).


def stamp_difference(stamp: dict | None, options: dict, files: dict[str, list[int]]) -> str:
    """Why the stored verdict does not stand ('' when it does). The stamp's key is the digest of the options
    (plugins/module_utils/digests.py; a key written in the older spaced layout still matches)."""
    if not stamp or "result" not in stamp:
        return "no stamp"
    if not digest_matches(stamp.get("key"), options):
        return "inputs changed"
    before = stamp.get("files") or {}
    changed = sorted(p for p in set(before) | set(files) if before.get(p) != files.get(p))
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return f"env files changed: {', '.join(changed[:3])}{more}"
    return ""
