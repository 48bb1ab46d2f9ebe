"""Issue 35 item 10, role model's refusals, against a real Hub-compatible server (olah on loopback,
tests/hub_mirror.py) with huggingface_hub as the client, module model_weights run as Ansible runs it:
- a shard index naming a file the repository lacks was refused only after every other file was downloaded:
  now the index is fetched first and alone, and the refusal comes before any shard moves (counted in the
  mirror's access log);
- a commit the repository does not have showed the mirror's raw HTTP 500 text: now the message says the
  repository answers and that revision does not, and what to set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hub_mirror import Olah, git_repo, write_checkpoint
from moduletools import run_module_in

pytestmark = pytest.mark.xdist_group("model_weights")

MIB = 1 << 20
NO_SUCH_COMMIT = "0123456789abcdef0123456789abcdef01234567"


def index_naming_a_missing_shard(directory: Path) -> None:
    write_checkpoint(directory, shards=2, shard_bytes=MIB)
    index = directory / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["weight_map"]["model.layers.3.w0"] = "model-00003-of-00002.safetensors"
    index.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    olah = Olah(tmp_path_factory.mktemp("olah"))
    git_repo(olah.mirrors, "acme/badindex", checkpoint=index_naming_a_missing_shard)
    git_repo(olah.mirrors, "acme/small", shards=1, shard_bytes=MIB)
    yield olah
    olah.stop()


def args(tmp_path: Path, olah, repo: str, **extra) -> dict:
    return {
        "name": "model_path",
        "source": "mirror",
        "repo": repo,
        "endpoint": olah.endpoint,
        "path": str(tmp_path / "models" / repo),
        "python": sys.executable,
        "log_path": str(tmp_path / "log" / "model.log"),
        "facts_dir": str(tmp_path / "facts"),
        "space_margin_mb": 1,
        **extra,
    }


def test_an_index_naming_a_shard_the_repo_lacks_is_refused_before_any_shard_moves(tmp_path, hub):
    a = args(tmp_path, hub, "acme/badindex")
    result = run_module_in(tmp_path, "model_weights", a)
    served = [line.split("/resolve/", 1)[1].split()[0] for line in hub.downloads("acme/badindex")]
    assert result["_rc"] != 0, result
    assert [s for s in served if ".safetensors" in s and "index" not in s] == [], (
        f"shards were downloaded before the refusal: {served}; {result.get('msg')}"
    )
    assert (
        "model.safetensors.index.json names shards that are not there: model-00003-of-00002"
        in (result["msg"])
    )
    assert "only its index was fetched, no shard" in result["msg"]
    assert not list(Path(a["path"]).glob("*-of-*.safetensors"))
    assert not (tmp_path / "facts" / "epforge_model.fact").exists()


def test_a_commit_the_repo_lacks_is_named_plainly_not_as_the_mirrors_http_500(tmp_path, hub):
    a = args(tmp_path, hub, "acme/small", revision=NO_SUCH_COMMIT)
    result = run_module_in(tmp_path, "model_weights", a)
    assert result["_rc"] != 0
    msg = result["msg"]
    assert f"acme/small at revision {NO_SUCH_COMMIT} was not found at {hub.endpoint}" in msg, msg
    assert "the repository answers at its branch main, this revision does not" in msg, msg
    assert "set model_revision to a branch, a tag or a full commit id of acme/small" in msg, msg
    assert "Internal Server Error" not in msg and "/api/models/" not in msg, msg
    assert not Path(a["path"]).exists()
