"""The bad-input catalog (beyond test_spec.py; issue 13 items 4 and 5), fuzzing of the CLI and
the readers, and `verify --perturb`."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlenv.errors import SpecError
from rlenv.spec import load_spec
from tests.bad_inputs import CATALOG, Env, attempt, invoke
from tests.conftest import RLENV, EnvBuilder, cli

POLICY = "def policy(messages, tools, ctx):\n    return messages[-1]['content'].split()[-1]\n"


def _edit(spec: Path, change) -> None:
    document = yaml.safe_load(spec.read_text())
    change(document)
    spec.write_text(yaml.safe_dump(document, sort_keys=False))


def _snapshot_env(builder: EnvBuilder) -> Path:
    spec = builder.write(POLICY)
    snapshot = spec.parent / "snap"
    snapshot.mkdir()
    (snapshot / "f.txt").write_text("x")
    from rlenv.canonical import manifest_hash

    _edit(spec, lambda d: d.update(snapshot={"path": "snap", "sha256": manifest_hash(snapshot)}))
    return spec


CATALOG = [
    (
        "snapshot-missing",
        lambda s: shutil.rmtree(s.parent / "snap"),
        "snapshot.path: directory not found",
    ),
    (
        "snapshot-changed",
        lambda s: (s.parent / "snap" / "g.txt").write_text("new"),
        "snapshot.sha256: manifest hash mismatch",
    ),
    (
        "inputs-missing",
        lambda s: (s.parent / "inputs.jsonl").unlink(),
        "inputs.path: file not found",
    ),
    (
        "cassette-missing",
        lambda s: _edit(
            s,
            lambda d: d.update(
                tools=[{"name": "t", "function": "m:f", "cassette": {"path": "nope.yaml"}}]
            ),
        ),
        "tools[0].cassette.path: cassette not found",
    ),
    (
        "cassette-hash",
        lambda s: (
            (s.parent / "c.yaml").write_text("interactions: []\nversion: 1\n"),
            _edit(
                s,
                lambda d: d.update(
                    tools=[
                        {
                            "name": "t",
                            "function": "m:f",
                            "cassette": {"path": "c.yaml", "sha256": "0" * 64},
                        }
                    ]
                ),
            ),
        ),
        "tools[0].cassette.sha256: hash mismatch",
    ),
    (
        "invalid-regex",
        lambda s: _edit(s, lambda d: d.update(verifiers=[{"type": "regex", "pattern": "(("}])),
        "invalid regex",
    ),
    (
        "invalid-json-schema",
        lambda s: _edit(
            s,
            lambda d: d.update(verifiers=[{"type": "json_schema", "schema": {"type": "nonsense"}}]),
        ),
        "invalid JSON schema",
    ),
    ("no-model", lambda s: _edit(s, lambda d: d.pop("model")), "no model: pass --model"),
    (
        "non-utf8-inputs",
        lambda s: (
            (s.parent / "inputs.jsonl").write_bytes(b"\xff\xfe"),
            _edit(
                s,
                lambda d: d["inputs"].update(
                    sha256=__import__("hashlib").sha256(b"\xff\xfe").hexdigest()
                ),
            ),
        ),
        "inputs file is not UTF-8",
    ),
]


@pytest.mark.parametrize("case_id,breaker,fragment", CATALOG, ids=[c[0] for c in CATALOG])
def test_catalog(env_builder: EnvBuilder, tmp_path: Path, case_id, breaker, fragment) -> None:
    spec = _snapshot_env(env_builder)
    breaker(spec)
    out = tmp_path / "run"
    result = cli("run", str(spec), "--out", str(out))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists(), "no run directory left behind"


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--rollouts", "0"], "--rollouts must be at least 1"),
        (["--limit", "0"], "--limit must be at least 1"),
        (["--resume"], "--resume needs --out"),
        (["--rollouts", "many"], "Invalid value for '--rollouts'"),
    ],
)
def test_bad_arguments(env_builder: EnvBuilder, args: list[str], fragment: str) -> None:
    spec = env_builder.write(POLICY)
    result = cli("run", str(spec), *args)
    assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_out_is_a_file_and_resume_without_run(env_builder: EnvBuilder, tmp_path: Path) -> None:
    spec = env_builder.write(POLICY)
    target = tmp_path / "file"
    target.write_text("precious")
    result = cli("run", str(spec), "--out", str(target))
    assert result.returncode == 2 and "is not a directory" in result.stderr
    assert target.read_text() == "precious"
    empty = tmp_path / "empty"
    empty.mkdir()
    resume = cli("run", str(spec), "--out", str(empty), "--resume")
    assert resume.returncode == 2 and "holds no run to resume" in resume.stderr


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    document=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=12),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "name",
                        "seed",
                        "time",
                        "inputs",
                        "verifiers",
                        "tools",
                        "decoding",
                        "rollouts",
                        "limits",
                        "path",
                        "sha256",
                        "type",
                        "x",
                    ]
                ),
                children,
                max_size=5,
            )
        ),
        max_leaves=20,
    )
)
def test_loader_fuzz_only_ever_raises_spec_errors(tmp_path_factory, document) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        load_spec(path)
    except SpecError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(str(path))


@given(text=st.text(max_size=200))
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_loader_fuzz_raw_text(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    path.write_text(text)
    try:
        load_spec(path)
    except SpecError as error:
        assert "\n" not in str(error)


LISTING_TOOL = """
import os
def listing(args, ctx):
    return ",".join(os.listdir("."))  # unsorted: depends on the filesystem

def policy(messages, tools, ctx):
    if messages[-1]["role"] != "tool":
        return {"tool_calls": [{"id": "c", "function": {"name": "listing", "arguments": "{}"}}]}
    return messages[-1]["content"]
"""


def test_verify_perturb_passes_clean_env_and_catches_listing_order(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(POLICY, rollouts=1)
    clean = cli("verify", str(spec), "--perturb")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert (
        "hash seed, timezone, locale, working directory, concurrency, listing order" in clean.stdout
    )
    builder = EnvBuilder(tmp_path / "leaky")
    leaky = builder.write(
        LISTING_TOOL,
        rollouts=1,
        tools=[{"name": "listing", "function": "MOD:listing"}],
        verifiers=[{"type": "regex", "pattern": "."}],
    )
    snapshot = leaky.parent / "snap"
    snapshot.mkdir()
    for name in ["delta", "alpha", "echo", "charlie", "bravo", "foxtrot"]:
        (snapshot / name).write_text(name)
    from rlenv.canonical import manifest_hash

    _edit(leaky, lambda d: d.update(snapshot={"path": "snap", "sha256": manifest_hash(snapshot)}))
    caught = cli("verify", str(leaky), "--perturb")
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "DIVERGED" in caught.stdout and "messages[2].content" in caught.stdout
