"""SGLang's PCIe-IPC all-reduce in the collective probe (issue 37).

- the selection rule of the probe script (which all-reduce SGLang 0.5.23 hands to FlashInfer's kernels) as
  pure functions, and the facts it rests on checked against the pinned wheels: SGLang 0.5.23's
  sglang/srt/distributed/device_communicators/pcie_ipc_ar.py, FlashInfer 0.7.2's
  flashinfer/comm/pcie_ipc_ar.py and flashinfer/comm/__init__.py (every class, method and parameter name the
  script calls exists there), EnvBool's spellings in data/sglang_env/0.5.23.json;
- the script's FlashInfer route with a stand-in workspace (the kernels need two GPUs: not on this machine);
- the estimate: each side's fastest variant, so a faster all-reduce changes which parallelism is cheaper;
- the tuner's all-reduce ordering by the pcie-ipc variant's own curve;
- the role's rule (filter pcie_ipc_probe) and the role adding the variant, in check mode, only where it acts.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import shutil
import sys
import types
import zipfile
from types import SimpleNamespace

import pytest
import yaml
from collective_probe import PCIE_IPC_VARIANT, estimate, estimate_by_variant, model_spec, with_pcie_ipc
from conftest import ROOT
from gpu_fact_samples import gpu_facts
from test_release_claims import wheel_file

from ansible_collections.epforge.ep.plugins.filter.pcie_ipc_probe import pcie_ipc_probe
from ansible_collections.epforge.ep.plugins.module_utils import pcie_ipc
from ansible_collections.epforge.ep.plugins.module_utils.tune_plan.space import (
    PCIE_NCCL,
    ep_first,
    nccl_costs,
    ordered,
)
from playbooks import JSON_CALLBACK, json_report, run_playbook

SCRIPT = ROOT / "roles" / "collective_probe" / "files" / "epforge_collective_probe.py"
TABLE = yaml.safe_load((ROOT / "data" / "known_issues.yml").read_text())
STACKS = {
    p.stem: yaml.safe_load(p.read_text())["epforge_stack_spec"] for p in (ROOT / "stacks").glob("*.yml")
}
HIDDEN = 7168


@functools.cache
def probe():
    """The probe script as a module (stdlib only at import: torch is imported by the rank processes)."""
    spec = importlib.util.spec_from_file_location("epforge_collective_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def wheel_tree(package: str, release: str, member: str) -> ast.Module:
    with zipfile.ZipFile(wheel_file(package, release)) as wheel:
        return ast.parse(wheel.read(member).decode())


def sglang_pcie_ipc() -> ast.Module:
    return wheel_tree("sglang", "0.5.23", "sglang/srt/distributed/device_communicators/pcie_ipc_ar.py")


def flashinfer(member: str) -> ast.Module:
    return wheel_tree("flashinfer", "0.7.2", f"flashinfer/comm/{member}")


def named(tree: ast.AST, kind: type, name: str):
    return next(n for n in ast.walk(tree) if isinstance(n, kind) and n.name == name)


def assigned(tree: ast.Module, name: str):
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == name)
    return ast.literal_eval(node.value)


# ------------------------------------------------------------------------------------------ the selection


@pytest.mark.parametrize(
    "case",
    [
        ("bfloat16", 2, 2, True, 64 * HIDDEN, ""),  # at the bound: served
        ("bfloat16", 8, 3, True, HIDDEN, ""),
        ("float16", 2, 2, True, HIDDEN, "float16, not bf16"),
        ("float32", 4, 2, True, HIDDEN, "float32, not bf16"),
        ("bfloat16", 3, 2, True, HIDDEN, "world size 3"),
        ("bfloat16", 16, 2, True, HIDDEN, "world size 16"),
        ("bfloat16", 2, 1, True, HIDDEN, "1-D"),
        ("bfloat16", 2, 2, False, HIDDEN, "not contiguous"),
        ("bfloat16", 2, 2, True, 64 * HIDDEN + 1, "over the workspace bound"),
    ],
)
def test_which_all_reduce_goes_to_the_pcie_ipc_kernels(case):
    """(dtype, world size, dimensions, contiguous, elements, why not): against a bound of 64 rows."""
    dtype, world, ndim, contiguous, numel, why = case
    served, reason = probe().pcie_ipc_serves(
        dtype, world, ndim=ndim, contiguous=contiguous, numel=numel, max_numel=64 * HIDDEN
    )
    assert served is (why == "") and why in reason, reason


def test_the_switch_the_bound_and_why_the_variant_cannot_act():
    p = probe()
    for value, on in [("1", True), ("TRUE", True), ("y", True), ("0", False), ("no", False), ("", False)]:
        assert p.pcie_ipc_switch({p.PCIE_IPC_SWITCH: value}) is on, value
    assert p.pcie_ipc_switch({}) is False
    with pytest.raises(ValueError, match="not a boolean SGLang reads"):
        p.pcie_ipc_switch({p.PCIE_IPC_SWITCH: "on"})
    # decode-sized: the probe's widest message, as SGLang sizes it from its widest captured decode batch
    assert p.pcie_ipc_bound({}, HIDDEN, [1, 8, 64, 512]) == (
        512 * HIDDEN,
        "largest tokens (512) x hidden (7168)",
    )
    assert p.pcie_ipc_bound({p.PCIE_IPC_MAX_NUMEL: "0"}, HIDDEN, [1, 64])[0] == 64 * HIDDEN
    assert p.pcie_ipc_bound({p.PCIE_IPC_MAX_NUMEL: "1048576"}, HIDDEN, [1]) == (1048576, p.PCIE_IPC_MAX_NUMEL)
    with pytest.raises(ValueError, match="not an integer"):
        p.pcie_ipc_bound({p.PCIE_IPC_MAX_NUMEL: "lots"}, HIDDEN, [1])
    assert p.pcie_ipc_unavailable(4, "cuda", "bfloat16", "") == []
    reasons = p.pcie_ipc_unavailable(3, "cpu", "float16", "ImportError: cannot import name")
    assert [r.split(" ")[0] for r in reasons] == ["FlashInfer", "world", "it", "SGLang"], reasons


# ------------------------------------------------------------------ the facts, against the pinned wheels


def test_the_rule_is_sglang_0_5_23s():
    """World sizes (SGLang's and FlashInfer's), the tests of should_pcie_ipc_ar the rule mirrors, where SGLang
    imports the workspace from, and tune_rows against SGLang's own _tune_batches (run from the wheel)."""
    p, tree = probe(), sglang_pcie_ipc()
    assert assigned(tree, "_SUPPORTED_WORLD_SIZES") == p.PCIE_IPC_WORLD_SIZES
    assert assigned(flashinfer("pcie_ipc_ar.py"), "_SUPPORTED_WORLD_SIZES") == p.PCIE_IPC_WORLD_SIZES
    should = ast.unparse(named(tree, ast.FunctionDef, "should_pcie_ipc_ar"))
    for test in (
        "not inp.is_contiguous()",
        "inp.dim() < 2",
        "inp.dtype is not torch.bfloat16",
        "inp.numel() > self.max_numel",
        "self._workspace.supports(inp)",
    ):
        assert test in should, test
    imports = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("flashinfer.comm", "PcieIpcAllReduceWorkspace") in imports
    upstream: dict = {}
    exec(compile(ast.Module([named(tree, ast.FunctionDef, "_tune_batches")], []), "wheel", "exec"), upstream)  # noqa: S102
    for rows in (0, 1, 3, 8, 64, 100, 512, 513, 4096):
        assert p.tune_rows(rows) == tuple(upstream["_tune_batches"](rows)), rows


def test_the_switch_reads_as_sglangs_envbool():
    env = json.loads((ROOT / "data" / "sglang_env" / "0.5.23.json").read_text())
    spellings = env["types"]["EnvBool"]
    assert spellings["lowercased"] is True
    assert probe().ENV_TRUE == tuple(spellings["true"]) == pcie_ipc.ENV_TRUE
    assert probe().ENV_FALSE == tuple(spellings["false"])
    assert env["typed"][probe().PCIE_IPC_SWITCH]["type"] == "EnvBool"
    assert env["typed"][probe().PCIE_IPC_MAX_NUMEL]["type"] == "EnvInt"
    assert pcie_ipc.switched_on({pcie_ipc.VARIABLE: "Yes"}) and not pcie_ipc.switched_on(
        {pcie_ipc.VARIABLE: "0"}
    )


def calls_of(cls: ast.ClassDef) -> dict[str, list[ast.Call]]:
    """The script's calls into FlashInfer: the workspace's constructor and self.workspace.<method>(...)."""
    found: dict[str, list[ast.Call]] = {}
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "PcieIpcAllReduceWorkspace":
            found.setdefault("__init__", []).append(node)
        elif isinstance(func, ast.Attribute) and ast.unparse(func.value) == "self.workspace":
            found.setdefault(func.attr, []).append(node)
    return found


def test_every_flashinfer_name_and_parameter_the_script_calls_exists_in_0_7_2():
    """The kernels need two GPUs; what can be checked here is that each call matches FlashInfer 0.7.2's
    signatures (names the script imports from flashinfer.comm, methods, keyword and positional arguments),
    and that the workspace is built and tuned with the keywords SGLang 0.5.23 uses."""
    route = named(ast.parse(SCRIPT.read_text()), ast.ClassDef, "PcieIpcAllReduce")
    exported = {
        alias.asname or alias.name
        for node in flashinfer("__init__.py").body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    imported = [a.name for n in ast.walk(route) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert imported == ["PcieIpcAllReduceWorkspace", "pcie_ipc_default_cache_path"]
    assert set(imported) <= exported
    workspace = named(flashinfer("pcie_ipc_ar.py"), ast.ClassDef, "PcieIpcAllReduceWorkspace")
    methods = {n.name: n.args for n in workspace.body if isinstance(n, ast.FunctionDef)}
    calls = calls_of(route)
    assert set(calls) == {"__init__", "tune", "supports", "rebind_stream", "all_reduce", "destroy"}
    for method, found in calls.items():
        params = methods[method]
        positional = [a.arg for a in params.posonlyargs + params.args][1:]  # without self
        keywords = set(positional) | {a.arg for a in params.kwonlyargs}
        for call in found:
            assert len(call.args) <= len(positional), (method, ast.unparse(call))
            assert {k.arg for k in call.keywords} <= keywords, (method, ast.unparse(call), keywords)
    sglang = sglang_pcie_ipc()
    build = next(
        n
        for n in ast.walk(sglang)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "self._workspace_cls"
    )
    tune = next(
        n
        for n in ast.walk(sglang)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "self._workspace.tune"
    )
    assert {k.arg for k in calls["__init__"][0].keywords} == {k.arg for k in build.keywords}
    assert {k.arg for k in calls["tune"][0].keywords} == {k.arg for k in tune.keywords}


# --------------------------------------------------------------------- the route, with a stand-in workspace


class Tensor(SimpleNamespace):
    def dim(self):
        return len(self.shape)

    def numel(self):
        return functools.reduce(lambda a, b: a * b, self.shape, 1)

    def is_contiguous(self):
        return self.contiguous


def bf16(*shape, contiguous=True) -> Tensor:
    return Tensor(dtype="torch.bfloat16", shape=shape, contiguous=contiguous)


@pytest.fixture
def stand_in(monkeypatch):
    """flashinfer.comm with a workspace that records what it is asked (the real one needs CUDA IPC)."""
    seen: dict = {
        "calls": [],
        "supports": True,
        "tune": lambda *a, **k: {(HIDDEN, 1): "cfg", (HIDDEN, 2): "cfg"},
    }

    class Workspace:
        def __init__(self, **kwargs):
            seen["init"] = kwargs

        def tune(self, hiddens, **kwargs):
            seen["calls"].append(("tune", hiddens, kwargs))
            return seen["tune"](hiddens, **kwargs)

        def supports(self, x):
            seen["calls"].append(("supports", x.shape))
            return seen["supports"]

        def rebind_stream(self):
            seen["calls"].append(("rebind",))

        def all_reduce(self, x):
            seen["calls"].append(("all_reduce", x.shape))
            return x

        def destroy(self):
            seen["calls"].append(("destroy",))

    comm = types.ModuleType("flashinfer.comm")
    comm.PcieIpcAllReduceWorkspace = Workspace
    comm.pcie_ipc_default_cache_path = lambda world: f"/cache/pcie_ipc_all_reduce_ws{world}.json"
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.comm", comm)
    seen["stream"] = "eager"
    torch = SimpleNamespace(bfloat16="bf16", cuda=SimpleNamespace(current_stream=lambda: seen["stream"]))
    dist = SimpleNamespace(group=SimpleNamespace(WORLD="world"), new_group=lambda backend: f"{backend}-group")
    args = SimpleNamespace(pcie_ipc_max_numel=64 * HIDDEN, hidden=HIDDEN, world_size=2, backend="nccl")
    return seen, torch, dist, args


def test_the_route_builds_tunes_selects_and_rebinds_as_sglang_does(stand_in):
    seen, torch, dist, args = stand_in
    route = probe().PcieIpcAllReduce(torch, dist, args)
    assert seen["init"] == {
        "group": "world",
        "max_numel": 64 * HIDDEN,
        "dtype": "bf16",
        "tune_batches": (1, 2, 4, 8, 16, 32, 64),
        "tune_cache": "/cache/pcie_ipc_all_reduce_ws2.json",
    }
    assert seen["calls"] == [("tune", [HIDDEN], {"dtype": "bf16", "tune_group": "gloo-group"})]
    assert (route.tuned, route.tune_error) == (2, "")
    timer = probe().RankTimer(torch, dist, args, "cuda:0", True, pcie_ipc=route)
    call, path = timer.allreduce_call(bf16(8, HIDDEN))
    assert path == "pcie_ipc"
    seen["calls"].clear()
    call()
    call()
    seen["stream"] = "graph-capture"  # a workspace serves one stream: the binding moves with the caller
    call()
    assert [c[0] for c in seen["calls"]] == ["rebind", "all_reduce", "all_reduce", "rebind", "all_reduce"]
    # NCCL where SGLang keeps it: past the bound, 1-D, or refused by the workspace's supports()
    assert timer.allreduce_call(bf16(512, HIDDEN))[1] == "nccl"
    assert timer.allreduce_call(bf16(HIDDEN))[1] == "nccl"
    seen["supports"] = False
    assert timer.allreduce_call(bf16(1, HIDDEN))[1] == "nccl"


def test_a_failed_tune_keeps_the_seed_policy_and_says_so(stand_in):
    seen, torch, dist, args = stand_in

    def refuse(*_args, **_kwargs):
        raise ValueError("no shape admitted")

    seen["tune"] = refuse
    route = probe().PcieIpcAllReduce(torch, dist, args)
    assert route.tuned == 0 and "no shape admitted" in route.tune_error and "seed policy" in route.tune_error


# ------------------------------------------------------------------------------------------- the estimate


def table(variant: str, path: str, ar_us: float, a2a_us: float) -> list[dict]:
    """A variant's rows in the fact's table shape (graph mode, 1 and 64 tokens)."""
    return [
        {
            "variant": variant,
            "op": op,
            "mode": "graph",
            "tokens": tokens,
            "path": path if op == "allreduce" else "nccl",
            "mean_us": (ar_us if op == "allreduce" else a2a_us) * (1 + tokens / 64),
        }
        for op in ("allreduce", "all_to_all")
        for tokens in (1, 64)
    ]


def test_a_faster_all_reduce_changes_which_parallelism_is_cheaper():
    """With DP attention (no attention allreduce under EP) and NCCL's allreduce at 40 us, EP is cheaper; the
    PCIe-IPC all-reduce at 5 us makes TP cheaper, the verdict rows name it, and the tuner's ep_first reads
    the change. The per-variant rows are kept (NCCL's still say EP)."""
    model = model_spec({"ep_attention_allreduce_per_layer": 0})
    nccl = table("default", "nccl", 40.0, 30.0) + table("nccl_pcie", "nccl", 38.0, 29.0)
    ipc = table("pcie_ipc", "pcie_ipc", 5.0, 30.0)
    without = estimate(nccl, model)
    assert {(r["cheaper"], r["tp_variant"], r["ep_variant"]) for r in without} == {
        ("ep", "nccl_pcie", "nccl_pcie")
    }
    assert ep_first(without)[0] is True
    rows = estimate(nccl + ipc, model)
    assert [(r["tokens"], r["cheaper"], r["tp_variant"], r["tp_path"]) for r in rows] == [
        (1, "tp", "pcie_ipc", "pcie_ipc"),
        (64, "tp", "pcie_ipc", "pcie_ipc"),
    ]
    one = rows[0]
    assert one["tp_us"] == pytest.approx(122 * 5.0 * (1 + 1 / 64), abs=0.1)
    # EP at its own best variant: the one with the cheapest all_to_all here (PCIe-IPC leaves it on NCCL)
    assert one["ep_variant"] == "nccl_pcie" and one["all_to_all_us"] == pytest.approx(29.0 * (1 + 1 / 64))
    assert one["ep_us"] == pytest.approx((2 * 38.0 + 120 * 29.0) * (1 + 1 / 64), abs=0.1)
    assert ep_first(rows)[0] is False
    per_variant = estimate_by_variant(nccl + ipc, model)
    assert {r["variant"]: r["cheaper"] for r in per_variant} == {
        "default": "ep",
        "nccl_pcie": "ep",
        "pcie_ipc": "tp",
    }


def test_the_pcie_ipc_variant_is_added_once():
    default = [{"name": "default", "env": {}}]
    assert with_pcie_ipc(default, True) == [*default, PCIE_IPC_VARIANT]
    assert with_pcie_ipc(default, False) == default
    own = [{"name": "mine", "env": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "true"}}]
    assert with_pcie_ipc(own, True) == own
    assert PCIE_IPC_VARIANT["env"] == pcie_ipc.ENV_ON  # the tuner's pcie-ipc candidate's environment


# ----------------------------------------------------------------------------- the tuner's all-reduce order


def curve(variant: str, env: dict, us: float) -> list[dict]:
    return [
        {"variant": variant, "env": env, "op": "allreduce", "size": size, "median_us": us}
        for size in (1024, 65536, 1048576)
    ]


def test_the_pcie_ipc_candidate_is_placed_by_its_own_curve():
    """Before, the pcie-ipc candidate's key held no NCCL_* variable, so it took NCCL as it is's cost."""
    on = dict(pcie_ipc.ENV_ON)
    points = curve("default", {}, 40.0) + curve("nccl_pcie", PCIE_NCCL, 30.0) + curve("pcie_ipc", on, 5.0)
    costs, why = nccl_costs(points)
    assert "lowest with variant pcie_ipc" in why
    candidates = [
        {"name": name, "settings": {"env": env}}
        for name, env in (("nccl-default", {}), ("nccl-pcie", PCIE_NCCL), ("pcie-ipc", on))
    ]
    assert [c["name"] for c in ordered(candidates, None, costs)] == ["pcie-ipc", "nccl-pcie", "nccl-default"]
    slow = curve("default", {}, 40.0) + curve("pcie_ipc", on, 60.0)
    assert [c["name"] for c in ordered(candidates, None, nccl_costs(slow)[0])][:2] == [
        "nccl-default",
        "pcie-ipc",
    ]
    # the variable off is NCCL as it is; two variants with one all-reduce environment: the lower counts
    off = {"default": {}, "other": {"X": "1", pcie_ipc.VARIABLE: "0"}}
    costs, _ = nccl_costs(curve("default", {}, 40.0) + curve("other", off["other"], 20.0))
    assert costs == {(): 60.0}


# ---------------------------------------------------------------------------------------- the role's rule


@pytest.mark.parametrize(
    "case",
    [
        (gpu_facts("12.0", 8, "pcie"), "cu130", {}, None, True, "the model's dtype is unknown to the probe"),
        (
            gpu_facts("12.0", 4, "pcie"),
            "cu130",
            {"dtype": "bfloat16"},
            None,
            True,
            "the request's dtype is bfloat16",
        ),
        # asked about the host: the request's own switch does not decide whether the probe measures it
        (gpu_facts("12.0", 2, "pcie"), "cu130", {"env": {pcie_ipc.VARIABLE: "0"}}, None, True, "TP 2"),
        (gpu_facts("12.0", 8, "pcie"), "cu130", {"dtype": "float16"}, None, False, "bf16 only"),
        (gpu_facts("12.0", 3, "pcie"), "cu130", {}, None, False, "does not apply to TP 3"),
        (gpu_facts("12.0", 8, "pcie"), "cu130-torch211", {}, None, False, "does not apply to TP 8"),
        (
            gpu_facts("12.0", 8, "pcie"),
            "cu130",
            {},
            [{"name": "default"}],
            False,
            "collective_probe_variants",
        ),
        (gpu_facts("9.0", 8, "nvlink"), "cu130", {}, None, False, ""),
    ],
)
def test_the_role_adds_the_variant_only_where_it_can_act(case):
    """(GPU facts, stack, request, the user's variants, whether added, why)."""
    host, stack, request_, variants, add, why = case
    verdict = pcie_ipc_probe(host, TABLE, STACKS[stack], {"model_path": "/models/m", **request_}, variants)
    assert verdict["add"] is add and why in verdict["reason"], verdict
    assert (verdict["reason"] == "") is (why == "")


def test_the_role_in_check_mode_names_the_variants_it_would_measure(tmp_path):
    """Role collective_probe on an 8x PCIe host (stack cu130: SGLang 0.5.23, FlashInfer 0.7.2) would measure
    pcie_ipc too and says why; on an 8x NVLink host not. Check mode runs no probe."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy2(SCRIPT, scripts / SCRIPT.name)
    hosts = {"pcie8": gpu_facts("12.0", 8, "pcie"), "nvlink8": gpu_facts("9.0", 8, "nvlink")}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        name: {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "gpu": facts,
                        }
                        for name, facts in hosts.items()
                    }
                }
            }
        )
    )
    playbook = tmp_path / "probe.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Probe",
                    "hosts": "all",
                    "gather_facts": False,
                    "vars": {
                        "epforge_stack": "cu130",
                        "epforge_facts_dir": str(tmp_path / "facts" / "{{ inventory_hostname }}"),
                        "epforge_state_dir": str(tmp_path / "state"),
                        "epforge_log_dir": str(tmp_path / "log" / "{{ inventory_hostname }}"),
                        "collective_probe_python": sys.executable,
                        "collective_probe_script_dir": str(scripts),
                    },
                    "tasks": [
                        {"name": "Load the stack", "ansible.builtin.import_role": {"name": "epforge"}},
                        {
                            "name": "GPU facts",
                            "ansible.builtin.set_fact": {"ansible_facts": {"epforge_gpu_facts": "{{ gpu }}"}},
                        },
                        {"name": "Probe", "ansible.builtin.include_role": {"name": "collective_probe"}},
                        {"name": "Show", "ansible.builtin.debug": {"msg": "{{ epforge_steps }}"}},
                    ],
                }
            ]
        )
    )
    proc = run_playbook(playbook, "--check", inventories=(inventory,), env=JSON_CALLBACK, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:]
    shown = json_report(proc)["plays"][0]["tasks"][-1]["hosts"]
    pcie = shown["pcie8"]["msg"][-1]["detail"]
    assert "would measure default, nccl_pcie, nccl_p2p_disabled, pcie_ipc; variant pcie_ipc added" in pcie
    assert "the model's dtype is unknown to the probe" in pcie
    assert shown["nvlink8"]["msg"][-1]["detail"] == (
        "Not measured: would measure default, nccl_pcie, nccl_p2p_disabled."
    )
