"""The payloads of epforge's modules kept from one run to the next (plugins/plugin_utils/payload_store.py,
callback epforge.ep.payload_store): real ansible-playbook runs with the project's ansible.cfg, each with a
home of its own (the store, the sealing key and Ansible's temp dirs), told apart by ansible-core's own debug
lines - "ANSIBALLZ: Creating module" when it packs a module, "using cached module" when it finds one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ansible.release import __version__ as ansible_version

from ansible_collections.epforge.ep.plugins.plugin_utils import payload_store
from playbooks import ROOT, run_playbook

PLAY = f"""---
- name: Ship one module of the collection
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Locate a module in the controller's python
      epforge.ep.python_locate:
        python: {sys.executable}
        modules: [json]
"""
MODULE = "ansible_collections.epforge.ep.plugins.modules.python_locate"


def run_once(tmp_path: Path):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    proc = run_playbook(
        playbook,
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        inventories=(),
        env={"HOME": str(home), "ANSIBLE_DEBUG": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr, home / ".cache" / "epforge" / "payloads"


def stored(store: Path) -> list[Path]:
    return sorted(store.glob(f"*/{MODULE}-*"))


def test_a_second_run_finds_the_module_packed(tmp_path):
    out, store = run_once(tmp_path)
    assert "ANSIBALLZ: Creating module" in out
    [kept] = stored(store)
    assert kept.stat().st_mode & 0o777 == 0o600
    # the key's folder, the store and epforge's cache folder (the sealing key's) are the user's alone
    for folder in (kept.parent, store, store.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    out, _store = run_once(tmp_path)
    assert "ANSIBALLZ: Creating module" not in out and "ANSIBALLZ: using cached module" in out
    assert stored(store) == [kept]


def test_a_payload_changed_in_the_store_is_removed_and_packed_again(tmp_path):
    _out, store = run_once(tmp_path)
    [kept] = stored(store)
    data = bytearray(kept.read_bytes())
    data[-40] ^= 0x01  # one bit of the pickled payload: its seal no longer matches
    kept.write_bytes(bytes(data))
    out, _store = run_once(tmp_path)
    assert "ANSIBALLZ: Creating module" in out
    [again] = stored(store)
    assert again.read_bytes() != bytes(data)


def code_tree(root: Path) -> Path:
    for sub, name in (("plugins/modules", "mod.py"), ("plugins/module_utils/sub", "util.py")):
        (root / sub).mkdir(parents=True)
        (root / sub / name).write_text("X = 1\n")
    return root


def test_the_key_changes_with_the_code_the_path_and_ansible(tmp_path):
    root = code_tree(tmp_path / "a")
    key = payload_store.code_key(str(root), ansible_version)
    assert payload_store.code_key(str(root), ansible_version) == key
    assert payload_store.code_key(str(root), "2.99.0") != key
    other = code_tree(tmp_path / "b")
    assert payload_store.code_key(str(other), ansible_version) != key
    (root / "plugins/module_utils/sub/util.py").write_text("X = 2\n")
    assert payload_store.code_key(str(root), ansible_version) != key


@pytest.fixture
def own_home(tmp_path, monkeypatch):
    """The sealing key in a home of this test's own."""
    monkeypatch.setattr(
        payload_store.seal, "KEY_PATH", str(tmp_path / "home" / ".cache" / "epforge" / "probe-cache.key")
    )
    return tmp_path


def test_a_store_others_can_write_is_neither_read_nor_written(own_home):
    run_cache, store = own_home / "run", own_home / "store"
    run_cache.mkdir()
    (run_cache / f"{MODULE}-ZIP_DEFLATED-none").write_bytes(b"payload")
    assert payload_store.keep(str(run_cache), "k" * 64, str(store)) == [f"{MODULE}-ZIP_DEFLATED-none"]
    os.chmod(store, 0o777)  # noqa: S103 - the case refused
    fresh = own_home / "fresh"
    assert payload_store.restore(str(fresh), "k" * 64, str(store)) == []
    assert not fresh.exists()
    os.chmod(store, 0o700)
    assert payload_store.restore(str(fresh), "k" * 64, str(store)) == [f"{MODULE}-ZIP_DEFLATED-none"]
    assert (fresh / f"{MODULE}-ZIP_DEFLATED-none").read_bytes() == b"payload"


def test_only_this_collections_payloads_and_the_newest_keys_are_kept(own_home):
    run_cache, store = own_home / "run", own_home / "store"
    run_cache.mkdir()
    for name in (f"{MODULE}-ZIP_DEFLATED-none", "ansible.modules.ping-ZIP_DEFLATED-none", f"{MODULE}.lock"):
        (run_cache / name).write_bytes(b"payload")
    for number in range(payload_store.KEYS_KEPT + 2):
        key = str(number) * 64
        assert payload_store.keep(str(run_cache), key, str(store)) == [f"{MODULE}-ZIP_DEFLATED-none"]
        os.utime(store / key[:16], (number, number))  # ordered by age
    assert sorted(p.name for p in store.iterdir()) == [
        str(n) * 16 for n in range(2, payload_store.KEYS_KEPT + 2)
    ]


def test_the_project_enables_it():
    text = (ROOT / "ansible.cfg").read_text()
    assert "epforge.ep.payload_store" in text
