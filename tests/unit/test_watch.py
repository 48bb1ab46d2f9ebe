"""plugins/module_utils/watch.py: what a probe's watch list is made of, against a real venv and real files."""

from __future__ import annotations

import os
import subprocess
import sys

from moduletools import clear_import_path_variables

from ansible_collections.epforge.ep.plugins.module_utils.watch import binary_paths, import_paths, watch_list


def test_import_paths_of_a_real_venv(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = next((venv / "lib").glob("python3*/site-packages"))
    clear_import_path_variables(monkeypatch)
    paths = import_paths(str(python))
    assert str(python) in paths and os.path.realpath(python) in paths
    assert str(venv / "pyvenv.cfg") in paths and str(site.resolve()) in paths
    assert "" not in paths and os.getcwd() not in paths
    # a variable that moves the import path is not a file: no list
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert import_paths(str(python)) is None
    monkeypatch.delenv("PYTHONPATH")
    assert import_paths(str(tmp_path / "nope" / "python")) is None


def test_watch_list_and_binary_paths(tmp_path):
    target = tmp_path / "real-nvcc"
    target.write_text("#!/bin/sh\n")
    link = tmp_path / "bin" / "nvcc"
    link.parent.mkdir()
    link.symlink_to(target)
    assert binary_paths(str(link)) == [str(link), str(target)]
    assert binary_paths("") == []
    assert watch_list([str(link), ""], ["b/../a", str(link)]) == sorted({str(link), os.path.abspath("a")})


def test_binary_paths_names_every_hop_of_a_link_chain(tmp_path):
    """venv/bin/python -> /usr/bin/python3 -> python3.11 (relative): each hop and the file are named, so a
    retargeted middle link is seen even by a cache that compares the links themselves."""
    real = tmp_path / "usr" / "bin" / "python3.11"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")
    (real.parent / "python3").symlink_to("python3.11")
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(real.parent / "python3")
    assert binary_paths(str(venv_python)) == [str(venv_python), str(real.parent / "python3"), str(real)]
    assert binary_paths(str(real)) == [str(real)]
