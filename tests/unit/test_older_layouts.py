"""Records an older epforge wrote with the spaced JSON layout (json.dumps(..., sort_keys=True)) before every
digest went through plugins/module_utils/digests.py: each is still read as naming the same inputs (no rerun of
the work it vouches for: no parser run, no restart, no re-verification), and rewritten once in the canonical
layout by the module that reads it.

OLD() below is that layout, written out here on purpose: the test is what remembers it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ansible_collections.epforge.ep.plugins.module_utils import model_files, server_object, sglang_flags
from ansible_collections.epforge.ep.plugins.module_utils.digests import (
    digest,
    digest_matches,
    is_older_layout,
)
from ansible_collections.epforge.ep.plugins.module_utils.ml_env_torch.dist_files import (
    path_states,
    states_digest,
)
from ansible_collections.epforge.ep.plugins.module_utils.service_managers import ProcessManager


def OLD(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


ARGV = ["--model-path", "/models/m", "--tp-size", "1", "--host", "127.0.0.1", "--port", "30000"]
ENV = {"HF_HUB_OFFLINE": "1"}


def obj_with_old_digest() -> dict:
    launch = {"sglang_version": "0.5.16", "argv": ARGV, "env": ENV}
    return {
        "schema": server_object.SCHEMA,
        "sglang_version": "0.5.16",
        "settings": {"model_path": "/models/m"},
        "adjustments": [],
        "argv": ARGV,
        "env": ENV,
        "digest": OLD(launch),
    }


def test_a_server_object_an_older_epforge_built_is_whole_and_judged_by_its_old_verdict():
    obj = obj_with_old_digest()
    assert server_object.problems(obj, "0.5.16") == []
    assert server_object.digest_of("0.5.16", ARGV, ENV) != obj["digest"]
    # a verdicts file written before the canonical layout holds the old digest; the new object finds it too
    assert server_object.judged(obj, {obj["digest"]})
    new = {**obj, "digest": server_object.digest_of("0.5.16", ARGV, ENV)}
    assert server_object.judged(new, {obj["digest"]}) and server_object.judged(new, {new["digest"]})
    assert not server_object.judged(new, {OLD({"sglang_version": "0.5.17", "argv": ARGV, "env": ENV})})
    edited = {**obj, "argv": [*ARGV, "--enable-x"]}
    assert server_object.problems(edited, "0.5.16")


class Judge:
    """What check_flags needs of an Ansible module."""

    check_mode = False

    def fail_json(self, **result):
        pytest.fail(f"refused: {result}")


def judge(cache, digest: str) -> dict:
    """check_flags as role sglang calls it, for ARGV under evidence stamp-1."""
    return sglang_flags.check_flags(
        Judge(), "/env/bin/python", ARGV, "0.5.16", cache_path=str(cache), evidence="stamp-1", digest=digest
    )


def test_a_verdict_under_an_older_argv_key_answers_without_the_parser_and_is_rewritten_once(
    tmp_path, monkeypatch
):
    cache = tmp_path / "sglang-flags-check.json"
    run = [sglang_flags.CHECK_SCRIPT]
    old_key = OLD([ARGV, "0.5.16", "/env/bin/python", True, "stamp-1", *run])
    outcome = {"sglang_version": "0.5.16", "parsed": {"tp_size": 1}, "constructed": True, "notes": []}
    outcome["warnings_sglang"] = []
    old_obj = obj_with_old_digest()
    cache.write_text(
        json.dumps(
            {
                "schema": 2,
                "verdicts": [
                    {"digest": old_obj["digest"], "argv_key": old_key, "plan": "", "outcome": outcome}
                ],
            }
        )
    )
    monkeypatch.setattr(sglang_flags, "run_parser", lambda *a, **k: pytest.fail("the parser ran again"))
    new_digest = server_object.digest_of("0.5.16", ARGV, ENV)
    keys = sglang_flags.cache_keys_of(ARGV, "0.5.16", "/env/bin/python", True, "stamp-1")
    assert keys[1] == old_key and keys[0] != old_key

    got = judge(cache, new_digest)
    assert got["cached"] is True and got["parsed"] == {"tp_size": 1}
    entries = json.loads(cache.read_text())["verdicts"]
    assert {(e["digest"], e["argv_key"]) for e in entries} >= {(new_digest, keys[0])}
    written = cache.stat().st_mtime_ns
    again = judge(cache, new_digest)
    assert again["cached"] is True and cache.stat().st_mtime_ns == written  # once


def test_a_model_stamp_in_the_older_layout_still_vouches_and_is_marked_for_one_rewrite(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    manifest = {"files": {"config.json": {"size": 2}}, "repo": "r", "revision": "main"}
    (tmp_path / model_files.MANIFEST).write_text(json.dumps(manifest))
    stamp = {
        "schema": model_files.SCHEMA,
        "manifest": OLD(manifest),
        "stats": model_files.stats(tmp_path, ["config.json"]),
    }
    (tmp_path / model_files.STAMP).write_text(json.dumps(stamp))
    assert model_files.stamped(str(tmp_path), manifest)
    assert model_files.stamp_in_older_layout(str(tmp_path), manifest)
    stamp["manifest"] = model_files.manifest_digest(manifest)
    (tmp_path / model_files.STAMP).write_text(json.dumps(stamp))
    assert model_files.stamped(str(tmp_path), manifest)
    assert not model_files.stamp_in_older_layout(str(tmp_path), manifest)
    assert not model_files.stamped(str(tmp_path), {**manifest, "revision": "other"})


def test_the_torch_files_state_digest_an_older_epforge_wrote_still_names_the_same_states(tmp_path):
    """ml_env_torch's stamp: the older module hashed json.dumps(states) (a list: key order never mattered)."""
    (tmp_path / "a").write_text("x")
    paths = [str(tmp_path / "a"), str(tmp_path / "missing")]
    states = path_states(paths)
    recorded = hashlib.sha256(json.dumps(states).encode()).hexdigest()
    assert states_digest(paths) == digest(states) != recorded
    assert digest_matches(recorded, states) and is_older_layout(recorded, states)
    os.utime(tmp_path / "a", ns=(1, 1))
    assert not digest_matches(recorded, path_states(paths))


class FakeModule:
    check_mode = False

    def __init__(self, tmp_path):
        self.params = {
            "name": "old-layout",
            "api_key": "sk-test",
            "log_path": str(tmp_path / "server.log"),
            "state_dir": str(tmp_path),
            "user": None,
            "group": None,
            "working_dir": None,
        }

    def fail_json(self, **result):
        pytest.fail(f"failed: {result}")


class RunningServer(ProcessManager):
    """The process manager of a server that runs (a launch recorded by an older epforge): nothing to start."""

    def refuse_bad_user(self):
        pass

    def is_running(self):
        return True

    def follow_recent_log(self):
        pass


def test_a_launch_stamp_an_older_epforge_wrote_keeps_its_server_and_is_rewritten_in_place(tmp_path):
    manager = RunningServer(FakeModule(tmp_path), {}, [])
    manager.request(["/env/bin/python", "-m", "sglang.launch_server"], {"A": "1"}, host="127.0.0.1", port=1,
                    uid=-1, gid=-1)  # fmt: skip
    inputs = manager.launch_inputs()
    stamp = {"fingerprint": OLD(inputs), "argv": manager.argv, "session": {"sid": 123}}
    path = Path(manager.stamp_path)
    path.write_text(manager.stamp_text(stamp, 600))
    manager.ensure_started(force_restart=False)
    assert manager.result == {"pidfile": manager.pidfile, "changed": False, "restarted": False}
    rewritten = json.loads(path.read_text())
    assert rewritten == {**stamp, "fingerprint": digest(inputs)} and path.stat().st_size == 600
    before = path.read_bytes()
    manager.ensure_started(force_restart=False)
    assert path.read_bytes() == before and manager.result["changed"] is False  # once
