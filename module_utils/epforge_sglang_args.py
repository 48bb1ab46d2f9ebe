"""The SGLang server flag model: epforge's server settings (a plain dict, `epforge_server` in the inventory)
rendered as the argv of `python -m sglang.launch_server`.

Pure functions, no SGLang import: the settings are checked here for shape (unknown keys, wrong types) and
rendered to flags; whether a value is acceptable (a choice, an integer written as a string) is judged by the
installed SGLang's own parser (library/sglang_flags_check.py), because choices move between releases.

Flag names that moved between SGLang releases are chosen by the SGLang version (`sglang_version`), read from
the wheels of each release (see FLAG_RENAMES).
"""

from __future__ import annotations

import difflib
import re

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000

# Value kinds: "str" (a string), "int" (an integer; a string is passed through so that SGLang's own parser
# judges it, e.g. "8" from --extra-vars), "bool" (a flag present when true), "list" (of strings),
# "dict" (of environment variables).
SETTINGS_KINDS: dict[str, str] = {
    "model_path": "str",
    "served_model_name": "str",
    "tp_size": "int",
    "ep_size": "int",
    "moe_a2a_backend": "str",
    "deepep_mode": "str",
    "enable_dp_attention": "bool",
    "speculative_algorithm": "str",
    "speculative_draft_model_path": "str",
    "speculative_num_steps": "int",
    "speculative_eagle_topk": "int",
    "speculative_num_draft_tokens": "int",
    "cuda_graph_max_bs": "int",
    "disable_cuda_graph": "bool",
    "disable_custom_all_reduce": "bool",
    "enable_torch_symm_mem": "bool",
    "host": "str",
    "port": "int",
    "api_key": "str",
    "extra_args": "list",
    "env": "dict",
    "nnodes": "int",
    "node_rank": "int",
    "dist_init_addr": "str",
}

# Settings that are secrets: never rendered unless asked for, never logged.
SECRET_KEYS = frozenset({"api_key"})

# Settings that are not flags of launch_server.
NON_FLAG_KEYS = frozenset({"extra_args", "env"})

# Order of the rendered flags (stable, so a rendered argv can be compared and stamped).
FLAG_ORDER: tuple[str, ...] = (
    "model_path",
    "served_model_name",
    "host",
    "port",
    "tp_size",
    "ep_size",
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
    "api_key",
)

# Flag names that changed between SGLang releases: (first release with the new name, new name).
# Read from the wheels: --cuda-graph-max-bs exists up to 0.5.19 (a deprecated alias of
# --cuda-graph-max-bs-decode since at least 0.5.16) and is gone in 0.5.20+, where argparse calls the old
# spelling ambiguous (--cuda-graph-max-bs-decode / --cuda-graph-max-bs-prefill).
FLAG_RENAMES: dict[str, tuple[str, str]] = {
    "cuda_graph_max_bs": ("0.5.20", "--cuda-graph-max-bs-decode"),
}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_version(version: str | None) -> tuple[int, ...]:
    """The numeric release part of a version ('0.5.10.post1' -> (0, 5, 10)); () for None/empty."""
    if not version:
        return ()
    parts: list[int] = []
    for piece in str(version).strip().lstrip("v").split("."):
        match = re.match(r"^(\d+)", piece)
        if not match:
            break
        parts.append(int(match.group(1)))
        if match.group(1) != piece:
            break
    return tuple(parts)


def flag_name(key: str, sglang_version: str | None = None) -> str:
    """The launch_server flag for a setting, for the given SGLang version (None: the newest naming known)."""
    default = "--" + key.replace("_", "-")
    rename = FLAG_RENAMES.get(key)
    if rename is None:
        return default
    since, new_name = rename
    if sglang_version is None or parse_version(sglang_version) >= parse_version(since):
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


def _kind_problem(key: str, kind: str, value) -> str | None:
    """A sentence when value does not fit its kind, else None. None values mean 'not set'."""
    if value is None:
        return None
    shown = f"{value!r}"[:80]
    if kind == "str":
        if isinstance(value, str):
            return None
        return f"{key} must be a string, got {type(value).__name__} {shown}"
    if kind == "int":
        # bool is an int in Python, but True would render as "True": refuse it.
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return (f"{key} must be an integer, got {type(value).__name__} {shown} "
                    "(write it as a number, e.g. 8)")
        return None
    if kind == "bool":
        if isinstance(value, bool):
            return None
        return f"{key} must be a boolean (true/false), got {type(value).__name__} {shown}"
    if kind == "list":
        if not isinstance(value, list):
            return (f"{key} must be a list of strings (one argv item each, e.g. ['--mem-fraction-static', "
                    f"'0.8']), got {type(value).__name__} {shown}")
        bad = [item for item in value if not isinstance(item, str) or isinstance(item, bool)]
        if bad:
            return f"{key} must hold only strings (quote numbers, e.g. '0.8'), got {bad[0]!r}"
        return None
    if kind == "dict":
        if not isinstance(value, dict):
            return f"{key} must be a mapping of environment variable names to values, got {shown}"
        for name, item in value.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                return f"{key}: {name!r} is not a valid environment variable name"
            if isinstance(item, (dict, list)) or item is None:
                return f"{key}.{name} must be a string or number, got {type(item).__name__}"
        return None
    raise ValueError(f"unknown kind {kind}")


def validate_settings(settings, *, require_model: bool = True) -> list[str]:
    """Shape errors in server settings that can be named before SGLang sees them (empty list: none).

    Refuses unknown keys (with the closest known key), values of the wrong type, and incoherent
    multi-node settings. Whether a value is a valid choice is left to SGLang's parser.
    """
    if not isinstance(settings, dict):
        return [f"server settings must be a mapping, got {type(settings).__name__}"]
    problems: list[str] = []
    for key in settings:
        if key not in SETTINGS_KINDS:
            close = difflib.get_close_matches(str(key), SETTINGS_KINDS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"unknown server setting '{key}'{hint}; known settings: "
                            + ", ".join(sorted(SETTINGS_KINDS))
                            + "; pass other SGLang flags through extra_args")
    for key, kind in SETTINGS_KINDS.items():
        problem = _kind_problem(key, kind, settings.get(key))
        if problem:
            problems.append(problem)
    if require_model and not settings.get("model_path"):
        problems.append("model_path is required (a local folder or a Hugging Face repo ID)")
    for key in ("model_path", "host"):
        value = settings.get(key)
        if isinstance(value, str) and value != value.strip():
            problems.append(f"{key} has leading or trailing whitespace: {value!r}")

    nnodes = settings.get("nnodes")
    node_rank = settings.get("node_rank")
    if isinstance(nnodes, int) and not isinstance(nnodes, bool) and nnodes > 1:
        if not settings.get("dist_init_addr"):
            problems.append(f"nnodes is {nnodes} but dist_init_addr is not set: every node needs the "
                            "first node's HOST:PORT (the sglang role derives it from sglang_node_group)")
        if node_rank is None:
            problems.append(f"nnodes is {nnodes} but node_rank is not set")
    if (isinstance(nnodes, int) and isinstance(node_rank, int)
            and not isinstance(nnodes, bool) and not isinstance(node_rank, bool)
            and not 0 <= node_rank < nnodes):
        problems.append(f"node_rank {node_rank} is outside 0..{nnodes - 1} (nnodes {nnodes})")
    dist = settings.get("dist_init_addr")
    if isinstance(dist, str) and dist and not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[^:\s]+):\d+$", dist):
        problems.append(f"dist_init_addr must be HOST:PORT (e.g. 10.0.0.1:25000), got {dist!r}")

    extra = settings.get("extra_args")
    if isinstance(extra, list):
        owned = {flag_name(key) for key in FLAG_ORDER} | {"--" + k.replace("_", "-") for k in FLAG_ORDER}
        for item in extra:
            if isinstance(item, str) and item.split("=", 1)[0] in owned:
                problems.append(f"extra_args repeats {item.split('=', 1)[0]}, which a setting of its own "
                                "controls: set that setting instead")
    return problems


def _render_value(value) -> str:
    return value if isinstance(value, str) else str(value)


def build_server_argv(settings: dict, include_secrets: bool = False, *,
                      sglang_version: str | None = None) -> list[str]:
    """The flags of `python -m sglang.launch_server` for these settings (not the python/-m prefix).

    Unset (None) settings and false booleans are left out; host and port are always rendered.
    api_key is left out unless include_secrets (so the argv can be logged and stamped).
    sglang_version picks flag names that moved between releases (None: the newest naming known).
    Raises ValueError naming every problem of validate_settings (without requiring a model).
    """
    problems = validate_settings(settings, require_model=False)
    if problems:
        raise ValueError("invalid server settings: " + "; ".join(problems))
    merged = with_defaults(settings)
    argv: list[str] = []
    for key in FLAG_ORDER:
        if key in SECRET_KEYS and not include_secrets:
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
    argv.extend(merged.get("extra_args") or [])
    return argv


def build_server_env(settings: dict) -> dict[str, str]:
    """The environment variables the settings ask for (e.g. NCCL_P2P_LEVEL), as strings."""
    env = (settings or {}).get("env") or {}
    return {str(name): (str(value).lower() if isinstance(value, bool) else str(value))
            for name, value in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of --api-key (and --admin-api-key) replaced, for logs and results."""
    redacted: list[str] = []
    hide_next = False
    for item in argv:
        if hide_next:
            redacted.append("********")
            hide_next = False
            continue
        name = item.split("=", 1)[0]
        if name in ("--api-key", "--admin-api-key"):
            if "=" in item:
                redacted.append(name + "=********")
            else:
                redacted.append(item)
                hide_next = True
            continue
        redacted.append(item)
    return redacted
