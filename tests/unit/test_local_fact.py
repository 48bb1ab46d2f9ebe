"""Module epforge_local_fact: the one way roles write a local fact file (real module process, real files)."""

from __future__ import annotations

import json

from moduletools import run_module


def test_writes_once_creates_the_directory_and_keeps_check_mode(tmp_path):
    facts = tmp_path / "facts.d"
    args = {"name": "epforge_ml_env", "facts_dir": str(facts), "content": {"python": "/x/bin/python", "n": 1}}
    rc, res = run_module("epforge_local_fact", args, check=True)
    assert rc == 0 and res["changed"] is True and not facts.exists()
    assert json.loads(res["diff"]["after"]) == args["content"] and res["diff"]["before"] == ""

    rc, res = run_module("epforge_local_fact", args)
    path = facts / "epforge_ml_env.fact"
    assert rc == 0 and res["changed"] is True and res["path"] == str(path)
    assert json.loads(path.read_text()) == args["content"] and path.stat().st_mode & 0o777 == 0o644
    mtime = path.stat().st_mtime_ns

    rc, res = run_module("epforge_local_fact", args)  # the no-op rerun: same content, file untouched
    assert rc == 0 and res["changed"] is False and path.stat().st_mtime_ns == mtime

    rc, res = run_module("epforge_local_fact", {**args, "content": {"python": "/y/bin/python", "n": 1}})
    assert rc == 0 and res["changed"] is True and '"/x/bin/python"' in res["diff"]["before"]
    assert json.loads(path.read_text())["python"] == "/y/bin/python"


def test_refuses_a_name_that_is_not_a_fact_name(tmp_path):
    rc, res = run_module("epforge_local_fact", {"name": "../evil", "facts_dir": str(tmp_path), "content": {}})
    assert rc != 0 and "letters, digits" in res["msg"] and list(tmp_path.iterdir()) == []
