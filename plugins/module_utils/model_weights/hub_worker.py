"""The part of role model that talks to the Hub (or a Hub-compatible mirror), through huggingface_hub's API.

Run in the python that has huggingface_hub (the ML env's, or the controller's for the controller source), not
imported by the module: library/model_weights.py starts `PYTHON -c BOOTSTRAP COMMAND` and writes one line of
JSON (the request, token included: never in argv or the environment) and then this file's source on stdin.
Output: JSON lines on stdout, one per event; huggingface_hub's own messages go to stderr (the module's log).

Commands:
- resolve: the revision's commit, whether the repo is gated, and every file with its size and the hash the
  Hub reports (LFS sha256, else the git blob id), from model_info + list_repo_tree at that commit. A revision
  the repository lacks (the repository answers at main) is the error kind missing_revision,
  whatever the server answered for it (a mirror's bare HTTP 500 included).
- fetch: each named file with hf_hub_download(revision=COMMIT, local_dir=STAGING), one after another, an
  event before and after each; the module verifies, places and times them.
"""

from __future__ import annotations

import json
import sys
import threading

# python -c BOOTSTRAP COMMAND: the request is the first line of stdin, this source the rest.
BOOTSTRAP = (
    "import json, sys; request = json.loads(sys.stdin.readline()); "
    "code = compile(sys.stdin.read(), 'epforge-model-worker', 'exec'); "
    "scope = {'__name__': 'epforge_model_worker'}; exec(code, scope); "
    "sys.exit(scope['main'](sys.argv[1], request))"
)


_LOCK = threading.Lock()


def emit(event: str, **fields) -> None:
    with _LOCK:  # one whole line per event, from any fetching thread
        print(json.dumps({"event": event, **fields}), flush=True)


def classify(exc: BaseException) -> str:
    """A short kind for an exception of huggingface_hub (or the HTTP stack under it)."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    for kind, cls in (
        ("gated", "GatedRepoError"),
        ("unknown_revision", "RevisionNotFoundError"),
        ("unknown_repo", "RepositoryNotFoundError"),
        ("unknown_file", "EntryNotFoundError"),
        ("offline", "OfflineModeIsEnabled"),
    ):
        if cls in names:
            return kind
    if any(
        n in names for n in ("ConnectError", "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout")
    ):
        return "unreachable"
    return "error"


def missing_revision(api, request: dict, exc: BaseException) -> str:
    """When the repository answers at its default branch (main) but not at the revision asked for: what the
    server answered for that one (the Hub: RevisionNotFoundError; a mirror may answer a commit it lacks with a
    bare server error - olah 0.5: HTTP 500); else '' (the repository itself is unknown, gated or
    unreachable)."""
    if classify(exc) not in ("unknown_revision", "error") or request["revision"] in ("", "main"):
        return ""
    # The Hub's default branch (a bare /api/models/REPO is not answered by every mirror); twice, as a server
    # that answered with an error may reset the kept-alive connection the next request goes out on (olah).
    for attempt in (1, 2):
        try:
            api.model_info(request["repo"], revision="main")
            break
        except Exception:  # the repository does not answer either: the first error says why
            if attempt == 2:
                return ""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return f"it answered HTTP {status} for it" if status else f"it answered {type(exc).__name__} for it"


def resolve(request: dict) -> int:
    from huggingface_hub import HfApi  # noqa: PLC0415 (only the worker's python has it)

    api = HfApi(endpoint=request["endpoint"] or None, token=request["token"] or False)
    try:
        info = api.model_info(request["repo"], revision=request["revision"])
    except Exception as exc:
        missing = missing_revision(api, request, exc)
        if not missing:
            raise
        emit("error", kind="missing_revision", message=missing)
        return 2
    commit = info.sha
    files = []
    for entry in api.list_repo_tree(request["repo"], revision=commit, recursive=True):
        if not hasattr(entry, "size"):  # a folder
            continue
        lfs = getattr(entry, "lfs", None)
        files.append(
            {
                "path": entry.path,
                "size": int(entry.size),
                "blob_id": "" if lfs else (getattr(entry, "blob_id", "") or ""),
                "sha256": (getattr(lfs, "sha256", "") or "") if lfs else "",
            }
        )
    emit("resolved", commit=commit, gated=info.gated or False, private=bool(info.private), files=files)
    return 0


def fetch(request: dict) -> int:
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from huggingface_hub import hf_hub_download  # noqa: PLC0415

    def one(name: str) -> None:
        emit("start", file=name)
        path = hf_hub_download(
            request["repo"],
            name,
            revision=request["commit"],
            local_dir=request["staging"],
            endpoint=request["endpoint"] or None,
            token=request["token"] or False,
        )
        emit("done", file=name, path=path)

    # In the module's order (largest first: long files start early, small ones fill the gaps).
    with ThreadPoolExecutor(max_workers=max(1, int(request.get("concurrency", 1)))) as pool:
        for future in [pool.submit(one, name) for name in request["files"]]:
            future.result()
    return 0


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    found = {}
    for dist in ("huggingface_hub", "hf_xet"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = ""
    return found


def main(command: str, request: dict) -> int:
    try:
        emit("versions", **versions())
        if not versions()["huggingface_hub"]:
            emit("error", kind="missing_library", message="huggingface_hub is not installed in this python")
            return 3
        return {"resolve": resolve, "fetch": fetch}[command](request)
    except Exception as exc:  # every failure becomes one event the module turns into a message
        text = str(exc).replace(request.get("token") or "\0", "<token>")
        emit("error", kind=classify(exc), message=f"{type(exc).__name__}: {text}"[:2000])
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], json.loads(sys.stdin.readline())))
