"""What the metrics keep of a record (rlenv.results), in process: which parts of the env a
rollout exercised and which failed (`components`), the compact row kept per rollout
(`compact_for_metrics`, `CompactRecord`) and the outcome digest that leaves scores out. Part of
the mutation run's fast set for rlenv/results.py."""

from __future__ import annotations

from typing import Any

import pytest

from rlenv.canonical import canonical_bytes, sha256_bytes
from rlenv.results import (
    VERIFIER_ERROR,
    CompactRecord,
    compact_for_metrics,
    components,
    outcome,
    outcome_digest,
    run_outcome_digest,
    seal,
    unpacked,
)


def failure(component: str, error: Any, frames: list[str] | None = None) -> dict[str, Any]:
    return {"component": component, "error": error, "traceback": frames or []}


def test_an_endpoint_failure_is_the_only_part() -> None:
    record = {"status": "infra_error", "error": "down", "traceback": ["f1"], "reward": 1.0}
    assert components(record) == (("endpoint",), [failure("endpoint", "down", ["f1"])])


@pytest.mark.parametrize(
    ("status", "part"),
    [
        ("policy_error", "policy"),
        ("model_error", "model output"),
        ("timeout", "timeout"),
        ("fixture_miss", "fixtures"),
    ],
)
def test_a_status_blames_its_part(status: str, part: str) -> None:
    ran, failed = components({"status": status, "error": "e", "traceback": None})
    assert ran == ("endpoint", "policy", "model output", "timeout", "fixtures")
    assert failed == [failure(part, "e")]


def test_every_part_a_healthy_rollout_exercised() -> None:
    record = {
        "status": "ok",
        "tool_calls": [{"name": "search", "error": None}, {"name": "calc"}],
        "verifiers": [
            {"name": "exact", "passed": True, "detail": None},
            {"name": "judge", "passed": None, "detail": "pending"},  # not graded: not a part
        ],
        "reward": 0.5,
    }
    ran, failed = components(record)
    assert ran == (
        "endpoint",
        "policy",
        "model output",
        "timeout",
        "fixtures",
        "tool search",
        "tool calc",
        "verifier exact",
        "reward model",
    )
    assert failed == []
    assert components({"status": "ok"}) == (
        ("endpoint", "policy", "model output", "timeout", "fixtures"),
        [],
    )


def test_a_tool_a_verifier_and_the_reward_model_blame_themselves() -> None:
    record = {
        "status": "ok",
        "tool_calls": [{"name": "search", "error": "boom", "traceback": ["t"]}],
        "verifiers": [
            {
                "name": "v",
                "passed": False,
                "detail": VERIFIER_ERROR + "KeyError: x",
                "traceback": ["v1"],
            }
        ],
        "reward": None,
        "reward_error": "rm down",
        "reward_traceback": ["r1"],
    }
    ran, failed = components(record)
    assert ran[-3:] == ("tool search", "verifier v", "reward model")
    assert failed == [
        failure("tool search", "boom", ["t"]),
        failure("verifier v", VERIFIER_ERROR + "KeyError: x", ["v1"]),
        failure("reward model", "rm down", ["r1"]),
    ]
    wrong = {"status": "ok", "verifiers": [{"name": "v", "passed": False, "detail": "no match"}]}
    assert components(wrong)[1] == []  # a failed verdict is not a failed part


def test_a_crashed_tool_or_verifier_is_named_from_the_error() -> None:
    tool = {"status": "tool_error", "error": "tool lookup: ValueError: bad", "traceback": ["x"]}
    ran, failed = components(tool)
    assert ran[-1] == "tool lookup" and failed == [failure("tool lookup", tool["error"], ["x"])]
    unnamed = {"status": "tool_error", "error": "it broke"}
    assert components(unnamed)[0][-1] == "tool ?"
    assert components({"status": "tool_error", "error": "tool x"})[0][-1] == "tool ?"
    assert components({"status": "tool_error", "error": None})[0][-1] == "tool ?"
    verifier = {"status": "verifier_error", "error": "verifier exact: SystemExit: 1"}
    ran, failed = components(verifier)
    assert ran[-1] == "verifier exact" and failed == [failure("verifier exact", verifier["error"])]
    assert components({"status": "verifier_error", "error": "tool x: y"})[0][-1] == "verifier ?"


def record(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "input_id": "q1",
        "input_index": 3,
        "rollout": 1,
        "status": "ok",
        "passed": True,
        "reward": 0.75,
        "answer": "42",
        "verifiers": [{"name": "exact", "passed": True, "score": 1.0, "detail": None}],
        "usage": {"completion_tokens": 7, "prompt_tokens": 3},
        "kl": {"k1": 0.1},
        "rewards": {"total": 0.75},
        "messages": [{"role": "user", "content": "long"}],
    }
    return seal({**base, **extra})


def test_a_compact_row_holds_what_the_metrics_read() -> None:
    full = record()
    row = compact_for_metrics(full, {})
    assert isinstance(row, CompactRecord)
    assert dict(row) == {
        "input_id": "q1",
        "input_index": 3,
        "rollout": 1,
        "status": "ok",
        "passed": True,
        "reward": 0.75,
        "answer": "42",
        "verifiers": [{"name": "exact", "passed": True}],
        "components": (
            (
                "endpoint",
                "policy",
                "model output",
                "timeout",
                "fixtures",
                "verifier exact",
                "reward model",
            ),
            (),
        ),
        "usage": {"completion_tokens": 7},
        "kl": {"k1": 0.1},
        "rewards": {"total": 0.75},
    }
    assert len(row) == 12 and list(row)[-3:] == ["usage", "kl", "rewards"]
    assert row["usage"] == {"completion_tokens": 7} and row.get("kl") == {"k1": 0.1}
    assert "usage" in row and "messages" not in row and 3 not in row
    assert row.get("messages", "absent") == "absent" and row.get("input_id") == "q1"
    with pytest.raises(KeyError):
        row["messages"]
    assert unpacked(row.digest) == full["digest"] and isinstance(row.digest, bytes)
    assert unpacked(row.outcome) == outcome_digest(full)
    assert repr(row).startswith("CompactRecord({'input_id': 'q1', 'input_index': 3")


def test_a_compact_row_without_the_optional_fields() -> None:
    bare = {"input_id": 7, "rollout": "2", "verifiers": None, "digest": "not-hex"}
    row = compact_for_metrics(bare, {})
    assert row.input_id == "7" and row.input_index == 0 and row.rollout == 2
    assert list(row) == [
        "input_id",
        "input_index",
        "rollout",
        "status",
        "passed",
        "reward",
        "answer",
        "verifiers",
        "components",
    ]
    assert len(row) == 9 and "usage" not in row and "kl" not in row and "rewards" not in row
    assert row.get("usage") is None and row.get("kl", "none") == "none"
    for key in ("usage", "kl", "rewards"):
        with pytest.raises(KeyError):
            row[key]
    zero = compact_for_metrics({**bare, "usage": {"completion_tokens": 0}}, {})
    assert "usage" not in zero  # no tokens counted: no usage
    assert row.digest == "not-hex" and unpacked(row.digest) == "not-hex"
    upper = "A" * 64  # hex, but not as written: kept as text
    assert compact_for_metrics({**bare, "digest": upper}, {}).digest == upper
    assert compact_for_metrics({**bare, "digest": "g" * 64}, {}).digest == "g" * 64
    assert row.verifiers == []


def test_rows_share_what_repeats() -> None:
    shared: dict[Any, Any] = {}
    down = {"status": "infra_error", "error": "down", "traceback": ["f"]}
    first = compact_for_metrics(record(rollout=0, **down), shared)
    second = compact_for_metrics(record(rollout=1, **down), shared)
    assert first.answer is second.answer and first.verifiers is second.verifiers
    assert first.components[1][0] is second.components[1][0]  # one failure object
    assert first.components[0] is second.components[0]
    healthy = [compact_for_metrics(record(rollout=n), shared) for n in (2, 3)]
    assert healthy[0].components is healthy[1].components
    odd = compact_for_metrics(
        record(rollout=4, status="infra_error", error=["un", "hashable"]), shared
    )
    assert odd.components[1] == (failure("endpoint", ["un", "hashable"]),)
    numbers = compact_for_metrics(record(rollout=5, answer=1), shared)
    assert numbers.answer == 1 and 1 not in shared  # only strings are shared


def test_the_outcome_leaves_scores_out() -> None:
    full = record()
    kept = outcome(full)
    assert not {"reward", "rewards", "kl", "logprobs", "digest"} & set(kept)
    assert kept["answer"] == "42" and kept["passed"] is True
    assert outcome_digest(full) == sha256_bytes(canonical_bytes(kept))
    rescored = seal({**full, "reward": 0.1, "rewards": {"total": 0.1}, "kl": None})
    assert outcome_digest(rescored) == outcome_digest(full)
    assert outcome_digest(seal({**full, "answer": "41"})) != outcome_digest(full)
    records = [record(rollout=0), record(rollout=1, answer="x")]
    assert run_outcome_digest(records) == run_outcome_digest(list(reversed(records)))
    assert run_outcome_digest(records) != run_outcome_digest(records[:1])
    assert run_outcome_digest([]) != run_outcome_digest(records[:1])
