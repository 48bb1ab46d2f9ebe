"""The environment an SGLang server runs with: one owner for the launcher and for provision's check of it.

SGLang's first forward pass JIT-builds kernels (FlashInfer's rmsnorm through sgl_kernel, Triton's), and those
builds run tools by name: ninja, nvcc, c++. On a real host ninja lives in the ML env's bin/ (pip's `ninja`
wheel, a FlashInfer dependency), nvcc in the toolkit's bin/; a service's PATH has neither. A server launched
with systemd's default PATH died 20 s after start on an H200 with `FileNotFoundError: ... 'ninja'`
(docs/gpu-runs.md, 2026-12-03). So every server's PATH starts with the env's bin/, then the toolkit's bin/,
then the service PATH, and CUDA_HOME names the toolkit where one is known.

server_base_env() is what module sglang_server puts beneath the request's own variables (both managers),
and what module server_jit_check runs FlashInfer's JIT with, as the server's account; child_env() adds the
account's identity and the locale for a process-managed server (systemd sets those itself from User=).
Nothing else of the caller's environment reaches a server: the controller's tokens and root's PATH stay out.
"""

from __future__ import annotations

import os
import pwd

from ansible_collections.epforge.ep.plugins.module_utils.files import read_json

# The PATH of a service (systemd's default for units): the tail of every server's PATH.
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a process-managed server takes from its account and locale besides the base environment.
ACCOUNT_ENV_NAMES = ("HOME", "USER", "LOGNAME")
LOCALE_ENV_NAMES = ("LANG", "LC_ALL", "TZ")
# The toolkit role's local fact (roles/cuda_toolkit): where CUDA_HOME comes from when the play has no
# cuda_toolkit_home (a serve-only run), so a serve run and a provision run give the server the same env.
TOOLKIT_FACT = "/etc/ansible/facts.d/epforge_cuda_toolkit.fact"


def toolkit_home(cuda_home: str, toolkit_fact: str) -> str:
    """cuda_home, else the home the toolkit role recorded on this host, else '' (no toolkit known)."""
    if cuda_home:
        return cuda_home
    fact = read_json(toolkit_fact) if toolkit_fact else None
    home = fact.get("home") if isinstance(fact, dict) else None
    return home if isinstance(home, str) else ""


def server_path(python: str, cuda_home: str, rest: str = SERVICE_PATH) -> str:
    """The env's bin/ (as named, not resolved: a venv's python is a link out of it), the toolkit's bin/,
    then rest (the service PATH; a JIT check run by Ansible keeps its own); each directory once."""
    dirs = [os.path.dirname(python)]
    if cuda_home:
        dirs.append(os.path.join(cuda_home, "bin"))
    dirs.extend(rest.split(":"))
    return ":".join(dict.fromkeys(d for d in dirs if d))


def server_base_env(python: str, cuda_home: str) -> dict:
    """PATH and CUDA_HOME of every server launched with this python and toolkit (the request's own
    variables go over these)."""
    env = {"PATH": server_path(python, cuda_home)}
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    return env


# Variables a request's env may set that replace what the server's processes rely on: accepted (a user may
# mean it), never silently. Named by env_warnings, in preflight (the request) and in the tuner's plan (each
# candidate).
OVERRIDING_ENV = {
    "PATH": "it replaces the PATH epforge gives every server (the env's bin/ first, for ninja, then the "
    "toolkit's bin/, for nvcc, then the service PATH): SGLang's JIT builds find only what it names and fail "
    "with FileNotFoundError for ninja or nvcc where it lacks them; leave PATH out, or keep those directories "
    "in it",
    "LD_PRELOAD": "every process of the server (its workers, the JIT compilers, NCCL's helpers) loads that "
    "library first: a missing one prints a loader error in each, a wrong one crashes CUDA or the build, and "
    "it runs its code inside the server; set it only for a library you mean every process to load",
}


def env_warnings(env, where: str) -> list[str]:
    """One warning per OVERRIDING_ENV variable env sets; where names whose env it is (the request, a
    candidate). Not a mapping: nothing to say here (the schema check names it)."""
    if not isinstance(env, dict):
        return []
    return [
        f"{where} sets {name}={env[name]!r}: {why}" for name, why in OVERRIDING_ENV.items() if name in env
    ]


def child_env(env: dict, account: pwd.struct_passwd, inherit: dict | None = None) -> dict:
    """A process-managed service's whole environment: the locale, the service PATH, the account's HOME,
    USER and LOGNAME, then env (which may set its own PATH)."""
    inherit = os.environ if inherit is None else inherit
    out = {k: inherit[k] for k in LOCALE_ENV_NAMES if k in inherit}
    out.update(PATH=SERVICE_PATH, HOME=account.pw_dir, USER=account.pw_name, LOGNAME=account.pw_name)
    out.update(env)
    return out
