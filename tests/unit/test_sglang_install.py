"""Module sglang_install end to end with real pip, offline: a fresh venv, tiny local wheels (an `sglang` that
imports like SGLang does for the module's proof: sglang.__version__ and sglang.srt.server_args), the server
profile (SGLang with --no-deps, then the server deps pinned to SGLang's own Requires-Dist), the stamp and a
rerun that changes nothing; the failure when the installed SGLang imports as another version; and the role's
one call (directories, install, flags, local fact written only on change, check mode writing nothing)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from moduletools import (
    changed_paths,
    clear_import_path_variables,
    run_module,
    server_object,
    watched_states,
)
from test_pip_guard import make_wheel

from ansible_collections.epforge.ep.plugins.module_utils import sglang_flags as epforge_sglang_flags


def sglang_wheel(wheels: Path, version: str, imports_as: str, requires: list[str]) -> Path:
    members = {
        "sglang/__init__.py": f"__version__ = {imports_as!r}\n",
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": "class ServerArgs:\n    pass\n",
    }
    return make_wheel(wheels, "sglang", version, requires, members=members)


def venv_python(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def module_args(tmp_path: Path, python: Path, wheels: Path, version: str) -> dict:
    return {
        "python": str(python),
        "version": version,
        "profile": "server",
        "server_deps": ["fakedep"],
        "pip_args": ["--no-index", "--find-links", str(wheels)],
        "log_path": str(tmp_path / "log" / "sglang.log"),
        "stamp_path": str(tmp_path / "state" / "sglang.json"),
    }


def installed(python: Path, name: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_server_profile_pins_server_deps_from_sglang_metadata_and_reruns_as_a_noop(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.99", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    make_wheel(wheels, "fakedep", "2.0")  # the newest: only SGLang's pin keeps pip from taking it
    python = venv_python(tmp_path / "env")
    args = module_args(tmp_path, python, wheels, "0.5.99")

    rc, first = run_module("sglang_install", args, timeout=300)
    assert rc == 0, first.get("msg")
    assert first["changed"] is True and first["version"] == "0.5.99" and first["mode"] == "server"
    assert installed(python, "fakedep") == "1.0"
    assert any("fakedep==1.0" in action for action in first["actions"]), first["actions"]
    assert first["actions"][-1] == "verified: import sglang 0.5.99 and sglang.srt.server_args"
    assert (tmp_path / "state" / "sglang.json").exists()
    assert "sglang_install" in (tmp_path / "log" / "sglang.log").read_text()

    rc, again = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and again["changed"] is False and again["actions"] == []

    # A stamp an older epforge wrote (digest of sorted JSON with spaces, under "sha256") still holds: no pip
    # run; it is rewritten once in the current layout (changed, with its diff; check mode only says so), and
    # the stamp in force is the current one.
    stamp_file = tmp_path / "state" / "sglang.json"
    inputs = json.loads(stamp_file.read_text())["inputs"]
    spaced = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    stamp_file.write_text(json.dumps({"inputs": inputs, "sha256": spaced}))
    rc, dry = run_module("sglang_install", args, check=True, diff=True, timeout=300)
    assert rc == 0 and dry["changed"] is True and json.loads(stamp_file.read_text())["sha256"] == spaced, dry
    rc, old = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and old["changed"] is True, old
    assert old["actions"] == ["stamp rewritten in the current digest layout (same inputs)"]
    assert old["stamp"] == again["stamp"] == json.loads(stamp_file.read_text())
    rc, once = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and once["changed"] is False and once["actions"] == [], once
    # ... while one that records other inputs does not.
    stamp_file.write_text(json.dumps({"inputs": inputs, "sha256": "0" * 64}))
    rc, rerun = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and rerun["changed"] is True and rerun["actions"][0].startswith("re-run pip"), rerun
    assert json.loads(stamp_file.read_text()) == {"inputs": inputs, "digest": again["stamp"]["digest"]}


def test_an_sglang_that_imports_as_another_version_fails_and_writes_no_stamp(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.1", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    python = venv_python(tmp_path / "env")

    rc, res = run_module("sglang_install", module_args(tmp_path, python, wheels, "0.5.99"), timeout=300)
    assert rc != 0 and res["msg"].startswith("SGLang imports as 0.5.1, not 0.5.99"), res
    assert res["cmd"][0] == str(python) and res["rc"] == 0
    assert not (tmp_path / "state" / "sglang.json").exists()


def test_one_call_makes_the_dirs_judges_the_flags_and_writes_the_fact_once(tmp_path):
    """The sglang role's one module call: dirs, install, flags (here answered from the remembered outcome:
    the tiny sglang has no parser) and the local fact, written only when its content changes; check mode
    writes nothing; a shape error or a refused flag leaves no fact."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.99", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    python = venv_python(tmp_path / "env")
    facts = tmp_path / "facts"
    fact_file = facts / "epforge_sglang.fact"
    args = {
        **module_args(tmp_path, python, wheels, "0.5.99"),
        "facts_dir": str(facts),
        "flags_cache_path": str(tmp_path / "state" / "flags.json"),
    }

    rc, dry = run_module("sglang_install", args, check=True, diff=True, timeout=300)
    assert rc == 0 and dry["changed"] is True, dry.get("msg")
    assert dry["fact"]["server_flags"] == {
        "validated": False,
        "argv": [],
        "digest": "",
        "nnodes": 1,
        "node_rank": 0,
    }
    assert [d["after_header"] for d in dry["diff"]] == [args["stamp_path"], str(fact_file)]
    assert not (tmp_path / "log").exists() and not (tmp_path / "state").exists() and not facts.exists()

    rc, first = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and first["changed"] is True, first.get("msg")
    assert first["created_dirs"] == [str(tmp_path / "log"), str(tmp_path / "state")]
    assert (tmp_path / "log").stat().st_mode & 0o777 == 0o755
    fact = json.loads(fact_file.read_text())
    assert fact == first["fact"] and fact["version"] == "0.5.99" and fact["mode"] == "server"
    assert fact["installed"]["sglang"] == "0.5.99" and fact["stamp_sha256"] == first["stamp"]["digest"]
    written = fact_file.stat().st_mtime_ns

    rc, again = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and again["changed"] is False and again["actions"] == [] and again["created_dirs"] == []
    assert fact_file.stat().st_mtime_ns == written

    # Settings: their flags judged from the remembered outcome of the same flags and install.
    settings = {"model_path": "/models/x", "tp_size": 2, "nnodes": 2, "node_rank": 1}
    settings.update(dist_init_addr="10.0.0.1:25000", api_key="TOPSECRET")
    obj = server_object(settings, "0.5.99")
    argv = obj["argv"]
    key = epforge_sglang_flags.cache_key_of(argv, "0.5.99", str(python), True, first["stamp"]["digest"])
    outcome = {"sglang_version": "0.5.99", "parsed": {"tp_size": 2}, "constructed": True}
    epforge_sglang_flags.write_cache(
        args["flags_cache_path"], key, {**outcome, "notes": [], "warnings_sglang": []}
    )
    with_settings = {**args, "server_object": obj}
    rc, dry = run_module("sglang_install", with_settings, check=True, diff=True, timeout=300)
    assert rc == 0 and dry["changed"] is True and dry["flags"]["cached"] is True, dry.get("msg")
    assert fact_file.stat().st_mtime_ns == written
    rc, res = run_module("sglang_install", with_settings, timeout=300)
    assert rc == 0 and res["changed"] is True and res["flags"]["parsed"] == {"tp_size": 2}, res.get("msg")
    fact = json.loads(fact_file.read_text())
    assert fact["server_flags"] == {
        "validated": True,
        "argv": argv,
        "digest": obj["digest"],
        "nnodes": 2,
        "node_rank": 1,
    }
    assert "TOPSECRET" not in json.dumps(res) and "TOPSECRET" not in fact_file.read_text()
    rc, res = run_module("sglang_install", with_settings, timeout=300)
    assert rc == 0 and res["changed"] is False

    # Flags the tiny sglang must judge itself (no remembered outcome): refused, and no fact is written.
    fresh = {
        **with_settings,
        "facts_dir": str(tmp_path / "facts-2"),
        "server_object": server_object({**settings, "tp_size": 4}, "0.5.99"),
    }
    rc, res = run_module("sglang_install", fresh, timeout=300)
    assert rc != 0 and "SGLang's parser failed" in res["msg"], res
    assert not (tmp_path / "facts-2").exists()
    assert_bad_objects_change_nothing(tmp_path, fresh, obj, settings)


def assert_bad_objects_change_nothing(tmp_path: Path, args: dict, obj: dict, settings: dict) -> None:
    """An object edited after preflight built it (argv no longer what its digest names), or rendered for
    another release: refused before anything changes (no directories, no fact)."""
    edited = {**obj, "argv": [*obj["argv"], "--disable-cuda-graph"]}
    other = server_object(settings, "0.5.23")
    for bad, words in ((edited, "no longer matches its digest"), (other, "rendered for SGLang 0.5.23")):
        shape = {**args, "server_object": bad, "log_path": str(tmp_path / "log-2" / "sglang.log")}
        rc, res = run_module("sglang_install", shape, timeout=300)
        assert rc != 0 and "server settings object refused" in res["msg"] and words in res["msg"], res
        assert not (tmp_path / "log-2").exists() and not Path(args["facts_dir"]).exists()


def test_watch_names_what_a_noop_depends_on_and_a_change_there_changes_the_answer(tmp_path, monkeypatch):
    """The probe cache's contract (plugins/module_utils/watch.py): a no-op answer (installed, flags from the
    cache, fact current) names the python, its site dir, the stamp, the directories it makes, the flags'
    cache and the fact; uninstalling SGLang, deleting the cache, the fact or the log dir changes a watched
    path's state and the real rerun's answer."""
    clear_import_path_variables(monkeypatch)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sglang_wheel(wheels, "0.5.99", "0.5.99", ["fakedep==1.0"])
    make_wheel(wheels, "fakedep", "1.0")
    python = venv_python(tmp_path / "env")
    fact_file = tmp_path / "facts" / "epforge_sglang.fact"
    cache = tmp_path / "state" / "flags.json"
    settings = {"model_path": "/models/x", "tp_size": 2}
    args = {
        **module_args(tmp_path, python, wheels, "0.5.99"),
        "facts_dir": str(tmp_path / "facts"),
        "flags_cache_path": str(cache),
        "server_object": server_object(settings, "0.5.99"),
    }
    rc, first = run_module("sglang_install", {**args, "server_object": {}}, timeout=300)
    assert rc == 0 and first["changed"] and first["watch"] == [], first.get("msg")
    # the tiny sglang has no parser: the remembered outcome of these flags judges them
    argv = args["server_object"]["argv"]
    key = epforge_sglang_flags.cache_key_of(argv, "0.5.99", str(python), True, first["stamp"]["digest"])
    outcome = {"sglang_version": "0.5.99", "parsed": {"tp_size": 2}, "constructed": True}
    epforge_sglang_flags.write_cache(str(cache), key, {**outcome, "notes": [], "warnings_sglang": []})
    rc, res = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and res["changed"] and res["watch"] == []  # the fact now holds the flags
    rc, noop = run_module("sglang_install", args, timeout=300)
    assert rc == 0 and not noop["changed"] and noop["flags"]["cached"], noop.get("msg")
    watch = noop["watch"]
    site = next((tmp_path / "env" / "lib").glob("python3*/site-packages")).resolve()
    expected = {str(python), str(python.resolve()), str(tmp_path / "env" / "pyvenv.cfg"), str(site)}
    expected |= {args["stamp_path"], str(tmp_path / "log"), str(tmp_path / "state"), str(cache)}
    expected.add(str(fact_file))
    assert expected <= set(watch) and watch == sorted(set(watch)), sorted(expected - set(watch))

    def rerun_after(change) -> dict:
        before = watched_states(watch)
        change()
        assert changed_paths(before), "no watched path saw the change"
        return run_module("sglang_install", args, timeout=300)[1]

    saved = cache.read_text()
    judged = rerun_after(cache.unlink)  # the tiny sglang's own parser is asked, and fails
    assert judged.get("failed") and "SGLang's parser failed" in judged["msg"], judged
    cache.write_text(saved)
    assert run_module("sglang_install", args, timeout=300)[1]["watch"]

    rewritten = rerun_after(fact_file.unlink)
    assert rewritten["changed"] and fact_file.exists()
    made = rerun_after(lambda: shutil.rmtree(tmp_path / "log"))
    assert made["changed"] and made["created_dirs"] == [str(tmp_path / "log")]

    uninstall = [str(python), "-m", "pip", "uninstall", "-q", "-y", "sglang"]
    reinstalled = rerun_after(lambda: subprocess.run(uninstall, check=True, timeout=300))
    assert reinstalled["changed"], reinstalled
    assert reinstalled["actions"][0] == "install sglang==0.5.99 (server)"
