"""plugins/module_utils/payload.py and payloads/: code that runs in another Python, as real files (issue 40).
The installed-versions query was written three times (pip_guard, sglang_install, sglang_flags); it is one
payload now, run here in real interpreters: this test's own and a fresh venv without the distributions."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import venv
from pathlib import Path

from ansible_collections.epforge.ep.plugins.module_utils.payload import run_payload
from ansible_collections.epforge.ep.plugins.module_utils.payloads import installed_versions
from ansible_collections.epforge.ep.plugins.module_utils.sglang_flags import installed_version
from ansible_collections.epforge.ep.plugins.module_utils.sglang_install.pip_guard import (
    installed_versions as guard_versions,
)


def test_the_payload_is_code_here_too():
    assert installed_versions.versions(["pytest", "no-such-distribution-epforge"]) == {
        "pytest": __import__("pytest").__version__,
        "no-such-distribution-epforge": None,
    }


def test_it_runs_in_another_interpreter_and_answers_json(tmp_path):
    env = tmp_path / "bare"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    run = run_payload(python, installed_versions, ["pytest", "pip"])
    assert run.rc == 0 and run.answer == {"pytest": None, "pip": None}, run.output
    assert run.argv == [str(python), "-c", "<payload installed_versions>", "pytest", "pip"]
    # and in this one, where pytest is installed
    assert run_payload(sys.executable, installed_versions, ["pytest"]).answer["pytest"]


def test_a_dead_interpreter_gives_no_answer(tmp_path):
    missing = tmp_path / "gone" / "python"
    run = run_payload(missing, installed_versions, ["pytest"])
    assert run.rc != 0 and run.answer is None


def test_the_three_callers_read_the_same_answer(tmp_path):
    """pip_guard (normalized names, absent left out) and sglang_flags (one distribution) over the payload."""
    assert guard_versions(sys.executable, ["PyTest", "no-such-distribution-epforge"]) == {
        "pytest": __import__("pytest").__version__
    }
    version, _, query = installed_version(sys.executable)
    assert query == [sys.executable, "-c", "<payload installed_versions>", "sglang"]
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.metadata as m\ntry: print(m.version('sglang'))\nexcept Exception: print('')",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (version or "") == shown


def test_the_import_check_payload_reports_an_import_and_a_missing_one():
    """payloads/import_check.py (module python_import_check's probe, a string before): as code here, and run
    through payload_argv in this interpreter, the import's own output before its marked line."""
    from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv  # noqa: PLC0415
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import import_check  # noqa: PLC0415

    ok = import_check.check("json", "")
    assert ok["ok"] is True and ok["file"].endswith("json/__init__.py") and ok["error"] == ""
    missing = import_check.check("no_such_module_epforge", "")
    assert missing["ok"] is False and missing["missing_name"] == "no_such_module_epforge"
    assert missing["error_type"] == "ModuleNotFoundError" and "Traceback" in missing["traceback_tail"]
    argv, shown = payload_argv(sys.executable, import_check, ["this", "pytest"])
    assert shown == [sys.executable, "-c", "<payload import_check>", "this", "pytest"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert "The Zen of Python" in out  # what the import printed comes first
    answer = json.loads(out.strip().splitlines()[-1][len(import_check.MARK) :])
    assert answer["ok"] is True and answer["version"] == __import__("pytest").__version__


def test_the_interpreter_facts_payload_lists_only_when_asked():
    """payloads/interpreter_facts.py (module wheelhouse_probe's probe, a string before), run in this
    interpreter: its version and glibc, its distributions with "1" and none with "0"."""
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import interpreter_facts  # noqa: PLC0415

    listed = run_payload(sys.executable, interpreter_facts, ["1"])
    assert listed.rc == 0 and listed.answer["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert listed.answer["glibc"] and listed.answer["installed"]["pytest"] == __import__("pytest").__version__
    assert run_payload(sys.executable, interpreter_facts, ["0"]).answer["installed"] == {}


def test_the_env_site_payload_finds_the_site_dirs_and_no_nvshmem_in_a_bare_env(tmp_path):
    """payloads/env_site.py (module deepep_plan's probe, a string before), run in a bare venv: its own site
    dirs, and no nvidia.nvshmem wheel there (no dir, no version); as code here, a distribution's version."""
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import env_site  # noqa: PLC0415

    env = tmp_path / "bare"
    venv.create(env, with_pip=False)
    run = run_payload(env / "bin" / "python", env_site, ["nvidia-nvshmem-cu13"])
    assert run.rc == 0, run.output
    assert all(str(d).startswith(str(env)) and d.endswith("site-packages") for d in run.answer["site"])
    assert run.answer["nvshmem_dir"] == "" and run.answer["nvshmem_version"] == ""
    assert env_site.env_site("pytest")["nvshmem_version"] == __import__("pytest").__version__


# A fake flashinfer.jit.activation with FlashInfer 0.6.x's JitSpec.build(verbose) (no default): the kernel
# "builds" by writing its library once.
FAKE_ACTIVATION = """
import pathlib, os
class Spec:
    def __init__(self, name):
        self.jit_library_path = pathlib.Path(os.environ["FAKE_JIT_DIR"]) / (name + "_and_mul.so")
    def build(self, verbose):
        if not self.jit_library_path.exists():
            self.jit_library_path.write_bytes(b"kernel")
def gen_act_and_mul_module(name):
    return Spec(name)
"""


def test_the_flashinfer_jit_payload_builds_once_then_finds_it(tmp_path):
    """payloads/flashinfer_jit.py (module flashinfer_jit_check's script, a string before), run by argv from
    payload_argv over a fake FlashInfer with 0.6.x's build signature: built, then up to date."""
    from ansible_collections.epforge.ep.plugins.module_utils.payload import payload_argv  # noqa: PLC0415
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import flashinfer_jit  # noqa: PLC0415

    package = tmp_path / "site" / "flashinfer" / "jit"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "activation.py").write_text(FAKE_ACTIVATION)
    env = {"PYTHONPATH": str(tmp_path / "site"), "FAKE_JIT_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    argv, shown = payload_argv(sys.executable, flashinfer_jit, ["silu"])
    assert shown[-2:] == ["<payload flashinfer_jit>", "silu"]
    answers = []
    for _ in range(2):
        out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
        answers.append(json.loads(out.strip().splitlines()[-1][len(flashinfer_jit.MARK) :]))
    library = str(tmp_path / "silu_and_mul.so")
    assert answers == [
        {"library": library, "built": True, "exists": True},
        {"library": library, "built": False, "exists": True},
    ]


def test_the_python_layout_payload_describes_a_venv_by_its_own_paths(tmp_path):
    """payloads/python_layout.py (the probes of final_env_check, cuda_extension_install, cuda_extension_plan
    and the watch list: four strings before)."""
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import python_layout  # noqa: PLC0415

    env = tmp_path / "bare"
    venv.create(env, with_pip=False)
    run = run_payload(env / "bin" / "python", python_layout)
    assert run.rc == 0, run.output
    assert run.answer["prefix"] == str(env) and [run.answer["major"], run.answer["minor"]] == list(
        sys.version_info[:2]
    )
    assert run.answer["impl"] == sys.implementation.name and run.answer["machine"]
    assert all(
        run.answer[k].startswith(str(env)) and run.answer[k].endswith("site-packages")
        for k in ("purelib", "platlib")
    )
    assert run.answer["platlib"] in run.answer["path"]


def record_line(site, rel: str) -> str:
    data = (site / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


def test_the_env_owners_payload_finds_the_distribution_a_module_loads_from_and_a_changed_file(tmp_path):
    """payloads/env_owners.py (final_env_check's inspection, a string before), run in a venv holding one
    distribution laid out as pip installs a wheel (package, dist-info, RECORD of sha256 hashes): its owner,
    RECORD-verified without importing it; then one of its files edited on disk."""
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import env_owners, python_layout  # noqa: PLC0415

    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(run_payload(python, python_layout).answer["purelib"])
    pkg = site / "epforge_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('imported: the payload must not import it')\n")
    (pkg / "extra.py").write_text("X = 1\n")
    info = site / "epforge_probe_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: epforge-probe-pkg\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("epforge_probe_pkg\n")
    rels = [
        "epforge_probe_pkg/__init__.py",
        "epforge_probe_pkg/extra.py",
        "epforge_probe_pkg-1.0.dist-info/METADATA",
    ]
    record = [record_line(site, rel) for rel in rels] + ["epforge_probe_pkg-1.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")

    args = [json.dumps(["epforge_probe_pkg", "not_installed_mod"]), json.dumps(["epforge_probe_pkg"])]
    run = run_payload(python, env_owners, args, env_update={"PYTHONNOUSERSITE": "1"})
    assert run.rc == 0, run.output
    module = run.answer["modules"]["epforge_probe_pkg"]
    assert module["origin"] == str((pkg / "__init__.py").resolve())
    (claim,) = module["claims"]
    assert claim["distribution"] == "epforge-probe-pkg" and claim["version"] == "1.0"
    assert claim["provides_origin"] and claim["files_changed"] == 0 and claim["files_matched"] == 2
    assert run.answer["modules"]["not_installed_mod"] == {"origin": "", "claims": []}

    (pkg / "extra.py").write_text("X = 2\n")
    (claim,) = run_payload(python, env_owners, args).answer["modules"]["epforge_probe_pkg"]["claims"]
    assert claim["files_changed"] == 1 and claim["files_matched"] == 1 and claim["provides_origin"]


def test_the_probe_record_payload_writes_reads_and_prunes_as_code(tmp_path):
    """payloads/probe_record.py (probe_cache's two host scripts, strings before), called as code: a record
    stands until a watched path moves; a module keeps its newest records only."""
    from ansible_collections.epforge.ep.plugins.module_utils.payloads import probe_record  # noqa: PLC0415

    watched = tmp_path / "watched"
    watched.write_text("a")
    folder = tmp_path / "probe-cache"
    record = str(folder / "mod-0001.json")
    data = {"key": "k1", "watch": [str(watched)], "result": {"x": 1}, "seal": "s"}
    encoded = base64.b64encode(json.dumps(data).encode()).decode()
    assert probe_record.write_record(record, encoded) == {"written": record, "pruned": []}
    assert oct((folder / "mod-0001.json").stat().st_mode & 0o777) == "0o600"
    hit = probe_record.read_record(record, "k1")
    assert hit["hit"] is True and hit["result"] == {"x": 1} and hit["watch"] == [str(watched)]
    assert probe_record.read_record(record, "k2") == {"hit": False, "reason": "inputs changed"}
    watched.write_text("bb")
    assert probe_record.read_record(record, "k1")["reason"] == f"changed: {watched}"
    for index in range(2, 5):
        other = str(folder / f"mod-000{index}.json")
        pruned = probe_record.write_record(other, encoded, keep=2)["pruned"]
    assert sorted(p.name for p in folder.iterdir()) == ["mod-0003.json", "mod-0004.json"] and pruned
