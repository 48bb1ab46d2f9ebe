"""The SGLang server flag model: epforge's server settings (a plain dict, `epforge_server` in the inventory)
rendered as the argv of `python -m sglang.launch_server`.

Pure functions, no SGLang import. SETTINGS_SCHEMA is the one list of the settings epforge knows (kind,
range, fixed choices); validate_settings checks them against it before anything changes (role preflight,
module epforge_server_settings) and again before a launch, and renders them to flags. The installed SGLang's
own parser stays the final judge (library/sglang_flags_check.py), because choices move between releases.

Flag names that moved between SGLang releases are chosen by the SGLang version (`sglang_version`), read from
the wheels of each release (see FLAG_RENAMES).

Every other flag of a release is known by name through that release's flag table
(data/sglang_flags/<version>.json, written by scripts/sglang_flag_data.py from the release's own parser): a
setting named like a flag's argparse dest (chunked_prefill_size, attention_backend, ...) is checked against
the flag's kind and choices and rendered after the schema's flags, in name order. Without a table only the
schema's keys are known. A flag the release lacks is named with what became of it where the releases' data
says (data/sglang_flag_successors.json, plugins/module_utils/flag_successors.py), and the request's SGLANG_/
SGL_ variables are checked against the release's own (data/sglang_env/<version>.json,
plugins/module_utils/sglang_env.py).
"""

from __future__ import annotations

import difflib
import json
import re

from ansible_collections.epforge.ep.plugins.module_utils.argv_flags import dest_flag, flag_names, flag_pairs
from ansible_collections.epforge.ep.plugins.module_utils.flag_successors import retired_flag
from ansible_collections.epforge.ep.plugins.module_utils.secret_scrub import is_secret_name
from ansible_collections.epforge.ep.plugins.module_utils.server_address import DEFAULT_HOST, DEFAULT_PORT
from ansible_collections.epforge.ep.plugins.module_utils.sglang_env import env_problems, render_value
from ansible_collections.epforge.ep.plugins.module_utils.suggest import closest
from ansible_collections.epforge.ep.plugins.module_utils.version import version_tuple

# The schema of the settings: the one list of keys epforge knows, each with its value kind and, where
# SGLang's own parser or launch code would refuse or misuse a value, its range or choices.
# Kinds: "str" (a string), "int" (an integer; an integer written as a string, e.g. "8" from --extra-vars,
# is accepted), "bool" (a flag present when true), "list" (of strings), "dict" (of environment variables).
# min/max: inclusive bounds of an int; choices: the values every supported SGLang release accepts (only
# where they have not moved between releases: moe_a2a_backend's choices did, so SGLang's parser judges it).
SETTINGS_SCHEMA: dict[str, dict] = {
    "model_path": {"kind": "str", "help": "a local folder or a Hugging Face repo ID"},
    "served_model_name": {"kind": "str"},
    "tp_size": {"kind": "int", "min": 1, "help": "the number of GPUs of the tensor-parallel group"},
    "ep_size": {"kind": "int", "min": 1, "help": "expert-parallel size, dividing tp_size"},
    "dp_size": {"kind": "int", "min": 1, "help": "data-parallel size"},
    "moe_a2a_backend": {"kind": "str", "help": "e.g. none or deepep (the installed SGLang lists the rest)"},
    "deepep_mode": {"kind": "str", "choices": ("auto", "normal", "low_latency")},
    "enable_dp_attention": {"kind": "bool"},
    "speculative_algorithm": {"kind": "str", "help": "e.g. EAGLE3"},
    "speculative_draft_model_path": {"kind": "str"},
    "speculative_num_steps": {"kind": "int", "min": 1},
    "speculative_eagle_topk": {"kind": "int", "min": 1},
    "speculative_num_draft_tokens": {"kind": "int", "min": 1},
    "cuda_graph_max_bs": {"kind": "int", "min": 1},
    "disable_cuda_graph": {"kind": "bool"},
    "disable_custom_all_reduce": {"kind": "bool"},
    "enable_torch_symm_mem": {"kind": "bool"},
    "enable_flashinfer_allreduce_fusion": {"kind": "bool"},
    "host": {"kind": "str"},
    "port": {"kind": "int", "min": 1, "max": 65535},
    "api_key": {"kind": "str"},
    "extra_args": {"kind": "list"},
    "env": {"kind": "dict"},
    "nnodes": {"kind": "int", "min": 1, "help": "the number of hosts of one server"},
    "node_rank": {"kind": "int", "min": 0, "help": "this host's index, 0..nnodes-1"},
    "dist_init_addr": {"kind": "str", "help": "HOST:PORT of node 0"},
}

# The value kind of each setting (derived from the schema; kept as its own name for the callers).
SETTINGS_KINDS: dict[str, str] = {key: spec["kind"] for key, spec in SETTINGS_SCHEMA.items()}

# Settings that are secrets: never rendered unless asked for, never logged.

# Settings that are not flags of launch_server.
NON_FLAG_KEYS = frozenset({"extra_args", "env"})

# Flags of a release's table that are never settings: help, and the keys (secrets go through the launcher).
_NEVER_SETTINGS = frozenset({"help", "api_key", "admin_api_key"})

# Order of the rendered flags (stable, so a rendered argv can be compared and stamped).
FLAG_ORDER: tuple[str, ...] = (
    "model_path",
    "served_model_name",
    "host",
    "port",
    "tp_size",
    "ep_size",
    "dp_size",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "moe_a2a_backend",
    "deepep_mode",
    "enable_dp_attention",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "disable_custom_all_reduce",
    "enable_torch_symm_mem",
    "enable_flashinfer_allreduce_fusion",
    "api_key",
)

# Flag names that changed between SGLang releases: (first release with the new name, new name).
# Read from the wheels: --cuda-graph-max-bs exists up to 0.5.19 (a deprecated alias of
# --cuda-graph-max-bs-decode since at least 0.5.16) and is gone in 0.5.20+, where argparse calls the old
# spelling ambiguous (--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill).
FLAG_RENAMES: dict[str, tuple[str, str]] = {
    "cuda_graph_max_bs": ("0.5.20", "--cuda-graph-max-bs-decode"),
}

# Flags of a release's table whose dest SGLang renamed (older dest, newer dest), read from the releases' own
# parsers (scripts/sglang_flag_data.py reports them): 0.5.16 made the older spelling an alias of the newer
# flag, 0.5.20+ dropped it. Either name is a stable key: it reaches the flag of whichever release is
# installed.
# Only renames of the same value are here (not e.g. --enable-breakable-cuda-graph, which became a choice of
# --cuda-graph-backend-prefill).
RENAMED_DESTS: tuple[tuple[str, str], ...] = (
    ("cuda_graph_bs", "cuda_graph_bs_decode"),
    ("piecewise_cuda_graph_tokens", "cuda_graph_bs_prefill"),
    ("piecewise_cuda_graph_max_tokens", "cuda_graph_max_bs_prefill"),
    ("nsa_decode_backend", "dsa_decode_backend"),
    ("nsa_prefill_backend", "dsa_prefill_backend"),
    ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"),
)

# CUDA graphs of the decode phase, by the dests of the releases' flag tables (data/sglang_flags/): what turns
# them off (disable_cuda_graph in every release; from 0.5.16 also disable_decode_cuda_graph and
# cuda_graph_backend_decode "disabled") and what sizes them (epforge's cuda_graph_max_bs, and cuda_graph_bs;
# from 0.5.16 also cuda_graph_max_bs_decode and cuda_graph_bs_decode). SGLang accepts both together and
# captures no graph, so the sizes do nothing (issue 34: `--cuda-graph-max-bs 16 --disable-cuda-graph` on an
# H200 with SGLang 0.5.16). validate_settings refuses the pair; the tuner's space sets all of them.
GRAPH_OFF_KEYS: tuple[str, ...] = (
    "disable_cuda_graph",
    "disable_decode_cuda_graph",
    "cuda_graph_backend_decode",
)
GRAPH_SIZE_KEYS: tuple[str, ...] = (
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "cuda_graph_bs",
    "cuda_graph_bs_decode",
)
GRAPH_KEYS: tuple[str, ...] = GRAPH_OFF_KEYS + GRAPH_SIZE_KEYS
GRAPH_BACKEND_OFF = "disabled"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A control character (a newline above all) in a value would end a line of the unit or of its environment
# file and start another: a variable or a directive of the writer's choosing.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def flag_name(key: str, sglang_version: str | None = None) -> str:
    """The launch_server flag for a setting, for the given SGLang version (None: the newest naming known)."""
    default = dest_flag(key)
    rename = FLAG_RENAMES.get(key)
    if rename is None:
        return default
    since, new_name = rename
    if sglang_version is None or version_tuple(sglang_version) >= version_tuple(since):
        return new_name
    return default


def with_defaults(settings: dict | None) -> dict:
    """The settings with host and port filled in (the server's address must always be known)."""
    merged = dict(settings or {})
    if merged.get("host") in (None, ""):
        merged["host"] = DEFAULT_HOST
    if merged.get("port") in (None, ""):
        merged["port"] = DEFAULT_PORT
    return merged


def as_int(value) -> int | None:
    """value as an integer when it is one (8, "8", " 8 "); None otherwise (True, 8.5, "8x")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^\s*[+-]?\d+\s*$", value):
        return int(value)
    return None


def accepted(key: str) -> str:
    """What a setting accepts, in words (for messages): 'an integer from 1 to 65535', 'true or false'."""
    spec = SETTINGS_SCHEMA[key]
    kind = spec["kind"]
    if kind == "int":
        low, high = spec.get("min"), spec.get("max")
        text = (
            "an integer"
            if low is None
            else f"an integer from {low} to {high}"
            if high is not None
            else f"an integer >= {low}"
        )
    elif kind == "bool":
        text = "true or false"
    elif kind == "list":
        text = "a list of strings, one argv item each (e.g. ['--mem-fraction-static', '0.8'])"
    elif kind == "dict":
        text = "a mapping of environment variable names to strings or numbers"
    elif spec.get("choices"):
        text = "one of " + ", ".join(spec["choices"])
    else:
        text = "a string"
    return text + (f" ({spec['help']})" if spec.get("help") else "")


def _show(value) -> str:
    return f"{type(value).__name__} {value!r}"[:100]


def _str_problem(key: str, value) -> str | None:
    if not isinstance(value, str):
        return f"{key} must be a string, got {_show(value)}; accepted: {accepted(key)}"
    choices = SETTINGS_SCHEMA[key].get("choices")
    if choices and value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"{key} must be one of {', '.join(choices)}, got {value!r}{hint}"
    return None


def _int_problem(key: str, value) -> str | None:
    number = as_int(value)
    if number is None:
        # bool is an int in Python, but True would render as "True": refuse it.
        return (
            f"{key} must be an integer, got {_show(value)} (write it as a number, e.g. 8); "
            f"accepted: {accepted(key)}"
        )
    spec = SETTINGS_SCHEMA[key]
    low, high = spec.get("min"), spec.get("max")
    if (low is not None and number < low) or (high is not None and number > high):
        return f"{key} is out of range, got {value!r}; accepted: {accepted(key)}"
    return None


def _bool_problem(key: str, value) -> str | None:
    if isinstance(value, bool):
        return None
    return f"{key} must be a boolean (true/false), got {_show(value)}"


def _list_problem(key: str, value) -> str | None:
    if not isinstance(value, list):
        return f"{key} must be a list of strings, got {_show(value)}; accepted: {accepted(key)}"
    bad = [item for item in value if not isinstance(item, str) or isinstance(item, bool)]
    if bad:
        return f"{key} must hold only strings (quote numbers, e.g. '0.8'), got {bad[0]!r}"
    return None


def _dict_problem(key: str, value) -> str | None:
    if not isinstance(value, dict):
        return f"{key} must be a mapping of environment variable names to values, got {_show(value)}"
    for name, item in value.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            return f"{key}: {name!r} is not a valid environment variable name"
        if isinstance(item, (dict, list)) or item is None:
            return f"{key}.{name} must be a string or number, got {type(item).__name__}"
    return None


# kind (SETTINGS_SCHEMA) -> the check of a set value.
_KIND_CHECKS = {
    "str": _str_problem,
    "int": _int_problem,
    "bool": _bool_problem,
    "list": _list_problem,
    "dict": _dict_problem,
}


def _kind_problem(key: str, kind: str, value) -> str | None:
    """A sentence when value does not fit its kind, range or choices, else None. None means 'not set'."""
    if value is None:
        return None
    if kind not in _KIND_CHECKS:
        raise ValueError(f"unknown kind {kind}")
    return _KIND_CHECKS[kind](key, value)


def _divisors(number: int) -> str:
    return ", ".join(str(d) for d in range(1, number + 1) if number % d == 0)


def _relation_problems(settings: dict) -> list[str]:
    """Problems between settings that SGLang's launch would trip over (each value alone is fine)."""
    problems: list[str] = []
    tp = as_int(settings.get("tp_size"))
    tp = 1 if settings.get("tp_size") is None else tp
    ep = as_int(settings.get("ep_size"))
    dp = as_int(settings.get("dp_size"))
    nnodes = as_int(settings.get("nnodes"))
    node_rank = as_int(settings.get("node_rank"))
    if tp is None or tp < 1:
        return problems  # tp_size itself is refused; relations to it would only repeat that
    # SGLang places expert-parallel ranks inside the tensor-parallel group
    # (moe_ep_rank = tp_rank // (tp_size // ep_size), sglang srt/entrypoints/engine.py).
    if ep is not None and ep >= 1 and (ep > tp or tp % ep):
        problems.append(
            f"ep_size {ep} does not divide tp_size {tp}: SGLang splits the tensor-parallel group "
            f"into expert-parallel groups; accepted: one of {_divisors(tp)} (deepep wants "
            f"ep_size equal to tp_size)"
        )
    # DP attention shards the attention of the tensor-parallel group (tp_size % dp_size == 0 in SGLang).
    if settings.get("enable_dp_attention") is True and dp is not None and dp >= 1 and tp % dp:
        problems.append(
            f"dp_size {dp} does not divide tp_size {tp} with enable_dp_attention: accepted: one "
            f"of {_divisors(tp)}"
        )
    if nnodes is not None and nnodes >= 1:
        pipeline = bool(
            {"--pp-size", "--pipeline-parallel-size"} & set(flag_names(settings.get("extra_args")))
        )
        if not pipeline and settings.get("tp_size") is not None and tp % nnodes:
            problems.append(
                f"tp_size {tp} cannot be spread evenly over nnodes {nnodes}: SGLang needs "
                f"tp_size to be a multiple of nnodes; accepted: nnodes one of {_divisors(tp)}"
            )
        if nnodes > 1:
            if not settings.get("dist_init_addr"):
                problems.append(
                    f"nnodes is {nnodes} but dist_init_addr is not set: every node needs the "
                    "first node's HOST:PORT (preflight derives it from epforge_node_group)"
                )
            if settings.get("node_rank") is None:
                problems.append(
                    f"nnodes is {nnodes} but node_rank is not set; accepted: an integer from 0 "
                    f"to {nnodes - 1}"
                )
        if node_rank is not None and node_rank >= 0 and node_rank >= nnodes:
            problems.append(
                f"node_rank {node_rank} is outside 0..{nnodes - 1} (nnodes {nnodes}); accepted: "
                f"an integer from 0 to {nnodes - 1}"
            )
    return problems


def turns_graphs_off(key: str, value) -> bool:
    """Whether this setting turns the decode phase's CUDA graphs off (GRAPH_OFF_KEYS)."""
    if key == "cuda_graph_backend_decode":
        return value == GRAPH_BACKEND_OFF
    return key in GRAPH_OFF_KEYS and value is True


def sizes_graphs(key: str, value) -> bool:
    """Whether this setting sets the batch sizes the decode phase's CUDA graphs are captured for."""
    return key in GRAPH_SIZE_KEYS and value is not None and value != []


def _flag_of(key: str, flags: dict, version: str) -> str:
    """The flag a setting renders for this release (its table's flag, or epforge's name for it)."""
    if key in SETTINGS_SCHEMA:
        return flag_name(key, version or None)
    return (table_spec(key, flags) or {}).get("flag") or dest_flag(key)


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _extra_graph_settings(extra: list, flags: dict) -> list[tuple[str, object, str, str]]:
    """The decode CUDA-graph settings extra_args holds, found by the dest of each flag (its name, an alias or
    the renamed spelling; a flag turning graphs off counts as true): (key, value, described, to remove)."""
    by_flag: dict[str, str] = {}
    for key in GRAPH_KEYS:
        spec = table_spec(key, flags) or {}
        names = [spec.get("flag"), *(spec.get("aliases") or []), dest_flag(key)]
        names += [flag_name(key)] if key in SETTINGS_SCHEMA else []
        for name in names:
            if name:
                by_flag.setdefault(name, key)
    found = []
    for name, given in flag_pairs(item for item in extra if isinstance(item, str)):
        key = by_flag.get(name)
        if key is None:
            continue
        if key in ("disable_cuda_graph", "disable_decode_cuda_graph"):
            value = True
        else:
            value = None if given is True else given  # a valued flag given no value: None
        shown = f"{name} {value}" if key == "cuda_graph_backend_decode" else name
        found.append((key, value, f"extra_args' {shown}", f"{name} from extra_args"))
    return found


def _graph_problems(settings: dict, flags: dict, version: str) -> list[str]:
    """CUDA graphs turned off together with a graph batch size (GRAPH_KEYS): SGLang accepts both and runs
    without graphs, so the size would be ignored without a word."""
    given = [
        (key, value, f"{key}: {_shown(value)} ({_flag_of(key, flags, version)})", key)
        for key, value in ((key, settings.get(key)) for key in GRAPH_KEYS)
    ]
    extra = settings.get("extra_args")
    given += _extra_graph_settings(extra, flags) if isinstance(extra, list) else []
    off = [(described, remove) for key, value, described, remove in given if turns_graphs_off(key, value)]
    sizes = [(described, remove) for key, value, described, remove in given if sizes_graphs(key, value)]
    if not off or not sizes:
        return []
    return [
        f"{' and '.join(d for d, _r in off)} turns CUDA graphs off, but {' and '.join(d for d, _r in sizes)} "
        "sets the batch sizes they are captured for: SGLang accepts both and runs without CUDA graphs, so "
        f"the batch size does nothing. Keep one: remove {' and '.join(r for _d, r in sizes)} to run without "
        f"CUDA graphs, or remove {' and '.join(r for _d, r in off)} to capture graphs for those batch sizes"
    ]


def renamed_partner(key: str) -> str | None:
    """The other name of a renamed flag's dest (RENAMED_DESTS), else None."""
    for old, new in RENAMED_DESTS:
        if key in (old, new):
            return new if key == old else old
    return None


def table_spec(key: str, flags: dict) -> dict | None:
    """The table entry a setting names: its own dest, or (a stable key) the renamed dest of this release."""
    if key in _NEVER_SETTINGS:
        return None
    partner = renamed_partner(key)
    return flags.get(key) or (flags.get(partner) if partner else None)


def load_flag_table(path: str, what: str = "flag table") -> dict:
    """A release's flag table read from its file ({} when the release has none: only epforge's own keys are
    known); the same for its other tables (what: env table, flag successors). Raises ValueError naming the
    file when it is not a JSON object."""
    try:
        with open(path, encoding="utf-8") as handle:
            table = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"the {what} {path} cannot be read: {exc}") from exc
    if not isinstance(table, dict):
        raise ValueError(f"the {what} {path} is not a JSON object")
    return table


def table_flags(flag_table: dict | None) -> dict:
    """The flags of a release's flag table by dest ({} without a table)."""
    flags = (flag_table or {}).get("flags")
    return flags if isinstance(flags, dict) else {}


def _table_kind_problem(key: str, flag: str, kind: str, value) -> str | None:
    """A sentence when value is not of the flag's kind (bool, int, float, list, or a single value)."""
    checks = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: as_int(v) is not None,
        "float": lambda v: as_float(v) is not None,
        "list": lambda v: (
            isinstance(v, list) and not any(isinstance(i, (bool, dict, list)) or i is None for i in v)
        ),
    }
    words = {"bool": "true or false", "int": "an integer", "float": "a number", "list": "a list of values"}
    ok = checks.get(kind, lambda v: not isinstance(v, (dict, list, bool)))(value)
    return None if ok else f"{key} ({flag}) must be {words.get(kind, 'a single value')}, got {_show(value)}"


def _table_problem(key: str, spec: dict, value) -> str | None:
    """A sentence when value does not fit the flag's kind or choices (from the release's own parser)."""
    if value is None:
        return None
    kind = spec.get("kind")
    flag = spec.get("flag") or dest_flag(key)
    problem = _table_kind_problem(key, flag, kind, value)
    choices = [str(c) for c in spec.get("choices") or []]
    if problem or not choices or kind == "bool":
        return problem
    for item in value if kind == "list" else [value]:
        if str(item) not in choices:
            close = difflib.get_close_matches(str(item), choices, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            return f"{key} ({flag}) must be one of {', '.join(choices)}, got {item!r}{hint}"
    return None


def as_float(value) -> float | None:
    """value as a number when it is one (0.8, "0.8", 8); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _unknown_key_problem(key, value, known: list[str], version: str, retired: str | None = None) -> str:
    if retired:
        # The releases' data says what became of it: that, not a look-alike name.
        return f"unknown server setting '{key}' (value {value!r}): {retired}"
    close = closest(str(key), known)
    hint = f" (did you mean '{close}'?)" if close else ""
    where = f"SGLang {version}'s flags" if version else "the known settings"
    return (
        f"unknown server setting '{key}'{hint} (value {value!r}): not among {where}; "
        "epforge's own settings: " + ", ".join(sorted(SETTINGS_SCHEMA)) + "; any other SGLang flag by its "
        "name with underscores (e.g. chunked_prefill_size), or through extra_args"
    )


def _control_problems(settings: dict) -> list[str]:
    """Values (strings, env values, extra_args items) that hold a control character, by where they are."""
    places: list[tuple[str, object]] = []
    for key, value in settings.items():
        if key == "env" and isinstance(value, dict):
            places += [(f"env.{name}", item) for name, item in value.items()]
        elif isinstance(value, list):
            places += [(f"{key}[{index}]", item) for index, item in enumerate(value)]
        else:
            places.append((str(key), value))
    return [
        f"{where} holds a control character (e.g. a newline): {value!r}"
        for where, value in places
        if isinstance(value, str) and _CONTROL.search(value)
    ]


def _key_problems(settings: dict, flags: dict, version: str, successors: dict | None = None) -> list[str]:
    """Keys that are neither epforge's settings nor flags of the release's table (what became of a retired
    one, from successors), table values of the wrong kind, and a table key that names the flag a schema
    setting already renders."""
    problems: list[str] = []
    for key, value in settings.items():
        if key in SETTINGS_SCHEMA:
            continue
        spec = table_spec(key, flags)
        if spec is not None:
            problem = _table_problem(str(key), spec, value)
            if problem:
                problems.append(problem)
            continue
        known = sorted(set(SETTINGS_SCHEMA) | (set(flags) - _NEVER_SETTINGS))
        retired = retired_flag(str(key), flags, version, successors) if flags else None
        problems.append(_unknown_key_problem(key, value, known, version, retired))
    # A flag named twice: a table key whose flag is the one a schema setting renders (a renamed flag).
    rendered = {flag_name(k, version or None): k for k in SETTINGS_SCHEMA if settings.get(k) is not None}
    for key in settings:
        flag = (table_spec(key, flags) or {}).get("flag") if key not in SETTINGS_SCHEMA else None
        twin = rendered.get(flag) if flag else None
        if twin is None and flag and settings.get(renamed_partner(key) or "") is not None:
            twin = renamed_partner(key)
        if twin and (twin in SETTINGS_SCHEMA or key < twin):
            problems.append(f"{key} and {twin} both set {flag}: keep one ({twin})")
    return problems


def validate_settings(
    settings,
    *,
    require_model: bool = True,
    flag_table: dict | None = None,
    env_table: dict | None = None,
    flag_successors: dict | None = None,
) -> list[str]:
    """Shape and range errors in server settings that can be named before SGLang sees them (empty: none).

    Refuses a non-mapping, unknown keys (with the closest known key, or what became of a retired flag:
    flag_successors), values of the wrong type, out of range or outside fixed choices, and settings that
    contradict each other (ep_size vs tp_size, node_rank vs nnodes, CUDA graphs turned off with a graph
    batch size). With the release's env_table, an SGLANG_/SGL_ variable of env that the release reads
    nowhere, or whose value does not parse as its type (sglang_env.env_problems). Each message names the
    setting, the value and what would be accepted. Choices that move between releases (moe_a2a_backend)
    are left to the installed SGLang's parser (sglang_flags_check).
    """
    if not isinstance(settings, dict):
        return [
            "server settings (epforge_server) must be a mapping of setting names to values, e.g. "
            f"{{model_path: /models/m, tp_size: 8}}, got {_show(settings)}; known settings: "
            + ", ".join(sorted(SETTINGS_SCHEMA))
        ]
    flags = table_flags(flag_table)
    problems = _key_problems(settings, flags, (flag_table or {}).get("sglang_version", ""), flag_successors)
    problems += _control_problems(settings)
    for key, spec in SETTINGS_SCHEMA.items():
        problem = _kind_problem(key, spec["kind"], settings.get(key))
        if problem:
            problems.append(problem)
    if require_model and not settings.get("model_path"):
        problems.append("model_path is required (a local folder or a Hugging Face repo ID)")
    for key in ("model_path", "host"):
        value = settings.get(key)
        if isinstance(value, str) and value != value.strip():
            problems.append(f"{key} has leading or trailing whitespace: {value!r}")
    if _dict_problem("env", settings.get("env") or {}) is None:
        problems.extend(env_problems(settings.get("env"), env_table))
    problems.extend(_relation_problems(settings))
    problems.extend(_graph_problems(settings, flags, (flag_table or {}).get("sglang_version", "")))
    dist = settings.get("dist_init_addr")
    if isinstance(dist, str) and dist and not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[^:\s]+):\d+$", dist):
        problems.append(f"dist_init_addr must be HOST:PORT (e.g. 10.0.0.1:25000), got {dist!r}")

    extra = settings.get("extra_args")
    if isinstance(extra, list):
        owned = {flag_name(key) for key in FLAG_ORDER} | {dest_flag(k) for k in FLAG_ORDER}
        owned |= {(table_spec(key, flags) or {}).get("flag") for key in settings} - {None}
        for name in flag_names(item for item in extra if isinstance(item, str)):
            if name in owned:
                problems.append(
                    f"extra_args repeats {name}, which a setting of its own controls: "
                    "set that setting instead"
                )
        problems.extend(_unknown_extra_flags(extra, flag_table, flag_successors))
    return problems


def _unknown_extra_flags(extra: list, flag_table: dict | None, successors: dict | None = None) -> list[str]:
    """extra_args flags the release's flag table does not know (the table is SGLang's own parser's flags,
    so these are refused in preflight, before any fact is written; without a table the parser judges them
    after the install), each with what became of it where the releases' data says (successors)."""
    flags = table_flags(flag_table)
    if not flags:
        return []
    known = set()
    for spec in flags.values():
        known.add(spec.get("flag"))
        known.update(spec.get("aliases") or [])
        if spec.get("action") == "BooleanOptionalAction" and spec.get("flag"):
            known.add("--no-" + spec["flag"][2:])
    version = (flag_table or {}).get("sglang_version", "this release")
    problems = []
    for name in flag_names(item for item in extra if isinstance(item, str)):
        if name not in known:
            retired = retired_flag(name, flags, version, successors, as_setting=False)
            if retired:
                problems.append(f"extra_args names {name}, which SGLang {version} does not know: {retired}")
                continue
            close = closest(name, known)
            hint = f" (did you mean {close}?)" if close else ""
            problems.append(f"extra_args names {name}, which SGLang {version} does not know{hint}")
    return problems


def _render_value(value) -> str:
    return value if isinstance(value, str) else str(value)


def _render_table_flag(spec: dict, value) -> list[str]:
    """The argv items of one flag of a release's table (a bool renders its flag when it differs from the
    parser's default action: store_true when true, store_false when false)."""
    flag = spec["flag"]
    if spec.get("kind") == "bool":
        wanted = spec.get("action") != "store_false"
        if spec.get("action") == "BooleanOptionalAction":
            return [flag] if value else ["--no-" + flag[2:]]
        return [flag] if bool(value) == wanted else []
    if spec.get("kind") == "list":
        return [flag, *(_render_value(item) for item in value)]
    return [flag, _render_value(value)]


def build_server_argv(
    settings: dict,
    include_secrets: bool = False,
    *,
    sglang_version: str | None = None,
    flag_table: dict | None = None,
) -> list[str]:
    """The flags of `python -m sglang.launch_server` for these settings (not the python/-m prefix).

    Unset (None) settings and false booleans are left out; host and port are always rendered.
    api_key is left out unless include_secrets (so the argv can be logged and stamped).
    sglang_version picks flag names that moved between releases (None: the newest naming known).
    Settings named by the release's flag table (flag_table) follow the schema's flags, in name order,
    then extra_args. Raises ValueError naming every problem of validate_settings (without requiring a model).
    """
    problems = validate_settings(settings, require_model=False, flag_table=flag_table)
    if problems:
        raise ValueError("invalid server settings: " + "; ".join(problems))
    merged = with_defaults(settings)
    argv: list[str] = []
    for key in FLAG_ORDER:
        if is_secret_name(key) and not include_secrets:
            continue
        value = merged.get(key)
        if value is None:
            continue
        flag = flag_name(key, sglang_version)
        if SETTINGS_KINDS[key] == "bool":
            if value:
                argv.append(flag)
            continue
        if isinstance(value, str) and value == "":
            continue
        argv.extend([flag, _render_value(value)])
    flags = table_flags(flag_table)
    for key in sorted(k for k in merged if k not in SETTINGS_SCHEMA and merged[k] is not None):
        argv.extend(_render_table_flag(table_spec(key, flags), merged[key]))
    argv.extend(merged.get("extra_args") or [])
    return argv


def build_server_env(settings: dict) -> dict[str, str]:
    """The environment of a launch: the variables the settings ask for (e.g. NCCL_P2P_LEVEL), as strings,
    and HF_HUB_OFFLINE=1 always - SGLang loads what role model verified and never downloads at launch."""
    env = (settings or {}).get("env") or {}
    return {**{str(name): render_value(value) for name, value in env.items()}, "HF_HUB_OFFLINE": "1"}
