"""Malformed specs: each gets one line naming file, line and field, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import EnvBuilder, cli, sha256

GOOD_POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"].split()[-1]
"""


def _mutate(spec_path: Path, change) -> None:
    document = yaml.safe_load(spec_path.read_text())
    change(document)
    spec_path.write_text(yaml.safe_dump(document, sort_keys=False))


CASES = [
    # (id, how to break the spec, expected fragment of the one-line message, expected line?)
    ("unknown-top-key", lambda d: d.update(sed=1), "sed: unknown key", True),
    (
        "unknown-nested-key",
        lambda d: d["verifiers"][0].update(expectd="x"),
        "verifiers[0].expectd: unknown key",
        True,
    ),
    ("missing-seed", lambda d: d.pop("seed"), "seed: required field is missing", False),
    (
        "seed-wrong-type",
        lambda d: d.update(seed="abc"),
        "seed: Input should be a valid integer",
        True,
    ),
    (
        "time-without-zone",
        lambda d: d.update(time="2024-03-01T12:00:00"),
        "time: frozen time needs a zone",
        True,
    ),
    (
        "time-garbage",
        lambda d: d.update(time="yesterday"),
        "time: Input should be a valid datetime",
        True,
    ),
    (
        "negative-temperature",
        lambda d: d.update(decoding={"temperature": -1}),
        "decoding.temperature: Input should be greater than or equal to 0",
        True,
    ),
    (
        "top-p-above-one",
        lambda d: d.update(decoding={"top_p": 1.5}),
        "decoding.top_p: Input should be less than or equal to 1",
        True,
    ),
    (
        "bad-verifier-type",
        lambda d: d["verifiers"][0].update(type="fuzzy"),
        "verifiers[0].type",
        True,
    ),
    (
        "regex-without-pattern",
        lambda d: d.update(verifiers=[{"type": "regex"}]),
        "verifier of type 'regex' needs 'pattern'",
        True,
    ),
    (
        "no-verifiers",
        lambda d: d.update(verifiers=[]),
        "verifiers: List should have at least 1 item",
        True,
    ),
    (
        "bad-sha-format",
        lambda d: d["inputs"].update(sha256="xyz"),
        "inputs.sha256: String should match pattern",
        True,
    ),
    (
        "rollouts-zero",
        lambda d: d.update(rollouts=0),
        "rollouts: Input should be greater than or equal to 1",
        True,
    ),
    (
        "bad-tool-ref",
        lambda d: d.update(tools=[{"name": "t", "function": "not a ref"}]),
        "tools[0].function: String should match pattern",
        True,
    ),
    (
        "duplicate-tools",
        lambda d: d.update(
            tools=[{"name": "t", "function": "m:f"}, {"name": "t", "function": "m:g"}]
        ),
        "duplicate tool name(s): t",
        False,
    ),
    ("bad-name", lambda d: d.update(name="has spaces"), "name: String should match pattern", True),
]


@pytest.mark.parametrize("case_id,change,fragment,has_line", CASES, ids=[c[0] for c in CASES])
def test_malformed_spec(env_builder: EnvBuilder, case_id, change, fragment, has_line) -> None:
    spec = env_builder.write(GOOD_POLICY)
    _mutate(spec, change)
    result = cli("validate", str(spec))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rlenv: error: {spec}"), lines[0]
    assert fragment in lines[0], lines[0]
    if has_line:
        assert f"{spec}:" in lines[0] and lines[0].split(f"{spec}:")[1].split(":")[0].isdigit()


def test_line_number_points_at_the_field(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(GOOD_POLICY)
    text = spec.read_text().replace("rollouts: 2", "rollouts: 2\nrolouts: 3")
    spec.write_text(text)
    line = text.splitlines().index("rolouts: 3") + 1
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert f"{spec}:{line}: rolouts: unknown key" in result.stderr


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("name: [unclosed", "invalid YAML"),
        ("", "spec is empty"),
        ("- a\n- b\n", "expected a mapping of fields at the top level"),
    ],
)
def test_unparseable_yaml(tmp_path: Path, content: str, fragment: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(content)
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert fragment in result.stderr and "Traceback" not in result.stderr


def test_missing_spec_and_directory(tmp_path: Path) -> None:
    missing = cli("validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "spec file not found" in missing.stderr
    directory = cli("validate", str(tmp_path))
    assert directory.returncode == 2 and "is a directory" in directory.stderr


def test_hash_mismatch_refused_before_any_policy_call(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    marker = tmp_path / "policy-was-called"
    spec = env_builder.write(
        f"""
def policy(messages, tools, ctx):
    open({str(marker)!r}, "w").write("called")
    return "x"
"""
    )
    inputs = spec.parent / "inputs.jsonl"
    inputs.write_text(inputs.read_text() + '{"id": "c", "prompt": "say c", "answer": "c"}\n')
    result = cli("run", str(spec), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "inputs.sha256: hash mismatch for inputs.jsonl" in result.stderr
    assert f"{spec}:" in result.stderr
    assert not marker.exists()
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "lines,fragment",
    [
        (
            ['{"id": "a", "prompt": "x"}', '{"id": "a", "prompt": "y"}'],
            "duplicate input id 'a' (first on line 1)",
        ),
        (['{"id": "a", "prompt": "x"}', "{not json"], "inputs.jsonl:2: invalid JSON"),
        (['{"prompt": "x"}'], "inputs.jsonl:1: each input needs an 'id'"),
        (['{"id": "a"}'], "needs a 'prompt' string or a 'messages' list"),
        ([], "inputs file has no records"),
    ],
)
def test_bad_inputs(env_builder: EnvBuilder, lines: list[str], fragment: str) -> None:
    spec = env_builder.write(GOOD_POLICY)
    inputs = spec.parent / "inputs.jsonl"
    inputs.write_text("".join(line + "\n" for line in lines))
    _mutate(spec, lambda d: d["inputs"].update(sha256=sha256(inputs)))
    result = cli("validate", str(spec))
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and "Traceback" not in result.stderr


def test_unimportable_tool_and_verifier(env_builder: EnvBuilder) -> None:
    spec = env_builder.write(GOOD_POLICY, tools=[{"name": "t", "function": "no_such_module_xyz:f"}])
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert "tools[0].function: cannot import module 'no_such_module_xyz'" in result.stderr
    spec = env_builder.write(GOOD_POLICY, verifiers=[{"type": "python", "function": "MOD:missing"}])
    result = cli("validate", str(spec))
    assert result.returncode == 2
    assert "has no 'missing'" in result.stderr


def test_valid_spec_prints_fingerprint_and_it_tracks_files(env_builder: EnvBuilder) -> None:
    # the module is a tool's as well as the policy's: env code, so the fingerprint tracks it
    tool = "\ndef tool(args, ctx):\n    return 'x'\n"
    spec = env_builder.write(GOOD_POLICY + tool, tools=[{"name": "t", "function": "MOD:tool"}])
    first = cli("validate", str(spec))
    assert first.returncode == 0, first.stderr
    assert "fingerprint" in first.stdout
    again = cli("validate", str(spec))
    assert again.stdout == first.stdout
    (spec.parent / f"{env_builder.module}.py").write_text(GOOD_POLICY + tool + "\n# changed\n")
    changed = cli("validate", str(spec))
    assert changed.returncode == 0
    assert changed.stdout.split("fingerprint")[1] != first.stdout.split("fingerprint")[1]
