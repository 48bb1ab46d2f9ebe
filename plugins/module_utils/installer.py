"""The one owner of installing packages into an ML env: uv when it can do what pip would, pip otherwise
(issue 41: the first run's largest step was pip installing torch, 71 s against uv's 20 s on the same machine,
bench/installer_compare.py).

choice `auto` uses uv when three things hold, and says which one did not:
- pip's settings for this env (mirrors, a wheelhouse, certificates, constraints: pip_settings.py) all have a
  uv translation, so uv installs from exactly the sources pip would, with pip's best-match rule;
- uv itself can be had: UV_REQUIREMENT in a tools venv of its own (uv_home), installed there by pip under
  those same settings (a wheelhouse without uv's wheel means pip: an air-gapped host never reaches out);
- `choice` is not `pip`.
`uv` makes the first two a failure instead of a fallback. The env gets no package of the installer's: uv acts
on it from outside (`uv pip install --python ENV`).
"""

from __future__ import annotations

import os
import shutil

from ansible_collections.epforge.ep.plugins.module_utils.common import fail_cmd
from ansible_collections.epforge.ep.plugins.module_utils.pip_argv import pip_argv
from ansible_collections.epforge.ep.plugins.module_utils.pip_settings import UvTranslation, pip_settings
from ansible_collections.epforge.ep.plugins.module_utils.process import TIMED_OUT, run_bounded, run_logged

UV_REQUIREMENT = "uv==0.13.9"
CHOICES = ("auto", "uv", "pip")
# uv's flags of every install: pip writes every module's .pyc at install time and uv does not by default (the
# server runs as an unprivileged user who cannot write them into the env: every launch would compile torch's
# sources again); no uv.toml of the user's adds sources pip does not use; no progress bars in the logs.
UV_OWN_FLAGS = ("--no-progress", "--compile-bytecode", "--no-config")
# UV_ variables that change where uv keeps its files, never what it installs
UV_KEPT_VARIABLES = frozenset({"UV_CACHE_DIR", "UV_LINK_MODE"})
# The options of a module that installs through this owner (doc fragment epforge.ep.installer documents them).
INSTALLER_ARGUMENT_SPEC = {
    "installer": {"type": "str", "choices": list(CHOICES), "default": "auto"},
    "uv_home": {"type": "path"},
}
PROBE_TIMEOUT_S = 60
UV_INSTALL_TIMEOUT_S = 300


class InstallerUnavailable(Exception):
    """choice uv, and uv cannot stand in for pip here."""


class Installer:
    """Installs requirements into the env of `python`, logging each run to log_path."""

    def __init__(
        self,
        python: str,
        log_path: str,
        *,
        choice: str = "auto",
        uv_home: str = "",
        uv_requirement: str = UV_REQUIREMENT,
        pip_args: tuple[str, ...] = (),
    ) -> None:
        if choice not in CHOICES:
            raise ValueError(f"installer must be one of {', '.join(CHOICES)}, got {choice!r}")
        self.python = python
        self.log_path = log_path
        self.choice = choice
        self.uv_home = uv_home
        self.uv_requirement = uv_requirement
        # a caller's own pip arguments (a role's extra args): passed to pip as given, never guessed for uv
        self.pip_args = list(pip_args)
        self.name = ""
        self.why = ""
        self.uv = ""
        self.translation: UvTranslation | None = None

    # -- the choice ------------------------------------------------------------------------------------
    def decide(self) -> str:
        """pip or uv (once; the env's pip must exist: call it after the venv is made)."""
        if self.name:
            return self.name
        if self.choice == "pip":
            return self.use("pip", "installer: pip was asked for")
        if self.pip_args:
            return self.refuse(f"pip arguments given ({' '.join(self.pip_args)}) have no uv translation")
        problem = self.uv_problem()
        if problem:
            return self.refuse(problem)
        settings = ", ".join(self.translation.used()) or "none"
        return self.use("uv", f"{self.uv_requirement} at {self.uv}; pip settings translated: {settings}")

    def uv_problem(self) -> str:
        """Why uv cannot stand in for pip here ('' when it can; uv is then ready)."""
        if not self.uv_home:
            return "no uv_home to hold uv"
        listing = run_bounded(pip_argv(self.python, "config", "list"), timeout=PROBE_TIMEOUT_S)
        if listing.rc != 0:
            return f"`pip config list` failed (rc {listing.rc}): {listing.output.strip()[-300:]}"
        self.translation = UvTranslation(pip_settings(listing.out))
        return self.translation.refusal or self.ensure_uv()

    def use(self, name: str, why: str) -> str:
        self.name, self.why = name, why
        return name

    def refuse(self, why: str) -> str:
        if self.choice == "uv":
            raise InstallerUnavailable(f"installer uv cannot stand in for pip here: {why}")
        return self.use("pip", f"uv not used: {why}")

    def ensure_uv(self) -> str:
        """uv in its tools venv, made by pip under the env's settings; '' when there, else the problem. Built
        beside its place and moved in whole: an interrupted build leaves nothing half-made."""
        uv = os.path.join(self.uv_home, "bin", "uv")
        wanted = self.uv_requirement.partition("==")[2]
        if self.uv_version(uv) == wanted:
            self.uv = uv
            return ""
        # a building folder of this process's own: two runs of one host (two Molecule scenarios, two
        # plays) may build at once; the first to move its folder in wins and the other uses that one
        building = f"{self.uv_home}.building-{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        tools_pip = pip_argv(
            os.path.join(building, "bin", "python"), "install", "--no-input", self.uv_requirement
        )
        steps = (
            ([self.python, "-m", "venv", building], "installer: a tools venv for uv"),
            (tools_pip, f"installer: {self.uv_requirement}"),
        )
        for argv, header in steps:
            rc, _unused = run_logged(argv, self.log_path, timeout=UV_INSTALL_TIMEOUT_S, header=header)
            if rc != 0:
                shutil.rmtree(building, ignore_errors=True)
                return f"installing {self.uv_requirement} failed (rc {rc}; see {self.log_path})"
        if os.path.isdir(self.uv_home) and self.uv_version(uv) != wanted:
            shutil.rmtree(self.uv_home, ignore_errors=True)  # another uv, or a broken one
        try:
            os.rename(building, self.uv_home)
        except OSError:
            shutil.rmtree(building, ignore_errors=True)  # another run moved its uv in first
        # uv's wheel installs bin/uv as a binary, not a script naming its python: the moved venv's uv runs
        if self.uv_version(uv) != wanted:
            return f"{uv} does not answer as {self.uv_requirement}"
        self.uv = uv
        return ""

    @staticmethod
    def uv_version(uv: str) -> str:
        if not os.access(uv, os.X_OK):
            return ""
        done = run_bounded([uv, "--version"], timeout=PROBE_TIMEOUT_S)
        parts = done.out.split()
        return parts[1] if done.rc == 0 and len(parts) > 1 else ""

    # -- one install -----------------------------------------------------------------------------------
    def argv(
        self, requirements: list[str], *, index_url: str = "", reinstall: bool = False, no_deps: bool = False
    ) -> list[str]:
        """The install's argv for the decided installer."""
        if self.decide() == "uv":
            argv = [self.uv, "pip", "install", *UV_OWN_FLAGS, "--python", self.python]
            argv += self.translation.flags_for(index_url)
            argv += ["--reinstall"] if reinstall else []
        else:
            argv = pip_argv(self.python, "install", "--no-input", *self.pip_args)
            argv += ["--force-reinstall"] if reinstall else []
        argv += ["--no-deps"] if no_deps else []
        # a flag of the install itself wins over the settings, for pip and (placed last) for uv
        argv += ["--index-url", index_url] if index_url else []
        return [*argv, *requirements]

    def environment(self) -> dict[str, str] | None:
        """The run's environment (None: this process's, for pip). For uv: this process's without the UV_
        variables that choose sources or versions (UV_INDEX_URL, UV_TORCH_BACKEND, UV_CONSTRAINT, ...: pip
        would not see them), then the translated ones."""
        if self.decide() != "uv":
            return None
        kept = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in UV_KEPT_VARIABLES}
        return {**kept, **self.translation.variables}

    def install(
        self, requirements: list[str], *, header: str, timeout: float, **options
    ) -> tuple[int, float, list[str]]:
        """Install; (rc, seconds, argv). options: argv's index_url, reinstall, no_deps."""
        argv = self.argv(requirements, **options)
        rc, seconds = run_logged(
            argv, self.log_path, env=self.environment(), timeout=timeout, header=f"{header} ({self.name})"
        )
        return rc, seconds, argv

    def install_or_fail(
        self, module, requirements: list[str], *, what: str, header: str, timeout: float, **options
    ) -> float:
        """install() for a module: a failure (uv refused, or the install's rc) ends the module with the
        command, its rc, the log's tail and this installer's report; the seconds taken otherwise."""
        try:
            rc, seconds, argv = self.install(requirements, header=header, timeout=timeout, **options)
        except InstallerUnavailable as exc:
            module.fail_json(msg=f"{exc}. Nothing was installed.", installer=self.report())
        if rc != 0:
            how = (
                f"timed out after {timeout} s"
                if rc == TIMED_OUT
                else f"failed (rc {rc}) after {seconds:.0f} s"
            )
            fail_cmd(
                module,
                f"installing {what} with {self.name} {how}; see {self.log_path}",
                argv,
                rc,
                log_path=self.log_path,
                installer=self.report(),
            )
        return seconds

    @classmethod
    def for_python(cls, params: dict, python: str, log_path: str, pip_args=()) -> Installer:
        """The installer a module's INSTALLER_ARGUMENT_SPEC options ask for, for the env of python (an env's
        bin/python: uv_home defaults to `uv` beside the env's folder, /opt/epforge/uv for the stack's env)."""
        prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
        uv_home = params.get("uv_home") or os.path.join(os.path.dirname(prefix), "uv")
        choice = params.get("installer") or "auto"
        return cls(python, log_path, choice=choice, uv_home=uv_home, pip_args=tuple(pip_args))

    def report(self) -> dict:
        """What the module's result says of the installer."""
        return {"name": self.name, "why": self.why}
