"""A real Hub-compatible server for tests and bench/model_fetch.py: olah (PyPI) serving local git repositories
as Hugging Face repos (its `mirrors-path` with `offline = true`), and checkpoints written for it.

olah's local mirror serves git blobs as they are (not LFS), reads each file whole into memory, ignores HTTP
Range (olah 0.5.4, checked: `Range: bytes=3-9` got 200 and the whole file) and reports no repo as gated:
keep shards to tens of MB in tests.
Its access log (uvicorn's, on stdout) goes to `<root>/olah.log`: one `GET .../resolve/COMMIT/FILE` line per
file served.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

GIT_ID = ["-c", "user.email=tests@epforge.invalid", "-c", "user.name=epforge tests"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def safetensors_shard(path: Path, tensors: dict[str, int], seed: int) -> None:
    """A valid safetensors file: U8 tensors of the given byte sizes, pseudo-random content (fast, seeded)."""
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    block = (seed.to_bytes(8, "little") * 8192) + os.urandom(1 << 16)  # random: git cannot delta it away
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        left = offset
        while left:
            n = min(left, len(block))
            handle.write(block[:n])
            left -= n


def write_checkpoint(
    directory: Path, shards: int, shard_bytes: int, extra: dict[str, str] | None = None
) -> dict:
    """A sharded safetensors checkpoint with index, config and tokenizer files; returns {name: size}."""
    directory.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for i in range(1, shards + 1):
        name = f"model-{i:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{i}.w{j}": shard_bytes // 2 for j in range(2)}
        safetensors_shard(directory / name, tensors, seed=i)
        weight_map.update(dict.fromkeys(tensors, name))
    files = {
        "config.json": json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"}),
        "model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1),
        "tokenizer.json": json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}),
        "tokenizer_config.json": json.dumps({"model_max_length": 4096}),
        **(extra or {}),
    }
    for name, text in files.items():
        (directory / name).write_text(text)
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}


def git_repo(mirrors: Path, repo_id: str, checkpoint=None, **kwargs) -> tuple[Path, str]:
    """A git repo at MIRRORS/models/ORG/NAME on branch main holding a checkpoint; returns (dir, commit)."""
    repo = mirrors / "models" / repo_id
    if checkpoint is None:
        write_checkpoint(repo, **kwargs)
    else:
        checkpoint(repo)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", *GIT_ID, "-C", str(repo), "commit", "-qm", "checkpoint"], check=True)
    return repo, commit_of(repo)


def commit_of(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


class Olah:
    """olah on loopback: started, waited for (bounded), stopped; paused with SIGSTOP to stall it."""

    def __init__(self, root: Path, python: str = sys.executable) -> None:
        self.root = root
        self.mirrors = root / "mirrors"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = root / "olah.log"
        (root / "repos").mkdir(parents=True, exist_ok=True)
        self.mirrors.mkdir(parents=True, exist_ok=True)
        config = root / "olah.toml"
        config.write_text(
            f'[basic]\nhost = "127.0.0.1"\nport = {self.port}\nrepos-path = "{root / "repos"}"\n'
            f'mirrors-path = ["{self.mirrors}"]\n[accessibility]\noffline = true\n'
        )
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [python, "-m", "olah.server", "-c", str(config)],
                cwd=root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"olah exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.endpoint + "/", timeout=2)  # any HTTP answer means it listens
                return
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            time.sleep(0.3)
        raise RuntimeError(f"olah did not listen on {self.endpoint} within {timeout} s")

    def downloads(self, repo_id: str) -> list[str]:
        """The access log's GET lines for files of repo_id (one per file served)."""
        return [
            line
            for line in self.log.read_text(errors="replace").splitlines()
            if '"GET /' in line and f"/{repo_id}/resolve/" in line
        ]

    def pause(self) -> None:
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
