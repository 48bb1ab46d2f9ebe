"""The tuner's search space (issue 22): the candidate server settings one host tries.

A candidate is {name, changes, env[, note]}: `changes` are settings laid over the requested settings (a value
of None removes that setting), `env` environment variables laid over the request's `env`, `note` what it does
with the request's own settings where that needs saying. The default space is derived from the host's GPU
facts and the request:

- parallelism: tensor parallel over every GPU; with two GPUs or more also expert parallel (ep_size = the GPU
  count) with each all-to-all backend of EP_BACKENDS that the installed SGLang's parser offers;
- speculative decoding off; on with EAGLE3 and the draft model when one is given, with each parameter set
  (num_steps, eagle_topk, num_draft_tokens) of EAGLE_PARAMETER_SETS - the two the release itself picks from
  by model architecture when none is set; and NGRAM (no draft weights) when the workload reads a prompt file
  and the release's parser has NGRAM's settings - on random ids an n-gram draft matches nothing, so it is
  left out there;
- CUDA graphs at SGLang's own default batch sizes, up to the workload's largest concurrency (rounded up to
  a multiple of 8), and off, whatever the request says: each of these sets every CUDA-graph setting of
  the decode phase (sglang_args.GRAPH_KEYS) itself, so graphs on drop the request's disable_cuda_graph and
  graphs off drop its batch sizes (`--cuda-graph-max-bs 16 --disable-cuda-graph` runs without graphs, issue
  34); the request's own graph settings are one more candidate (graph-request) when they are none of these.
  Each of them notes what it replaces of the request;
- on PCIe hosts with two GPUs or more, NCCL as it is and with PCIE_NCCL (NCCL_P2P_LEVEL=SYS with the
  LL, LL128 and Simple protocols: on 8x RTX PRO 6000 it raised speculative throughput from about 1003 to
  1131 tok/s, local-inference-lab's rtx6kpro wiki, NCCL tuning page), and SGLang's PCIe-IPC all-reduce on
  with NCCL as it is where it can act (module_utils/pcie_ipc.py: PCIe or mixed GPUs, TP 2/4/8, bf16, SGLang
  >= 0.5.21 with FlashInfer >= 0.7.0), so three options and not four.

A space given by the user replaces it: a grid ({setting: [values, ...], ..., env: [{...}, ...]}, every
combination) or a list of candidates. Pure functions: no Ansible, no I/O.
"""

from __future__ import annotations

import itertools
import json
import math
import re

from ansible_collections.epforge.ep.plugins.module_utils.pcie_ipc import (
    ENV_ON,
    VARIABLE,
    switched_on,
)
from ansible_collections.epforge.ep.plugins.module_utils.sglang_args import (
    GRAPH_KEYS,
    SETTINGS_SCHEMA,
    sizes_graphs,
    table_flags,
    table_spec,
    turns_graphs_off,
)

# The all-to-all backends the default space tries for expert parallelism, where the installed SGLang offers
# them (its flag table's choices for moe_a2a_backend); "none" is EP over the usual collectives.
EP_BACKENDS = ("none", "deepep")
PCIE_NCCL = {"NCCL_P2P_LEVEL": "SYS", "NCCL_PROTO": "LL,LL128,Simple"}
# SGLang's PCIe-IPC all-reduce switched on (where module_utils/pcie_ipc.can_act says it can act).
PCIE_IPC_ON = dict(ENV_ON)
SPECULATIVE_KEYS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
# (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens): the two sets SGLang 0.5.16
# and 0.5.23 choose from by model architecture when none is given (_auto_choose_speculative_params in
# sglang/srt/arg_groups/speculative_hook.py; read in both wheels by
# tests/unit/test_tune_space_speculative.py): a chain (topk 1) and a tree.
EAGLE_PARAMETER_SETS = ((3, 1, 4), (5, 4, 8))
# A flag only a release with NGRAM speculation has (its BFS breadth), so its presence says NGRAM is there.
NGRAM_FLAG = "speculative_ngram_max_bfs_breadth"
# What NGRAM changes besides: the release sets max_running_requests to 48 when it is unset (_handle_ngram).
NGRAM_RUNNING_REQUESTS = 48
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=,-]*$")


def speculative_options(flag_table: dict | None, draft_model: str, *, prompt_file: bool) -> list[tuple]:
    """The speculative options beside "off": EAGLE3 with the draft model at each of EAGLE_PARAMETER_SETS,
    and NGRAM where the workload is real text and the release has it ([] when neither applies)."""
    options: list[tuple] = []
    if draft_model:
        for steps, topk, draft in EAGLE_PARAMETER_SETS:
            changes = {
                "speculative_algorithm": "EAGLE3",
                "speculative_draft_model_path": draft_model,
                "speculative_num_steps": steps,
                "speculative_eagle_topk": topk,
                "speculative_num_draft_tokens": draft,
            }
            options.append((f"eagle3-s{steps}k{topk}d{draft}", changes, {}))
    if prompt_file and NGRAM_FLAG in ((flag_table or {}).get("flags") or {}):
        changes = {**dict.fromkeys(SPECULATIVE_KEYS), "speculative_algorithm": "NGRAM"}
        note = (
            "NGRAM speculation (drafts from the text already seen, no draft weights); SGLang sets "
            f"max_running_requests to {NGRAM_RUNNING_REQUESTS} unless the request sets it"
        )
        options.append(("ngram", changes, {}, note))
    return options


def offered_backends(flag_table: dict | None) -> list[str]:
    """EP_BACKENDS that the release's parser accepts for moe_a2a_backend (only "none" without a table)."""
    spec = ((flag_table or {}).get("flags") or {}).get("moe_a2a_backend") or {}
    choices = spec.get("choices") or ["none"]
    return [backend for backend in EP_BACKENDS if backend in choices]


def graph_batch_size(concurrencies: list[int]) -> int:
    """The workload's largest concurrency rounded up to a multiple of 8 (0 without a concurrency)."""
    top = max((int(c) for c in concurrencies or []), default=0)
    return -(-top // 8) * 8


def graph_settings(settings: dict) -> dict:
    """The decode CUDA-graph settings (GRAPH_KEYS) that settings set: unset, false and empty ones left out."""
    return {key: settings[key] for key in GRAPH_KEYS if settings.get(key) not in (None, False, [])}


def described_graphs(graphs: dict) -> str:
    """Graph settings as the plan names them: "key: value, ..." (values as JSON: true, 48, [1, 2])."""
    return ", ".join(f"{key}: {json.dumps(value)}" for key, value in graphs.items())


def graph_options(request: dict, flag_table: dict | None, concurrencies: list[int]) -> list[tuple]:
    """The cuda_graph dimension: [(label, changes, env, note), ...]. SGLang's default, up to the largest
    concurrency and off each set every graph setting the release knows (and any the request holds), so none
    keeps a request's setting that would contradict it; the request's own graph settings are one more
    option when they are none of these (and not themselves a contradiction validate_settings refuses).
    The notes say what each replaces of the request (none when it sets no graph setting)."""
    flags = table_flags(flag_table)
    cleared = {
        key: None for key in GRAPH_KEYS if key in SETTINGS_SCHEMA or table_spec(key, flags) or key in request
    }
    size = graph_batch_size(concurrencies)
    # SGLang's default first: the likely strong incumbent, against which the tuner stops weaker ones early.
    options = [("graph-default", cleared, "CUDA graphs at SGLang's default batch sizes")]
    if size > 0:
        options.append(
            (
                f"graph-bs{size}",
                {**cleared, "cuda_graph_max_bs": size},
                f"CUDA graphs up to batch size {size} (the largest concurrency)",
            )
        )
    options.append(("graph-off", {**cleared, "disable_cuda_graph": True}, "CUDA graphs off"))
    own = graph_settings(request)
    if not own:
        return [(label, changes, {}, "") for label, changes, _note in options]
    asked = f"the request's own CUDA-graph settings ({described_graphs(own)})"
    found = [
        (
            label,
            changes,
            {},
            asked
            if graph_settings(changes) == own
            else f"{note}, in place of the request's {described_graphs(own)}",
        )
        for label, changes, note in options
    ]
    contradiction = any(turns_graphs_off(k, v) for k, v in own.items()) and any(
        sizes_graphs(k, v) for k, v in own.items()
    )
    if not contradiction and all(note != asked for *_option, note in found):
        found.append(("graph-request", {}, {}, asked))
    return found


def default_dimensions(
    gpu_facts: dict,
    *,
    flag_table: dict | None = None,
    draft_model: str = "",
    concurrencies: list[int] | None = None,
    request: dict | None = None,
    pcie_ipc: bool = False,
    prompt_file: bool = False,
) -> list[tuple[str, list[tuple]]]:
    """[(dimension, [(label, changes, env[, note]), ...]), ...]: the default space, one option list per
    dimension (a note says what an option replaces of the request). pcie_ipc: SGLang's PCIe-IPC all-reduce
    can act on this host (module_utils/pcie_ipc.can_act): one more option of the nccl dimension, crossed with
    NCCL as it is only. prompt_file: the workload sends a prompt file's text (NGRAM is tried)."""
    gpus = max(1, int(gpu_facts.get("gpu_count") or 0))
    parallel = [(f"tp{gpus}", {"tp_size": gpus, "ep_size": 1}, {})]
    if gpus >= 2:
        parallel += [
            (
                f"tp{gpus}-ep{gpus}-{backend}",
                {"tp_size": gpus, "ep_size": gpus, "moe_a2a_backend": backend},
                {},
            )
            for backend in offered_backends(flag_table)
        ]
    dimensions = [("parallel", parallel)]
    speculative = speculative_options(flag_table, draft_model, prompt_file=prompt_file)
    if speculative:
        dimensions.append(("speculative", [("nospec", dict.fromkeys(SPECULATIVE_KEYS), {}), *speculative]))
    dimensions.append(("cuda_graph", graph_options(request or {}, flag_table, concurrencies or [])))
    interconnect = gpu_facts.get("interconnect")
    allreduce = []
    if gpus >= 2 and interconnect == "pcie":
        allreduce = [("nccl-default", {}, {}), ("nccl-pcie", {}, dict(PCIE_NCCL))]
    if pcie_ipc and gpus >= 2 and interconnect in ("pcie", "mixed"):
        allreduce = (allreduce or [("nccl-default", {}, {})]) + [
            ("pcie-ipc", {}, dict(PCIE_IPC_ON), "SGLang's PCIe-IPC all-reduce on, NCCL as it is")
        ]
    if allreduce:
        dimensions.append(("nccl", allreduce))
    return dimensions


def _value_label(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    return re.sub(r"[^A-Za-z0-9._+,-]", "", text)[:40] or "none"


def grid_dimensions(grid: dict) -> list[tuple[str, list[tuple[str, dict, dict]]]]:
    """The dimensions of a user's grid: every key a setting (its values tried in turn), `env` a list of
    environment sets. Raises ValueError naming what is malformed."""
    if not isinstance(grid, dict) or not grid:
        raise ValueError(
            "a grid is a mapping of settings to the lists of values to try, e.g. {tp_size: [4, 8]}"
        )
    dimensions = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"grid entry {key!r} must be a non-empty list of values, got {values!r}")
        if key == "env":
            if not all(isinstance(env, dict) for env in values):
                raise ValueError("grid entry 'env' must be a list of mappings of environment variables")
            options = [
                ("env-" + (",".join(f"{k}={v}" for k, v in sorted(env.items())) or "default"), {}, dict(env))
                for env in values
            ]
        else:
            options = [(f"{key}={_value_label(value)}", {key: value}, {}) for value in values]
        dimensions.append((key, options))
    return dimensions


def candidates_of(dimensions: list[tuple[str, list[tuple]]]) -> list[dict]:
    """Every combination of one option per dimension, in order, named by its options' labels; an option's
    note (a fourth item) goes to the candidate's `note`."""
    found = []
    for combination in itertools.product(*(options for _name, options in dimensions)):
        changes: dict = {}
        env: dict = {}
        for _label, option_changes, option_env, *_note in combination:
            changes.update(option_changes)
            env.update(option_env)
        name = "+".join(option[0] for option in combination)
        note = "; ".join(option[3] for option in combination if len(option) > 3 and option[3])
        found.append({"name": name, "changes": changes, "env": env, **({"note": note} if note else {})})
    return found


def listed_candidates(entries: list) -> list[dict]:
    """A user's list of candidates ({name, server, env}). Raises ValueError naming what is malformed."""
    if not isinstance(entries, list) or not entries:
        raise ValueError("a candidate list is a non-empty list of {name, server, env} mappings")
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError(f"candidate {index + 1} needs a name (a string), got {entry!r}")
        unknown = sorted(set(entry) - {"name", "server", "env"})
        if unknown:
            raise ValueError(f"candidate {entry['name']!r} has unknown keys {unknown}: use name, server, env")
        for key in ("server", "env"):
            if not isinstance(entry.get(key, {}), dict):
                raise ValueError(f"candidate {entry['name']!r}: {key} must be a mapping")
        found.append(
            {
                "name": entry["name"],
                "changes": dict(entry.get("server", {})),
                "env": dict(entry.get("env", {})),
            }
        )
    return found


class SpaceTooLarge(ValueError):
    """A space that holds more candidates than its limit: counted before any candidate is built."""


def space_size(dimensions: list[tuple[str, list[tuple]]]) -> int:
    """How many candidates the dimensions make (the product of their sizes), without making one."""
    return math.prod(len(options) for _name, options in dimensions)


def refuse_past_limit(count: int, limit: int | None, how: str) -> None:
    """Raise SpaceTooLarge when count passes limit (None: no limit)."""
    if limit is not None and count > limit:
        raise SpaceTooLarge(
            f"the search space holds {count} candidates, more than max_candidates ({limit}): {how}; "
            "counted before any candidate was built: narrow the grid or raise the limit"
        )


def space_candidates(
    space: dict | None, gpu_facts: dict, *, limit: int | None = None, **defaults
) -> tuple[str, list[dict], list[tuple[str, int]]]:
    """(kind: default|grid|list, candidates, [(dimension, its size), ...]): the space the user gave, else
    the default.
    A space of more than limit candidates is refused (SpaceTooLarge) from its dimensions' sizes, before any
    candidate is built: a grid of 4 settings x 100 values would be 10^8 of them."""
    space = space or {}
    unknown = sorted(set(space) - {"grid", "list"})
    if unknown or len(space) > 1:
        raise ValueError(
            "a search space is either {grid: {setting: [values]}} or {list: [candidates]}, "
            f"got keys {sorted(space)}"
        )
    if "list" in space:
        if isinstance(space["list"], list):
            refuse_past_limit(len(space["list"]), limit, "the length of the list")
        return "list", listed_candidates(space["list"]), []
    dimensions = (
        grid_dimensions(space["grid"]) if "grid" in space else default_dimensions(gpu_facts, **defaults)
    )
    sizes = " x ".join(f"{len(options)} {name}" for name, options in dimensions)
    refuse_past_limit(space_size(dimensions), limit, sizes)
    return (
        ("grid" if "grid" in space else "default"),
        candidates_of(dimensions),
        [(name, len(options)) for name, options in dimensions],
    )


def check_names(candidates: list[dict]) -> list[str]:
    """Problems with the candidates' names: each names a result file and a report row, so unique and plain."""
    problems = []
    seen = set()
    for candidate in candidates:
        name = candidate["name"]
        if not _NAME.match(name) or len(name) > 120:
            problems.append(f"candidate name {name!r} must be letters, digits and ._+=,- (at most 120)")
        if name in seen:
            problems.append(f"candidate name {name!r} is used twice")
        seen.add(name)
    return problems


def ep_first(estimate: list[dict]) -> tuple[bool | None, str]:
    """Whether the collective probe found expert parallelism cheaper per decode step (None: no estimate),
    with the reason: the majority verdict of its estimate rows (CUDA-graph rows when it measured them)."""
    rows = [row for row in estimate or [] if isinstance(row, dict) and row.get("cheaper") in ("tp", "ep")]
    if not rows:
        return None, "no collective-probe estimate for this host: candidates in the space's order"
    if any(row.get("mode") == "graph" for row in rows):
        rows = [row for row in rows if row.get("mode") == "graph"]
    ep = sum(1 for row in rows if row["cheaper"] == "ep")
    verdict = ep * 2 > len(rows)
    winner, share = ("EP", ep) if verdict else ("TP", len(rows) - ep)
    return verdict, (
        f"the collective probe found {winner} cheaper per decode step in {share} of {len(rows)} estimates: "
        f"{'expert' if verdict else 'tensor'}-parallel candidates first"
    )


# Decode's allreduce messages: [tokens x hidden] bf16, up to 512 tokens of a 7168-wide model, about 7 MiB.
DECODE_MAX_BYTES = 8 * 1024 * 1024


def allreduce_key(env: dict | None) -> tuple:
    """What of an environment decides how an all-reduce goes: its NCCL_* variables and SGLang's PCIe-IPC
    all-reduce when switched on (sorted items), so a probe variant and a candidate with the same compare."""
    key = {k: str(v) for k, v in (env or {}).items() if k.startswith("NCCL_")}
    if switched_on(env):
        key[VARIABLE] = "1"
    return tuple(sorted(key.items()))


def nccl_costs(curve: list[dict]) -> tuple[dict[tuple, float], str]:
    """{all-reduce environment (allreduce_key): summed allreduce median us over the curve's decode sizes} per
    probe variant (the lower where two variants share a key), with the reason; {} without a curve."""
    by_variant: dict[str, float] = {}
    keys: dict[str, tuple] = {}
    for point in curve or []:
        if point.get("op") != "allreduce" or int(point.get("size") or 0) > DECODE_MAX_BYTES:
            continue
        name = str(point.get("variant", "?"))
        keys[name] = allreduce_key(point.get("env"))
        by_variant[name] = by_variant.get(name, 0.0) + float(point.get("median_us") or 0.0)
    totals: dict[tuple, float] = {}
    names: dict[tuple, str] = {}
    for name, total in sorted(by_variant.items()):
        if keys[name] not in totals or total < totals[keys[name]]:
            totals[keys[name]], names[keys[name]] = total, name
    if not totals:
        return {}, "no latency curve for this host: NCCL settings in the space's order"
    best = min(totals, key=totals.get)
    return totals, (
        f"the latency curve (allreduce up to {DECODE_MAX_BYTES // 1048576} MiB) was lowest with variant "
        f"{names[best]}: its all-reduce settings first"
    )


def earlier_ranks(text) -> tuple[dict[str, int], str]:
    """({name: place}, why) from this host's last tuning fact (its JSON text): the winner 0, then the rest of
    its valid candidates best first. Nothing (and why) when there is no fact or it holds no decision."""
    if not text:
        return {}, "no earlier tuning decision on this host"
    try:
        fact = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}, "this host's earlier tuning fact is not JSON: ignored for the order"
    if not isinstance(fact, dict):
        return {}, "this host's earlier tuning fact holds no decision: ignored for the order"
    ranking = fact.get("ranking") if isinstance(fact.get("ranking"), dict) else {}
    names = [fact.get("winner"), *(ranking.get("valid") or [])]
    names = list(dict.fromkeys(n for n in names if isinstance(n, str) and n))
    if not names:
        return {}, "this host's earlier tuning run found no valid candidate"
    return {name: place for place, name in enumerate(names)}, (
        f"this host's earlier tuning decision: its winner {names[0]} and the {len(names) - 1} other(s) it "
        f"found valid first, best first"
    )


def ordered(
    candidates: list[dict],
    ep_is_cheaper: bool | None,
    nccl: dict[tuple, float] | None = None,
    earlier: dict[str, int] | None = None,
) -> list[dict]:
    """The candidates an earlier decision on this host found valid first (its winner first, then best
    first), then the parallelism the probe found cheaper, then (within it) the NCCL settings whose measured
    curve is lowest; a stable sort, so else as given. A candidate whose NCCL settings the probe did not
    measure comes after the measured ones."""

    def uses_ep(candidate: dict) -> bool:
        return int(candidate["settings"].get("ep_size") or 1) > 1

    def nccl_cost(candidate: dict) -> float:
        return (nccl or {}).get(allreduce_key(candidate["settings"].get("env")), float("inf"))

    def rank(candidate: dict) -> tuple:
        parallelism = 0 if ep_is_cheaper is None else int(uses_ep(candidate) != ep_is_cheaper)
        place = (earlier or {}).get(candidate["name"], len(earlier or {}))
        return (place, parallelism, nccl_cost(candidate) if nccl else 0.0)

    return sorted(candidates, key=rank)
