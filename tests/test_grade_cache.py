"""Expensive verifiers: seeded sampling, deferral to `rlenv grade`, and the grader cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlenv.results import seal
from tests.conftest import EnvBuilder, cli, read_jsonl

CODE = """
import os

def policy(messages, tools, ctx):
    word = messages[-1]["content"].split()[-1]
    return word if ctx.rollout == 0 else word.upper()

def slow_check(answer, data, ctx, counter):
    with open(counter, "a") as handle:   # counts real executions
        handle.write("x")
    return answer == data["answer"]
"""


@pytest.fixture
def env(env_builder: EnvBuilder, tmp_path: Path) -> tuple[Path, Path]:
    counter = tmp_path / "executions"
    spec = env_builder.write(
        CODE,
        inputs=[{"id": f"q{n}", "prompt": f"say w{n}", "answer": f"w{n}"} for n in range(8)],
        verifiers=[
            {"name": "cheap", "type": "regex", "pattern": "w"},
            {
                "name": "suite",
                "type": "python",
                "function": "MOD:slow_check",
                "cost": "expensive",
                "options": {"counter": str(counter)},
            },
        ],
        rollouts=2,
    )
    return spec, counter


def _executions(counter: Path) -> int:
    return len(counter.read_text()) if counter.exists() else 0


def _run(spec: Path, out: Path, cache: Path, *extra: str) -> dict:
    # the verifier counts its executions in a file beside the cache: a place the world may
    # write (a worker's own /tmp is an overlay: what it writes there the test would not see)
    shared = {"RLENV_CACHE_DIR": str(cache), "RLENV_WORLD_SHARED": str(cache.parent)}
    result = cli("run", str(spec), "--out", str(out), "--json", *extra, env=shared)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_cache_skips_work_and_gives_the_same_digest(env, tmp_path: Path) -> None:
    spec, counter = env
    cache = tmp_path / "cache"
    first = _run(spec, tmp_path / "a", cache)
    assert _executions(counter) == 16
    assert first["grading"]["grader_cache"] == {"hits": 0, "misses": 16}
    second = _run(spec, tmp_path / "b", cache)
    assert _executions(counter) == 16, "every grade came from the cache"
    assert second["grading"]["grader_cache"] == {"hits": 16, "misses": 0}
    assert second["digest"] == first["digest"]
    uncached = _run(spec, tmp_path / "c", cache, "--no-grader-cache")
    assert _executions(counter) == 32 and uncached["digest"] == first["digest"]


def test_seeded_sampling_of_expensive_verifiers(env, tmp_path: Path) -> None:
    spec, counter = env
    half = _run(spec, tmp_path / "h1", tmp_path / "c1", "--expensive-fraction", "0.5")
    again = _run(spec, tmp_path / "h2", tmp_path / "c2", "--expensive-fraction", "0.5")
    assert half["digest"] == again["digest"], "the sample is seeded"
    records = read_jsonl(tmp_path / "h1" / "results.jsonl")
    suite = [next(v for v in r["verifiers"] if v["name"] == "suite") for r in records]
    skipped = [v for v in suite if v["passed"] is None]
    assert 0 < len(skipped) < 16 and all(v["detail"] == "not sampled" for v in skipped)
    assert half["verifiers"]["suite"]["n"] == 16 - len(skipped)
    assert half["verifiers"]["cheap"]["n"] == 16


def test_deferred_then_graded_equals_inline(env, tmp_path: Path) -> None:
    spec, counter = env
    inline = _run(spec, tmp_path / "inline", tmp_path / "c0", "--no-grader-cache")
    deferred = _run(spec, tmp_path / "later", tmp_path / "c1", "--defer-expensive")
    assert deferred["grading"]["pending_rollouts"] == 16
    assert deferred["digest"] != inline["digest"]
    graded = cli("grade", str(tmp_path / "later"), env={"RLENV_CACHE_DIR": str(tmp_path / "c1")})
    assert graded.returncode == 0, graded.stderr
    assert "graded 16 rollouts (0 grades from the cache)" in graded.stdout
    summary = json.loads((tmp_path / "later" / "summary.json").read_text())
    assert summary["digest"] == inline["digest"]
    assert summary["grading"]["pending_rollouts"] == 0
    again = cli("grade", str(tmp_path / "later"))
    assert again.returncode == 0 and "graded 0 rollouts" in again.stdout


def test_grade_refuses_mixed_models_and_changed_env(env, tmp_path: Path) -> None:
    spec, _ = env
    _run(spec, tmp_path / "d", tmp_path / "c", "--defer-expensive")
    results = tmp_path / "d" / "results.jsonl"
    lines = results.read_text().splitlines()
    record = json.loads(lines[0])
    record["model"] = "python:someone.else:policy"
    record = seal(record)  # a self-consistent record of another model (an edit is refused)
    results.write_text("\n".join([json.dumps(record)] + lines[1:]) + "\n")
    mixed = cli("grade", str(tmp_path / "d"))
    # refused by the reader every command uses: the records no longer give summary.json's digest
    assert mixed.returncode == 2 and "summary.json: digest is" in mixed.stderr, mixed.stderr
    results.write_text("\n".join(lines) + "\n")
    module = next(spec.parent.glob("envmod_*.py"))
    module.write_text(module.read_text() + "\n# changed\n")
    changed = cli("grade", str(tmp_path / "d"))
    assert changed.returncode == 2 and "the env changed since this run" in changed.stderr


def test_verify_compares_cached_and_uncached_grades(env) -> None:
    spec, _ = env
    result = cli("verify", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical: 3 runs" in result.stdout
    assert (
        "grader cache: uncached (0 cached grades), cache filled (0 cached grades),"
        " cache hits (16 cached grades)" in result.stdout
    )
