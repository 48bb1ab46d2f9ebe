"""pip's argv, built once (issue 40: seven modules wrote it by hand, each with its flags in its own order).

Every pip run epforge makes is `PIP [--python TARGET] VERB --disable-pip-version-check ARGS...`, PIP being
`PYTHON -m pip` for an interpreter, or a pip command a caller gives (cuda_toolkit_pypi's pip_command,
wheelhouse_build's pip). pip's self version check is off in every run: it reaches out to PyPI from hosts that
may be air-gapped and writes its warning into the modules' logs. Pure function: no I/O.
"""

from __future__ import annotations

NO_VERSION_CHECK = "--disable-pip-version-check"


def pip_command(python: str) -> list[str]:
    """pip of an interpreter: `PYTHON -m pip` (a caller's default when it is given no pip command)."""
    return [str(python), "-m", "pip"]


def pip_argv(pip, verb: str, *args: str, target_python: str | None = None) -> list[str]:
    """The argv of one pip run. pip: an interpreter path (run as `PATH -m pip`) or a pip command (a list);
    target_python: pip's global --python, the environment a pip outside it acts on."""
    if not verb or verb.startswith("-"):
        raise ValueError(f"pip_argv needs a pip command (install, download, ...), got {verb!r}")
    base = list(pip) if isinstance(pip, (list, tuple)) else pip_command(pip)
    if not base:
        raise ValueError("pip_argv needs an interpreter or a pip command")
    target = ["--python", target_python] if target_python else []
    return [*base, *target, verb, NO_VERSION_CHECK, *args]
