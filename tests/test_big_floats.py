"""Integral floats beyond 2**53: what rlenv writes canonically it reads back.

RFC 8785 writes a double the way ECMAScript does, so an integral double in [2**53, 1e21) comes
out as an integer literal (1e20 -> 100000000000000000000). rlenv's own files (summary.json,
run.json) hold that form, and the strict reader used to refuse it as an integer beyond
+/-(2**53 - 1): a run whose reward model scored 1e20 could not be checked, reported, compared
or resumed. A user's own file with such an integer is still refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlenv.canonical import canonical_bytes, sha256_file, sha256_json
from rlenv.jsonl import parse_json_line
from tests.conftest import EnvBuilder, cli

BIG_FLOATS = [
    2.0**53 + 2,
    1e20,
    1e21,
    -1e22,
    9007199254740993.0,  # rounds to 2**53 as a literal; a double all the same
    2.0**64,  # ES writes 18446744073709552000, not the exact 18446744073709551616
    123456789012345680000.0,
    -(2.0**60),
]


@pytest.mark.parametrize("number", BIG_FLOATS)
def test_own_files_read_back_every_big_integral_float(number: float) -> None:
    """What the canonical writer makes of a float, the reader of rlenv's files reads as that
    float, and it canonicalises to the same bytes again (so digests over it do not move)."""
    text = canonical_bytes({"value": number, "nested": [number, {"x": number}]}).decode()
    value = parse_json_line(text, own_file=True)
    assert value == {"value": number, "nested": [number, {"x": number}]}
    assert type(value["value"]) is float and type(value["nested"][1]["x"]) is float
    assert canonical_bytes(value).decode() == text


PINNED = {  # canonical bytes of floats as every rlenv so far has written them (digests hash these)
    2.0**53 + 2: "9007199254740994",
    1e20: "100000000000000000000",
    1e21: "1e+21",
    -1e22: "-1e+22",
    9007199254740993.0: "9007199254740992",
    2.0**64: "18446744073709552000",
    0.5: "0.5",
    1.0: "1",
}


def test_canonical_number_bytes_are_pinned() -> None:
    for number, written in PINNED.items():
        assert canonical_bytes(number).decode() == written, number
    assert (
        sha256_json({"reward": 1e20, "score": 2.0**53 + 2, "n": 3})
        == "1506fd3eca51db337176e275ff6eb6532aaf35319def47434996c43deb886b40"
    )


@pytest.mark.parametrize(
    "literal",
    [
        "9007199254740993",  # 2**53 + 1: no double is this integer
        "18446744073709551616",  # 2**64 exactly: a double, but not how ES writes it
        "100000000000000000001",
        "1" + "0" * 400,
        "-12345678901234567890",
    ],
)
def test_an_integer_that_no_double_is_written_as_stays_refused(literal: str) -> None:
    for own in (False, True):
        with pytest.raises(ValueError, match="outside"):
            parse_json_line(f'{{"n": {literal}}}', own_file=own)


def test_users_integer_literal_is_refused_even_in_es_form() -> None:
    """A user's file: an integer literal beyond 2**53 is an integer (an id, a count), refused
    as before, even when it happens to be how ES writes some double."""
    with pytest.raises(ValueError, match="integer with 21 digits"):
        parse_json_line('{"n": 100000000000000000000}')
    assert parse_json_line('{"n": 1e+20}') == {"n": 1e20}  # a float written as one is a float
    assert parse_json_line('{"n": 9007199254740991}', own_file=True) == {"n": 2**53 - 1}
    assert type(parse_json_line('{"n": 9007199254740991}', own_file=True)["n"]) is int


def test_other_strictness_of_own_files_is_kept() -> None:
    for bad, reason in [
        ('{"x": NaN}', "NaN"),
        ('{"x": Infinity}', "Infinity"),
        ("[" * 70 + "]" * 70, "nested"),
    ]:
        with pytest.raises(ValueError, match=reason):
            parse_json_line(bad, own_file=True)


# --- a real run whose reward model scores 1e20 .. 1e22 ------------------------------------

ENV_CODE = """
def policy(messages, tools, ctx):
    return "a" * (1 + len(messages[-1]["content"]) % 3)

def score(prompt, answer, ctx, **options):
    return {1: 1e20, 2: 2.0**53 + 2, 3: 1e22}[len(answer or "")] * 3
"""


@pytest.fixture(scope="module")
def big_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    builder = EnvBuilder(tmp_path_factory.mktemp("bigenv"))
    inputs = [{"id": f"i{n}", "prompt": "say " + "x" * n, "answer": "a"} for n in range(4)]
    return builder.write(
        ENV_CODE, inputs=inputs, reward_model={"function": f"{builder.module}:score"}
    )


@pytest.fixture(scope="module")
def big_runs(big_env: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bigruns")
    runs = (root / "one", root / "two")
    for out in runs:
        done = cli("run", str(big_env), "--out", str(out), "--json", cwd=big_env.parent)
        assert done.returncode == 0, done.stderr
    return runs


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_run_with_big_rewards_is_checked_reported_and_compared(
    big_runs: tuple[Path, Path],
) -> None:
    one, two = big_runs
    text = (one / "summary.json").read_text()
    assert "300000000000000000000" in text  # the ES form the reader has to take
    assert _summary(one)["digest"] == _summary(two)["digest"]
    assert _summary(one)["outcome_digest"] == _summary(two)["outcome_digest"]
    for run in big_runs:
        done = cli("check", str(run))
        assert done.returncode == 0, done.stderr
        assert _summary(run)["digest"] in done.stdout
    done = cli("report", str(one), "--json")
    assert done.returncode == 0, done.stderr
    done = cli("compare", str(one), str(two), "--out", str(one.parent / "compared"))
    assert done.returncode == 0, done.stderr


def test_interrupted_run_with_big_rewards_resumes_to_the_same_digest(
    big_env: Path, big_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    one, _ = big_runs
    cut = tmp_path / "cut"
    shutil.copytree(one, cut)
    (cut / ".rlenv.lock").unlink(missing_ok=True)
    lines = (cut / "results.jsonl").read_text().splitlines(keepends=True)
    (cut / "results.jsonl").write_text("".join(lines[:3]))
    (cut / "summary.json").unlink()
    done = cli("run", str(big_env), "--out", str(cut), "--resume", cwd=big_env.parent)
    assert done.returncode == 0, done.stderr
    assert _summary(cut)["digest"] == _summary(one)["digest"]
    done = cli("check", str(cut))
    assert done.returncode == 0, done.stderr


def test_users_input_with_a_huge_integer_is_still_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """What happened before the fix still happens: the run is refused, exit 2, one line
    naming file:line, nothing written."""
    builder = EnvBuilder(tmp_path / "env")
    spec = builder.write(ENV_CODE)
    inputs = spec.parent / "inputs.jsonl"
    inputs.write_text(
        '{"id": "a", "prompt": "say a", "answer": "a"}\n'
        '{"id": "b", "prompt": "say b", "answer": "b", "n": 100000000000000000000}\n'
    )
    document = yaml.safe_load(spec.read_text())
    document["inputs"]["sha256"] = sha256_file(inputs)
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    out = tmp_path / "out"
    done = cli("run", str(spec), "--out", str(out), cwd=spec.parent)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "inputs.jsonl:2" in done.stderr and "integer with 21 digits" in done.stderr
    assert not out.exists()


DATASET_POLICY = """
def policy(messages, tools, ctx):
    return messages[-1]["content"]
"""


def test_dataset_rows_with_a_big_float_column_are_read_back(
    tmp_path: Path,
) -> None:
    """A datasets split's rows are written as canonical JSON (pinned by their hash): a float
    column's 1e20 becomes 100000000000000000000, and the inputs reader (orchestrator and
    worker) takes it as the float it was, not as an integer to refuse."""
    datasets = pytest.importorskip("datasets")
    builder = EnvBuilder(tmp_path / "env")
    spec = builder.write(DATASET_POLICY, rollouts=1, prompt={"template": "{{ weight }}"})
    rows = [  # the template renders the float 1e20 as 1e+20, an integer as all its digits
        {"id": "big", "answer": "1e+20", "weight": 1e20},
        {"id": "half", "answer": "0.5", "weight": 0.5},
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(spec.parent / "data"))
    document = yaml.safe_load(spec.read_text())
    document["inputs"] = {"dataset": {"path": "data", "split": "train"}, "sha256": "0" * 64}
    spec.write_text(yaml.safe_dump(document, sort_keys=False))
    env = {"RLENV_CACHE_DIR": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf")}
    assert cli("pin", str(spec), env=env).returncode == 0
    out = tmp_path / "out"
    done = cli("run", str(spec), "--out", str(out), "--json", env=env, cwd=spec.parent)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pass_rate"]["passed"] == 2, summary["pass_rate"]


@settings(max_examples=400, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_double_reads_back_from_its_canonical_form(number: float) -> None:
    text = canonical_bytes([number]).decode()
    (value,) = parse_json_line(text, own_file=True)
    assert value == number and canonical_bytes([value]).decode() == text


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=2**53, max_value=10**22) | st.integers(max_value=-(2**53)))
def test_an_integer_past_2_53_is_taken_only_as_the_double_written_so(number: int) -> None:
    text = f"[{number}]"
    with pytest.raises(ValueError, match="outside"):
        parse_json_line(text)
    if canonical_bytes(float(number)).decode() == str(number):
        assert parse_json_line(text, own_file=True) == [float(number)]
    else:
        with pytest.raises(ValueError, match="outside"):
            parse_json_line(text, own_file=True)
