"""What `rlenv run` writes per rollout, pinned (issue 30, "lines"): the orchestrator encodes
each record once and tallies it from the parts it encoded, and what comes out must stay what
it was. The digests of a fixed run are pinned to values taken from main before that change,
and results.jsonl and summary.json are checked against slow, independent references: each
line is what ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` writes
of it, every digest is ``rfc8785.dumps`` hashed, and summary.json is the summary every later
reader rebuilds from results.jsonl (``rlenv check``).

The env's records hold what the fast paths must get right: floats RFC 8785 writes unlike
``repr`` (1.0, 1e-07, 1e+22, -0.0), small ones ``repr`` writes with an exponent (3.9e-05),
text that looks like numbers, a 17-digit run, non-ASCII, characters beyond U+FFFF (in text
and in a mapping key), control characters, a tool call, a policy error and reward scores.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from rlenv.results import MODEL_SCORES, VOLATILE_FIELDS
from tests.conftest import EnvBuilder, cli

CODE = r"""
import json
import random

SCORES = [1.0, 0.0, 0.5, 1e-07, 3.9e-05, 1e22, 123456789.0, -0.0, 0.0001, 1e16, 2.5e-05, 7.0]
ANSWERS = [
    "a", "caf\u00e9 \u00fcber", "smile \U0001F600", "ctl \x01\x1f \u2028 \"q\" \\ /",
    "ratio:1.0,[2e5", "n 12345678901234567", "1.5e-07", "tab\there",
]


def policy(messages, tools, ctx):
    last = messages[-1]
    if last.get("role") == "tool":
        return "tool said " + last["content"]
    n = int(last["content"].split()[-1])
    if n == 5:
        raise RuntimeError("policy fell over \u00e9")
    if n == 3:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{
                "id": "call_0",
                "type": "function",
                "function": {"name": "t", "arguments": json.dumps({"x": 1.0, "\U0001F600": "k"})},
            }],
        }
    return ANSWERS[(n + random.randrange(3)) % len(ANSWERS)]


def tool(args, ctx):
    return {"echo": args, "f": 2.5e-05, "big": 1e22}


def _check(answer, data, offset):
    n = int(data["id"][1:])
    score = SCORES[(n * 3 + offset) % len(SCORES)]
    return {"passed": n % 2 == 0, "score": score, "detail": f"d{n} \u00e9"}


def check0(answer, data, ctx):
    return _check(answer, data, 0)


def check1(answer, data, ctx):
    return _check(answer, data, 1)


def check2(answer, data, ctx):
    return _check(answer, data, 2)


def reward(prompt, answer, ctx):
    return [0.1, 1e-07, 2.0, 3.9e-05, 0.75][len(answer or "") % 5]
"""

INPUTS = [{"id": f"i{n}", "prompt": f"say {n}", "answer": "a"} for n in range(8)]

# taken from main at c4d62f1, before the orchestrator encoded each record once (the summary's
# bytes hold rlenv's version: a release changes that pin, and only that one); summary.json's
# hash leaves its run.json digest out (run.json names the spec's temp path) and rounds its
# floats; the summary pin was taken again from main at 9b01be6 on another CPU
PINNED_DIGEST = "7ca8a1493d3729f3d92d72778c9fa93f54ce2258c833f4a1b945d257c7422e3f"
PINNED_OUTCOME = "6c4456ad11eacb337db4378a22831994fc3d985312537c7cbc569bcb8a678ce9"
PINNED_SUMMARY = "7671fc5084cbbc28365dca98cb13ed2afcf49847630efe4e6e77c4db23b2b599"


@pytest.fixture(scope="module")
def pinned_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lines")
    builder = EnvBuilder(root / "env")
    builder.module = "pinned_lines_env"  # the model URI is in every record: fixed
    spec = builder.write(
        CODE,
        inputs=INPUTS,
        rollouts=3,
        verifiers=[
            {"name": f"v{k}", "type": "python", "function": f"MOD:check{k}"} for k in range(3)
        ],
        reward_model={"function": f"{builder.module}:reward"},
        tools=[{"name": "t", "function": "MOD:tool", "parameters": {"type": "object"}}],
    )
    out = root / "run"
    result = cli("run", str(spec), "--out", str(out), "--json", "--concurrency", "3")
    assert result.returncode == 0, result.stderr
    return out


def _lines(run: Path) -> list[bytes]:
    return (run / "results.jsonl").read_bytes().splitlines()


def _ordered(run: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in _lines(run)]
    return sorted(records, key=lambda r: (r["input_index"], r["input_id"], r["rollout"]))


def _reference_digest(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def test_the_run_holds_what_the_fast_paths_must_get_right(pinned_run: Path) -> None:
    text = (pinned_run / "results.jsonl").read_text()
    for fragment in ("1e-07", "3.9e-05", "1e+22", "-0.0", "\U0001f600", "\\u0001", '"fixture"'):
        assert fragment in text, fragment
    statuses = {record["status"] for record in _ordered(pinned_run)}
    assert statuses == {"ok", "policy_error"}, statuses


def test_each_line_is_the_reference_encoding_of_itself(pinned_run: Path) -> None:
    for line in _lines(pinned_run):
        record = json.loads(line)
        reference = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert line == reference.encode(), line


def test_digests_are_the_pinned_ones_and_the_references(pinned_run: Path) -> None:
    records = _ordered(pinned_run)
    for record in records:  # each record's own digest, by the reference serialiser
        stable = {k: v for k, v in record.items() if k not in VOLATILE_FIELDS}
        assert record["digest"] == _reference_digest(stable)
    outcomes = [
        _reference_digest(
            {k: v for k, v in r.items() if k not in VOLATILE_FIELDS and k not in MODEL_SCORES}
        )
        for r in records
    ]
    summary = json.loads((pinned_run / "summary.json").read_text())
    run_digest = hashlib.sha256("\n".join(r["digest"] for r in records).encode()).hexdigest()
    outcome_digest = hashlib.sha256("\n".join(outcomes).encode()).hexdigest()
    assert (summary["digest"], summary["outcome_digest"]) == (run_digest, outcome_digest)
    assert (run_digest, outcome_digest) == (PINNED_DIGEST, PINNED_OUTCOME)


def test_summary_json_is_byte_for_byte_the_pinned_one(pinned_run: Path) -> None:
    """Byte for byte but for the last bits of its floats, which numpy computes otherwise on
    another machine (the first pin, taken on another CPU, failed on an AMD EPYC with main's
    code: CI runs on either): each float is pinned to 12 significant digits."""
    text = (pinned_run / "summary.json").read_bytes()
    pathless = re.sub(rb'\n  "run_json_digest": "[0-9a-f]{64}",', b"", text)
    assert pathless != text
    assert hashlib.sha256(_floats_rounded(pathless)).hexdigest() == PINNED_SUMMARY


def _floats_rounded(text: bytes) -> bytes:
    return _FLOAT.sub(lambda found: format(float(found[0]), ".12g").encode(), text)


_FLOAT = re.compile(rb"-?[0-9]+(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)")


def test_the_summary_is_the_one_a_reader_rebuilds(pinned_run: Path) -> None:
    """`rlenv check` recomputes summary.json from results.jsonl (each digest from content,
    every figure through the reader's path, not the writer's) and compares it whole."""
    checked = cli("check", str(pinned_run))
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
