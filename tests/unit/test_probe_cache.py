"""A probe's answer is reused while nothing it depends on changed (plugins/action/probe_cache.py).

Each test runs real playbooks through the project's ansible.cfg against localhost. The probe is a test double
module written into the test's own library folder (with its same-name action file, as the project's probes
have): it reads one file, answers its content and names that file in `watch`; every real run appends a line to
a counter file (not watched), so a test knows whether the module ran or the record answered.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from playbooks import JSON_CALLBACK, json_report, run_playbook

_SPEC = importlib.util.spec_from_file_location(
    "epforge_probe_cache", ROOT / "plugins" / "action" / "probe_cache.py"
)
probe_cache_plugin = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(probe_cache_plugin)

PROBE_DOUBLE = textwrap.dedent(
    '''\
    #!/usr/bin/python
    """Test double of a probe module: reads one file, counts its runs."""
    from __future__ import annotations

    DOCUMENTATION = r"""
    ---
    module: probe_double
    short_description: Test double of a probe (tests/unit/test_probe_cache.py)
    options:
      path: {description: File whose content is the answer., type: path, required: true}
      runs: {description: File that counts real runs., type: path, required: true}
      changed: {description: Report changed., type: bool, default: false}
      fail: {description: Fail., type: bool, default: false}
      watch: {description: Name O(path) in the watch list., type: bool, default: true}
      token: {description: A secret., type: str, default: "", no_log: true}
      extra_watch: {description: More paths to watch., type: list, elements: path, default: []}
    """
    import os

    from ansible.module_utils.basic import AnsibleModule


    def main():
        module = AnsibleModule(
            argument_spec=dict(
                path=dict(type="path", required=True),
                runs=dict(type="path", required=True),
                changed=dict(type="bool", default=False),
                fail=dict(type="bool", default=False),
                watch=dict(type="bool", default=True),
                token=dict(type="str", default="", no_log=True),
                extra_watch=dict(type="list", elements="path", default=[]),
            ),
            supports_check_mode=True,
        )
        p = module.params
        with open(p["runs"], "a") as f:
            f.write("check\\n" if module.check_mode else "run\\n")
        content = open(p["path"]).read() if os.path.exists(p["path"]) else None
        if p["fail"]:
            module.fail_json(msg="asked to fail", watch=[p["path"]])
        module.exit_json(
            changed=p["changed"],
            content=content,
            env_mark=os.environ.get("PROBE_MARK", ""),
            watch=([p["path"]] + p["extra_watch"]) if p["watch"] else [],
        )


    if __name__ == "__main__":
        main()
    '''
)

# How a module outside the collection opts in: a same-name action plugin that is the probe cache's class
# (the collection's own modules opt in through meta/runtime.yml instead).
OPT_IN = (
    "from ansible.plugins.loader import action_loader\n\n"
    'ActionModule = action_loader.get("epforge.ep.probe_cache", class_only=True)\n'
)


@pytest.fixture
def probe(tmp_path):
    """Folders of one test: the double's library and action plugin, the watched file, the state dir."""
    library = tmp_path / "library"
    actions = tmp_path / "action_plugins"
    library.mkdir()
    actions.mkdir()
    (library / "probe_double.py").write_text(PROBE_DOUBLE)
    (actions / "probe_double.py").write_text(OPT_IN)
    watched = tmp_path / "watched.txt"
    watched.write_text("one\n")
    return {
        "tmp": tmp_path,
        "library": library,
        "env": {
            **JSON_CALLBACK,
            "ANSIBLE_LIBRARY": f"{library}:{ROOT / 'library'}",
            "ANSIBLE_ACTION_PLUGINS": str(actions),
        },
        "watched": watched,
        "runs": tmp_path / "runs.txt",
        "state": tmp_path / "state",
    }


def play(
    probe, args: dict | None = None, *flags: str, play_vars: dict | None = None, env=None, **keywords
) -> dict:
    """Run the double once in a playbook (task keywords such as ignore_errors as keyword arguments); return
    its task result."""
    task = {
        "name": "Probe",
        "probe_double": {"path": str(probe["watched"]), "runs": str(probe["runs"]), **(args or {})},
        **keywords,
    }
    if env:
        task["environment"] = env
    playbook = probe["tmp"] / "play.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Probe cache",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "ansible_python_interpreter": sys.executable,
                        "epforge_state_dir": str(probe["state"]),
                        **(play_vars or {}),
                    },
                    "tasks": [task],
                }
            ],
            sort_keys=False,
        )
    )
    proc = run_playbook(playbook, *flags, env=probe["env"], timeout=120)
    report = json_report(proc)
    return report["plays"][0]["tasks"][0]["hosts"]["localhost"]


def runs(probe) -> list[str]:
    return probe["runs"].read_text().split() if probe["runs"].exists() else []


def records(probe) -> list[Path]:
    return sorted((probe["state"] / "probe-cache").glob("probe_double-*.json"))


def test_second_run_is_answered_by_the_record(probe):
    first = play(probe)
    assert first["probe_cache"]["hit"] is False and first["probe_cache"]["reason"] == "no record"
    assert first["content"] == "one\n" and runs(probe) == ["run"]
    [record] = records(probe)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    saved = json.loads(record.read_text())
    assert list(saved["watch"]) == [str(probe["watched"])]
    assert "invocation" not in saved["result"]

    second = play(probe)
    assert runs(probe) == ["run"], "the module ran although nothing it watches changed"
    assert second["probe_cache"] == {"hit": True, "reason": "", "record": str(record)}
    assert second["content"] == "one\n" and second["changed"] is False
    assert second["watch"] == first["watch"]


@pytest.mark.parametrize(
    "change",
    ["edit", "delete", "replace", "touch"],
)
def test_a_watched_change_runs_the_module_again(probe, change):
    play(probe)
    watched = probe["watched"]
    if change == "edit":
        watched.write_text("two\n")
    elif change == "delete":
        watched.unlink()
    elif change == "replace":  # same content, new inode (an upgrade that rewrites the file)
        fresh = watched.with_suffix(".new")
        fresh.write_text("one\n")
        os.replace(fresh, watched)
    else:  # same size and content, only the times move
        time.sleep(0.01)
        os.utime(watched)
    again = play(probe)
    assert runs(probe) == ["run", "run"]
    assert again["probe_cache"]["hit"] is False
    assert again["probe_cache"]["reason"] == f"changed: {watched}"
    assert again["content"] == ({"edit": "two\n", "delete": None}.get(change, "one\n"))
    # and the fresh answer is the record now
    play(probe)
    assert runs(probe) == ["run", "run"]


def test_other_arguments_or_environment_are_another_key(probe):
    play(probe)
    play(probe, {"token": "s3cret"})
    assert runs(probe) == ["run", "run"]
    assert not any("s3cret" in r.read_text() for r in records(probe)), "a no_log value reached the record"
    marked = play(probe, env={"PROBE_MARK": "x"})
    assert runs(probe) == ["run", "run", "run"] and marked["env_mark"] == "x"
    assert play(probe, env={"PROBE_MARK": "x"})["probe_cache"]["hit"] is True
    assert len(records(probe)) == 3


def test_a_new_module_version_is_another_key(probe):
    play(probe)
    module = probe["library"] / "probe_double.py"
    module.write_text(module.read_text() + "\n# a new version of the module\n")
    assert play(probe)["probe_cache"]["reason"] == "no record"
    assert runs(probe) == ["run", "run"]


@pytest.mark.parametrize(
    ("args", "why"),
    [({"changed": True}, "changed"), ({"watch": False}, "no watch list")],
)
def test_only_an_unchanged_answer_with_a_watch_list_is_kept(probe, args, why):
    play(probe, args)
    play(probe, args)
    assert runs(probe) == ["run", "run"], why
    assert records(probe) == []


def test_a_failure_is_not_kept(probe):
    failed = play(probe, {"fail": True}, ignore_errors=True)
    assert failed["failed"] is True and failed["msg"] == "asked to fail"
    assert records(probe) == []


def test_check_mode_reads_records_but_never_writes_them(probe):
    checked = play(probe, None, "--check")
    assert runs(probe) == ["check"] and records(probe) == []
    assert checked["probe_cache"]["hit"] is False
    play(probe)
    hit = play(probe, None, "--check")
    assert runs(probe) == ["check", "run"] and hit["probe_cache"]["hit"] is True


def test_turned_off_the_module_always_runs(probe):
    play(probe)
    off = play(probe, None, "-e", "epforge_probe_cache=false")  # as the README says: text on the command line
    assert runs(probe) == ["run", "run"] and off["probe_cache"]["hit"] is False
    for _ in range(2):
        off = play(probe, play_vars={"epforge_probe_cache": False})
    assert runs(probe) == ["run", "run", "run", "run"]
    assert off["probe_cache"] == {
        "hit": False,
        "reason": "off (epforge_probe_cache: false)",
        "record": "",
    }


def test_a_broken_record_only_costs_a_module_run(probe):
    play(probe)
    [record] = records(probe)
    record.write_text("{not json")
    again = play(probe)
    assert again["probe_cache"]["reason"] == "no record" and runs(probe) == ["run", "run"]
    assert json.loads(record.read_text())["result"]["content"] == "one\n"


def test_every_probe_of_the_project_opts_in_and_documents_watch():
    """meta/runtime.yml routes existing modules to the probe cache; each module documents its watch list."""
    routing = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())["plugin_routing"]["modules"]
    opted = sorted(name for name, r in routing.items() if r.get("action_plugin") == "epforge.ep.probe_cache")
    assert {
        "cuda_toolkit_verify",
        "ml_env_torch",
        "cuda_extension_plan",
        "flashinfer_probe",
        "deepep_prebuilt",
        "sglang_install",
        "final_env_check",
    } <= set(opted)
    for name in opted:
        source = (ROOT / "library" / f"{name}.py").read_text()
        returned = yaml.safe_load(source.split('RETURN = r"""', 1)[1].split('"""', 1)[0])
        assert "watch" in returned, f"{name} does not document its watch list"


def test_the_first_module_call_on_a_host_discovers_its_python_and_records(probe):
    """With no interpreter set, the first probe's run discovers the host's Python; the record is still written
    with it, and the next task of the same run is answered by it."""
    task = {"probe_double": {"path": str(probe["watched"]), "runs": str(probe["runs"])}}
    playbook = probe["tmp"] / "discover.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Discovery",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {"epforge_state_dir": str(probe["state"])},
                    "tasks": [{"name": "First", **task}, {"name": "Second", **task}],
                }
            ]
        )
    )
    inventory = probe["tmp"] / "hosts.yml"  # localhost with no ansible_python_interpreter: discovery
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}))
    # discovery must find a working python: this machine's PATH may start with pyenv shims of absent versions
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    proc = run_playbook(playbook, env={**probe["env"], "PATH": path}, inventories=(inventory,), timeout=120)
    first, second = (t["hosts"]["localhost"] for t in json_report(proc)["plays"][0]["tasks"])
    assert first["probe_cache"] == {
        "hit": False,
        "reason": "host Python not known yet",
        "record": str(records(probe)[0]),
    }
    assert second["probe_cache"]["hit"] is True and second["content"] == "one\n"
    assert runs(probe) == ["run"]
    assert "ansible_facts" not in json.loads(records(probe)[0].read_text())["result"]


def test_old_records_of_a_module_are_pruned_when_a_new_one_is_written(probe):
    """Keys no longer asked for (other arguments, an older module) do not pile up: after a write the module
    keeps its newest RECORDS_KEPT_PER_MODULE records; another module's records are not touched."""
    folder = probe["state"] / "probe-cache"
    folder.mkdir(parents=True)
    keep = probe_cache_plugin.RECORDS_KEPT_PER_MODULE
    old = []
    for age in range(keep + 2):  # older records of the same module, the first the newest of them
        path = folder / f"probe_double-{age:016x}.json"
        path.write_text("{}")
        stamp = time.time() - 3600 * (age + 1)
        os.utime(path, (stamp, stamp))
        old.append(path)
    other = folder / "probe_double_other-0000000000000000.json"
    other.write_text("{}")
    os.utime(other, (0, 0))

    first = play(probe)
    assert runs(probe) == ["run"]
    written = Path(first["probe_cache"]["record"])
    assert sorted(first["probe_cache"]["pruned"]) == sorted(str(p) for p in old[keep - 1 :])
    assert sorted(records(probe)) == sorted([written, *old[: keep - 1]])
    assert other.exists()
    assert play(probe)["probe_cache"]["hit"] is True  # the record just written was kept


def test_a_record_edited_on_the_host_is_not_replayed(probe):
    """Issue 'nothing let in' (12): a record binds its result to its key with the controller's seal; a
    result edited on the host (the key and watched states left intact) is a miss, and the module answers."""
    play(probe)
    [record] = records(probe)
    saved = json.loads(record.read_text())
    saved["result"]["content"] = "forged\n"
    record.write_text(json.dumps(saved))
    again = play(probe)
    assert again["probe_cache"]["hit"] is False, again["probe_cache"]
    assert "not sealed by this controller" in again["probe_cache"]["reason"]
    assert again["content"] == "one\n" and runs(probe) == ["run", "run"]
    # The module's answer was recorded again, sealed: the next run is a hit.
    assert play(probe)["probe_cache"]["hit"] is True and runs(probe) == ["run", "run"]


def test_a_watch_list_of_thousands_of_paths_is_recorded_and_replayed(probe):
    """A probe that watches a whole env (ml_env_torch: ~1,900 paths for torch) makes a record far past the
    kernel's limit for one argument (128 KiB): the record travels on stdin, and a hit still works."""
    many = probe["tmp"] / "many"
    many.mkdir()
    paths = []
    for index in range(2500):
        path = many / f"{index:05d}-{'x' * 60}.so"
        path.write_text("")
        paths.append(str(path))
    first = play(probe, {"extra_watch": paths})
    assert first["probe_cache"]["hit"] is False and not first.get("failed"), first
    [record] = records(probe)
    assert record.stat().st_size > 200_000 and len(json.loads(record.read_text())["watch"]) == 2501
    second = play(probe, {"extra_watch": paths})
    assert second["probe_cache"]["hit"] is True and runs(probe) == ["run"]
    Path(paths[1234]).write_text("truncated, rewritten")
    third = play(probe, {"extra_watch": paths})
    assert third["probe_cache"]["hit"] is False and runs(probe) == ["run", "run"]


def test_a_long_record_reaches_a_podman_host_without_stdin(probe, molecule_image):
    """Through the podman connection (podman exec without -i: no stdin) a record past one argument's limit
    goes in a file the controller puts on the host; the next run there is a hit."""
    container = "epforge-probe-cache-test"
    subprocess.run(["podman", "rm", "-f", "-t", "0", container], capture_output=True, check=False)
    started = subprocess.run(
        ["podman", "run", "-d", "--name", container, "--entrypoint", "sleep", molecule_image, "600"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    try:
        paths = [f"/opt/many/{index:05d}-{'x' * 60}.so" for index in range(2500)]
        book = probe["tmp"] / "podman.yml"
        task = {"probe_double": {"path": "/etc/hostname", "runs": "/tmp/runs.txt", "extra_watch": paths}}
        play_vars = {
            "ansible_python_interpreter": "/usr/bin/python3",
            "epforge_state_dir": "/var/lib/epforge",
        }
        book.write_text(
            yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": play_vars, "tasks": [task]}])
        )
        inventory = probe["tmp"] / "hosts.yml"
        inventory.write_text(
            yaml.safe_dump(
                {"all": {"hosts": {container: {"ansible_connection": "containers.podman.podman"}}}}
            )
        )
        answers = []
        for _ in range(2):
            proc = run_playbook(book, inventories=(inventory,), env=probe["env"], timeout=180)
            answers.append(json_report(proc)["plays"][0]["tasks"][0]["hosts"][container])
        assert answers[0]["probe_cache"]["hit"] is False and not answers[0].get("failed"), answers[0]
        assert answers[1]["probe_cache"]["hit"] is True, answers[1]["probe_cache"]
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", container], capture_output=True, check=False)


def test_a_sealing_key_others_can_read_is_refused_and_an_empty_one_says_how_to_recover(probe):
    """Issue 35 item 11: the controller's sealing secret (plugins/module_utils/seal.py) is made 0600 at first
    use; one that others can read was used silently (anyone who reads it can forge a record) and is now
    refused with the remedy; an empty one failed every run without saying how to recover and now says it."""
    home = probe["tmp"] / "home"
    probe["env"]["HOME"] = str(home)  # a controller of its own: the key is made at first use
    key = home / ".cache" / "epforge" / "probe-cache.key"
    assert play(probe)["probe_cache"]["hit"] is False
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_text()) == 64
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700

    key.chmod(0o644)
    refused = play(probe, ignore_errors=True)
    assert refused.get("failed") is True, refused
    assert f"sealing key {key} is readable or writable by others (mode 0644)" in refused["msg"]
    assert f"rm {key}" in refused["msg"] and f"chmod 600 {key}" in refused["msg"]

    key.chmod(0o600)
    key.write_text("")
    empty = play(probe, ignore_errors=True)
    assert empty.get("failed") is True and f"sealing key {key} is empty" in empty["msg"], empty
    assert f"remove it (rm {key}) and the next run makes a new one" in empty["msg"]

    key.unlink()  # the remedy: a new key; the old key's record is a miss once, then sealed again
    again = play(probe)
    assert (
        again["probe_cache"]["hit"] is False
        and "not sealed by this controller" in again["probe_cache"]["reason"]
    )
    assert play(probe)["probe_cache"]["hit"] is True
