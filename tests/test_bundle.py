"""The env bundle a Ray actor unpacks on its node: what is packed, and that it arrives intact."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from rlenv.canonical import manifest_hash, sha256_file
from rlenv.executors import bundle
from rlenv.pin import pin
from rlenv.spec import load_spec
from tests.conftest import EnvBuilder


def test_bundle_unpacks_the_env_as_it_is_without_what_is_not_env_code(tmp_path: Path) -> None:
    project = tmp_path / "project"
    builder = EnvBuilder(project / "envs")
    snapshot = project / "fixtures" / "snapshot"
    (snapshot / "bin").mkdir(parents=True)
    (snapshot / "bin" / "run").write_text("echo frozen\n")
    (snapshot / "bin" / "run").chmod(0o754)
    (snapshot / "run-link").symlink_to("bin/run")
    (snapshot / ".hidden").write_text("part of the world\n")
    absolute = tmp_path / "elsewhere"  # named by absolute path: must exist on every node
    absolute.mkdir()
    (absolute / "shared.py").write_text("")
    spec = builder.write(
        "def policy(messages, tools, ctx):\n    return 'a'\n",
        snapshot={"path": "../fixtures/snapshot", "sha256": manifest_hash(snapshot)},
        python_path=[".", str(absolute)],
    )
    code = spec.parent
    (code / "helpers").mkdir()
    (code / "helpers" / "__init__.py").write_text("VALUE = 1\n")
    (code / "helpers" / "data.json").write_text("{}\n")
    (code / "linked.py").symlink_to(code / "helpers" / "__init__.py")
    never = [".env", ".git/config", "__pycache__/x.cpython-311.pyc", "venv/pyvenv.cfg"]
    never += ["runs/r1/run.json", "runs/r1/results.jsonl"]
    for name in never:
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text("OPENAI_API_KEY=sk-not-for-the-cluster\n")

    packed = bundle.build(spec)
    assert b"sk-not-for-the-cluster" not in packed.data
    unpacked_spec = bundle.unpack(packed.data, packed.spec, tmp_path / "node" / "env")
    assert unpacked_spec.read_bytes() == spec.read_bytes()
    loaded = load_spec(unpacked_spec)
    assert loaded.inputs_path.is_relative_to(tmp_path / "node")
    assert sha256_file(loaded.inputs_path) == sha256_file(code / "inputs.jsonl")
    copy = loaded.snapshot_path
    assert copy is not None and copy.is_relative_to(tmp_path / "node")
    assert manifest_hash(copy) == manifest_hash(snapshot), "links kept as links, dotfiles kept"
    assert os.readlink(copy / "run-link") == "bin/run"
    assert stat.S_IMODE((copy / "bin" / "run").stat().st_mode) == 0o754
    here = unpacked_spec.parent
    assert (here / "helpers" / "data.json").is_file()
    assert (here / "linked.py").read_text() == "VALUE = 1\n" and not (
        here / "linked.py"
    ).is_symlink()
    for name in never:
        assert not (here / name).exists(), name
    assert not any(path.name == "shared.py" for path in (tmp_path / "node").rglob("*"))

    (here / "helpers" / "data.json").write_text("changed on the node\n")
    again = bundle.unpack(packed.data, packed.spec, tmp_path / "node" / "env")
    assert again == unpacked_spec
    assert (here / "helpers" / "data.json").read_text() == "changed on the node\n", "unpacked once"


def test_a_datasets_split_reaches_the_node_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inputs from a datasets split are read from the driver's rlenv cache: the bundle carries
    those rows, and unpacking puts them in the node's own cache, where its worker looks."""
    from rlenv.env import load_environment

    datasets = pytest.importorskip("datasets")
    builder = EnvBuilder(tmp_path / "env")
    spec = builder.write("def policy(messages, tools, ctx):\n    return 'a'\n")
    rows = [{"id": "a", "prompt": "say a", "answer": "a"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(builder.root / "qa"))
    document = yaml.safe_load(spec.read_text())
    document["inputs"] = {"dataset": {"path": "qa", "split": "test"}, "sha256": "0" * 64}
    spec.write_text(yaml.safe_dump(document))
    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "driver-cache"))
    assert pin(spec).written
    load_environment(spec)  # the driver checks the rows and caches them
    packed = bundle.build(spec)

    monkeypatch.setenv("RLENV_CACHE_DIR", str(tmp_path / "node-cache"))
    unpacked = bundle.unpack(packed.data, packed.spec, tmp_path / "node")
    node_rows = load_spec(unpacked).inputs_path
    assert node_rows.is_relative_to(tmp_path / "node-cache") and node_rows.is_file()
    assert sha256_file(node_rows) == load_spec(unpacked).spec.inputs.sha256
