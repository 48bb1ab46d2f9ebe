#!/usr/bin/env python3
"""Build a small signed apt repository that stands in for NVIDIA's CUDA repository (a TEST DOUBLE).

It checks the MECHANICS of role cuda_toolkit's nvidia_repo method (keyring package, signed-by source entry,
apt install, nvcc verification), not NVIDIA's packages. Contents, all built here:
  cuda-keyring_1.1-1_all.deb  installs a throw-away test key as /usr/share/keyrings/cuda-archive-keyring.gpg
                              (the path NVIDIA's cuda-keyring uses)
  cuda-toolkit-12-8_*.deb     installs /usr/local/cuda-12.8/bin/nvcc, a shell script that prints a
                              real-format `nvcc --version` (CUDA 12.8 U1: V12.8.93) and the arch lists
  cuda-toolkit-12-9_*.deb     the same for 12.9 (so a test can show the role installs the named package)
  Packages, Release, InRelease  a flat repository ("deb URL /"), InRelease clear-signed with the test key
  other-keyring.gpg           a keyring with an unrelated key (not part of the index)
Needs dpkg-deb and gpg on the machine that builds it. Usage: build_fake_cuda_repo.py OUT_DIR
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NVCC_TEMPLATE = """#!/bin/sh
# TEST DOUBLE of nvcc (epforge molecule scenario cuda-toolkit-apt): prints what CUDA {release} prints.
case "$1" in
  --version)
    cat <<'EOF'
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on {built}
Cuda compilation tools, release {mm}, V{release}
Build cuda_{mm}.r{mm}/compiler.{build}_0
EOF
    ;;
  --list-gpu-code) printf '%s\\n' {codes} ;;
  --list-gpu-arch) printf '%s\\n' {archs} ;;
  *) echo "nvcc test double: only --version, --list-gpu-code and --list-gpu-arch" >&2; exit 1 ;;
esac
"""
# Arch lists of the real CUDA 12.8 / 12.9 nvcc (sm_101 was renamed sm_110 in 13.0).
CODES = {
    "12.8": "sm_50 sm_52 sm_53 sm_60 sm_61 sm_62 sm_70 sm_72 sm_75 sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 "
    "sm_101 sm_120",
    "12.9": "sm_50 sm_52 sm_53 sm_60 sm_61 sm_62 sm_70 sm_72 sm_75 sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 "
    "sm_101 sm_103 sm_120 sm_121",
}
RELEASES = {
    "12.8": ("12.8.93", "Fri_Feb_21_20:23:50_PST_2025", "35583870"),
    "12.9": ("12.9.86", "Tue_May_27_02:21:03_PDT_2025", "36037853"),
}


def run(argv: list[str], **kw) -> None:
    subprocess.run(argv, check=True, timeout=120, **kw)


def build_deb(out: Path, name: str, version: str, files: dict[str, tuple[bytes, int]], desc: str) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "pkg"
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
            "Maintainer: epforge tests <none@example.invalid>\nSection: devel\nPriority: optional\n"
            f"Description: {desc}\n TEST DOUBLE built by epforge's molecule scenario cuda-toolkit-apt; "
            "not an NVIDIA package.\n"
        )
        for rel, (data, mode) in files.items():
            path = root / rel.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)
        deb = out / f"{name}_{version}_all.deb"
        run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
            stdout=subprocess.DEVNULL,
        )
        return deb


def control_of(deb: Path) -> str:
    proc = subprocess.run(
        ["dpkg-deb", "-f", str(deb)], check=True, capture_output=True, text=True, timeout=60
    )
    return proc.stdout.strip()


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    gnupg = Path(tempfile.mkdtemp(prefix="epforge-gnupg-"))
    try:
        env = dict(os.environ, GNUPGHOME=str(gnupg))
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        run(
            [
                *gpg,
                "--quick-gen-key",
                "epforge molecule test repo (never trust outside tests)",
                "ed25519",
                "sign",
                "never",
            ],
            env=env,
        )
        keyring = subprocess.run([*gpg, "--export"], env=env, check=True, capture_output=True).stdout
        debs = [
            build_deb(
                out,
                "cuda-keyring",
                "1.1-1",
                {"/usr/share/keyrings/cuda-archive-keyring.gpg": (keyring, 0o644)},
                "test keyring standing in for NVIDIA's cuda-keyring",
            )
        ]
        for mm, (release, built, build) in RELEASES.items():
            script = NVCC_TEMPLATE.format(
                release=release,
                mm=mm,
                built=built,
                build=build,
                codes=CODES[mm],
                archs=CODES[mm].replace("sm_", "compute_"),
            )
            debs.append(
                build_deb(
                    out,
                    f"cuda-toolkit-{mm.replace('.', '-')}",
                    f"{release}-1",
                    {f"/usr/local/cuda-{mm}/bin/nvcc": (script.encode(), 0o755)},
                    f"test double of CUDA {mm} nvcc",
                )
            )
        stanzas = []
        for deb in debs:
            data = deb.read_bytes()
            stanzas.append(
                f"{control_of(deb)}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                f"MD5sum: {hashlib.md5(data).hexdigest()}\n"  # noqa: S324 - apt's index format
                f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
            )
        packages = ("\n".join(stanzas)).encode()
        (out / "Packages").write_bytes(packages)
        (out / "Release").write_text(
            "Origin: epforge-test\nLabel: epforge-test\nDate: Sat, 01 Mar 2025 00:00:00 UTC\n"
            "Architectures: all amd64 arm64\n"
            f"SHA256:\n {hashlib.sha256(packages).hexdigest()} {len(packages)} Packages\n"
        )
        run([*gpg, "--clearsign", "-o", str(out / "InRelease"), str(out / "Release")], env=env)
        # A keyring with another key, for the "repository not signed by this keyring" case.
        other = Path(tempfile.mkdtemp(prefix="epforge-gnupg-other-"))
        try:
            other_env = dict(os.environ, GNUPGHOME=str(other))
            run(
                [*gpg, "--quick-gen-key", "epforge molecule unrelated key", "ed25519", "sign", "never"],
                env=other_env,
            )
            (out / "other-keyring.gpg").write_bytes(
                subprocess.run([*gpg, "--export"], env=other_env, check=True, capture_output=True).stdout
            )
        finally:
            shutil.rmtree(other, ignore_errors=True)
    finally:
        shutil.rmtree(gnupg, ignore_errors=True)
    print(f"fake CUDA repository in {out}: {', '.join(d.name for d in debs)}")


if __name__ == "__main__":
    main()
