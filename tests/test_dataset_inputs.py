"""Issue 18 item 6: inputs from a Hugging Face `datasets` split, pinned by revision and by the
hash of its rows. Real `datasets` code reads a real `save_to_disk` directory and a real hub cache
laid out as `huggingface_hub` writes it (nothing is downloaded: the machine has no hub access,
and a run never fetches)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import EnvBuilder, cli, read_jsonl

datasets = pytest.importorskip("datasets")

POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""
TEST_ROWS = [
    {"question": "say red", "answer": "red", "kind": "colour"},
    {"question": "say two", "answer": "two", "kind": "number"},
    {"question": "say sea", "answer": "blue", "kind": "colour"},
]
TRAIN_ROWS = [{"question": "say green", "answer": "green", "kind": "colour"}]
REVISION = "0123456789abcdef0123456789abcdef01234567"


def _spec(env_builder: EnvBuilder, dataset: dict[str, Any], **extra: Any) -> Path:
    spec = env_builder.write(
        POLICY,
        prompt={"template": "{{ question }}"},
        verifiers=[{"type": "exact_match", "expected_field": "answer"}],
        rollouts=1,
        **extra,
    )
    document = yaml.safe_load(spec.read_text())
    document["inputs"] = {"dataset": dataset, "sha256": "0" * 64}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    return spec


def _cache_env(tmp_path: Path) -> dict[str, str]:
    return {
        "RLENV_CACHE_DIR": str(tmp_path / "cache"),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
    }


def _save_to_disk(root: Path) -> None:
    splits = {
        "test": datasets.Dataset.from_list(TEST_ROWS),
        "train": datasets.Dataset.from_list(TRAIN_ROWS),
    }
    datasets.DatasetDict(splits).save_to_disk(str(root / "qa"))


def test_local_split_pins_runs_and_refuses_changed_rows(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    _save_to_disk(env_builder.root)
    spec = _spec(env_builder, {"path": "qa", "split": "test"})
    env = _cache_env(tmp_path)

    stale = cli("validate", str(spec), env=env)
    assert stale.returncode == 2 and "hash mismatch for the dataset's rows" in stale.stderr
    assert len(stale.stderr.strip().splitlines()) == 1, stale.stderr

    pinned = cli("pin", str(spec), env=env)
    assert pinned.returncode == 0, pinned.stderr
    assert cli("validate", str(spec), env=env).returncode == 0

    digests = []
    for name in ("one", "two"):
        out = tmp_path / name
        done = cli("run", str(spec), "--out", str(out), "--json", env=env)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["pass_rate"]["value"] == pytest.approx(2 / 3)
        digests.append(summary["digest"])
    assert digests[0] == digests[1]
    records = read_jsonl(tmp_path / "one" / "results.jsonl")
    assert sorted(r["input_id"] for r in records) == ["0", "1", "2"]  # no id column: the row number

    # the cached rows are not trusted: a tampered copy is rebuilt from the dataset
    (cached,) = (tmp_path / "cache" / "datasets").iterdir()
    cached.write_text(cached.read_text().replace("blue", "sea"))
    again = cli("run", str(spec), "--out", str(tmp_path / "three"), "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["pass_rate"]["value"] == pytest.approx(2 / 3)

    # a changed dataset is refused by its pinned hash, before anything runs
    changed = [dict(row) for row in TEST_ROWS]
    changed[2]["answer"] = "sea"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(changed)}).save_to_disk(
        str(env_builder.root / "qa")
    )
    cached.unlink()
    refused = cli("run", str(spec), "--out", str(tmp_path / "four"), env=env)
    assert refused.returncode == 2 and "inputs.sha256: hash mismatch" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "four").exists()


def _hub_cache(tmp_path: Path, name: str, revision: str) -> None:
    """A dataset repository in the hub cache as `huggingface_hub` lays it out: blobs, a
    snapshot per commit, refs/main."""
    repo = tmp_path / "hf" / "hub" / f"datasets--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision / "data"
    snapshot.mkdir(parents=True)
    rows = [{"qid": f"q{i}", **row} for i, row in enumerate(TEST_ROWS)]
    datasets.Dataset.from_list(rows).to_parquet(str(snapshot / "test-00000-of-00001.parquet"))
    train = [{"qid": f"t{i}", **row} for i, row in enumerate(TRAIN_ROWS)]
    datasets.Dataset.from_list(train).to_parquet(str(snapshot / "train-00000-of-00001.parquet"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)


def test_hub_split_at_a_commit_from_the_local_cache(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    _hub_cache(tmp_path, "acme/qa", REVISION)
    source = {"name": "acme/qa", "split": "test", "revision": REVISION, "id_field": "qid"}
    spec = _spec(env_builder, source)
    env = _cache_env(tmp_path)
    assert cli("pin", str(spec), env=env).returncode == 0
    out = tmp_path / "run"
    done = cli("run", str(spec), "--out", str(out), "--json", "--where", "kind=colour", env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(r["input_id"] for r in read_jsonl(out / "results.jsonl")) == ["q0", "q2"]

    document = yaml.safe_load(spec.read_text())
    document["inputs"]["dataset"]["revision"] = "f" * 40  # a commit the cache does not hold
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    missing = cli("validate", str(spec), env=env)
    assert missing.returncode == 2 and "not in the local Hugging Face cache" in missing.stderr
    assert "Traceback" not in missing.stderr

    document["inputs"]["dataset"]["revision"] = "main"  # a branch moves: refused by the schema
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    branch = cli("validate", str(spec), env=env)
    assert branch.returncode == 2 and "inputs.dataset.revision" in branch.stderr


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ({"path": "qa", "split": "validation"}, "no such split (splits: test, train)"),
        ({"path": "qa", "split": "test", "id_field": "nope"}, "no column 'nope' for id_field"),
        ({"path": "nowhere", "split": "test"}, "directory not found"),
        ({"path": "qa", "name": "acme/qa", "split": "test"}, "exactly one of 'name'"),
        ({"name": "acme/qa", "split": "test"}, "needs 'revision'"),
    ],
)
def test_bad_dataset_sources_are_one_line(
    env_builder: EnvBuilder, tmp_path: Path, dataset: dict[str, Any], message: str
) -> None:
    _save_to_disk(env_builder.root)
    spec = _spec(env_builder, dataset)
    for command in ("validate", "pin"):
        done = cli(command, str(spec), env=_cache_env(tmp_path))
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_rows_that_are_not_json_are_refused(env_builder: EnvBuilder, tmp_path: Path) -> None:
    rows = [{"question": "say x", "answer": "x", "blob": b"\x00\x01"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(env_builder.root / "bin"))
    spec = _spec(env_builder, {"path": "bin", "split": "test"})
    done = cli("pin", str(spec), env=_cache_env(tmp_path))
    assert done.returncode == 2 and "row 0, blob" in done.stderr, done.stderr


def test_train_and_held_out_splits_of_one_dataset(env_builder: EnvBuilder, tmp_path: Path) -> None:
    """train_inputs may come from another split; the same split twice is leakage."""
    _save_to_disk(env_builder.root)
    spec = _spec(env_builder, {"path": "qa", "split": "test"})
    document = yaml.safe_load(spec.read_text())
    document["train_inputs"] = {"dataset": {"path": "qa", "split": "train"}, "sha256": "0" * 64}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    env = _cache_env(tmp_path)
    assert cli("pin", str(spec), env=env).returncode == 0
    assert cli("validate", str(spec), env=env).returncode == 0

    document = yaml.safe_load(spec.read_text())
    document["train_inputs"]["dataset"]["split"] = "test"
    document["train_inputs"]["sha256"] = document["inputs"]["sha256"]
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    leaked = cli("validate", str(spec), env=env)
    assert leaked.returncode == 2 and "also appear in the training inputs" in leaked.stderr
