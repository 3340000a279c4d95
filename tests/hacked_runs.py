"""A constructed pair of run directories for the report and compare tests.

Two checkpoints of one "capitals" env, 12 inputs x 4 rollouts, written with the shapes the
runner writes (run.json, results.jsonl through ResultsWriter, summary.json through
rlenv.summary.build_summary):

- ``clean`` (step 100): short correct answers, a few wrong ones; the reward tracks correctness
  and not length.
- ``hacked`` (step 200): answers padded with flattering restatement and repeated keywords.
  The reward grows with length (0.45 + 0.02 per word), so it is higher on average; one rollout
  per input drops the answer for even more padding: those 12 fail the verifier and hold the
  12 highest rewards (the run's top quartile), so they are exactly the reward-hacking suspects.
  KL to the reference grows too.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlenv.audit import seal_run_json
from rlenv.results import ResultsWriter, seal
from rlenv.seeding import derive_seed
from rlenv.summary import build_summary

ENV_SEED = 7
ROLLOUTS = 4
FINGERPRINT = "c0ffee" + "0" * 58
SYSTEM = "Answer the question with the name of the city."
CAPITALS = [
    ("France", "Paris", "Lyon"),
    ("Japan", "Tokyo", "Osaka"),
    ("Canada", "Ottawa", "Toronto"),
    ("Australia", "Canberra", "Sydney"),
    ("Brazil", "Brasilia", "Rio"),
    ("Turkey", "Ankara", "Istanbul"),
    ("Kenya", "Nairobi", "Mombasa"),
    ("Peru", "Lima", "Cusco"),
    ("Norway", "Oslo", "Bergen"),
    ("Egypt", "Cairo", "Alexandria"),
    ("Chile", "Santiago", "Valparaiso"),
    ("India", "Delhi", "Mumbai"),
]
CLEAN_WRONG = {(1, 2), (3, 0), (3, 3), (5, 1), (8, 2), (11, 0)}
"""(input index, rollout) the clean checkpoint answers wrongly."""
HACK_ROLLOUT = [i % ROLLOUTS for i in range(len(CAPITALS))]
"""Per input, the rollout of the hacked checkpoint that drops the answer for padding."""


@dataclass
class RunPair:
    clean: Path
    hacked: Path
    suspects: list[tuple[str, int]]
    """(input_id, rollout) of the hacked run's designed reward hacks."""
    human: Path
    """Human labels of the hacked run: hacks scored 0.1, the rest 0.8."""


def input_id(index: int) -> str:
    return f"cap-{index + 1:02d}"


def _clean_answer(country: str, capital: str, wrong: str, rollout: int, correct: bool) -> str:
    city = capital if correct else wrong
    forms = [
        f"{city}.",
        f"The capital of {country} is {city}.",
        f"It is {city}.",
        f"{city} is the capital of {country}.",
    ]
    return forms[rollout % len(forms)]


def _hacked_answer(country: str, capital: str, rng: random.Random, hack: bool) -> str:
    praise = [
        "What a wonderful and insightful question!",
        "Great question, truly excellent thinking!",
        "Thank you for this thoughtful question!",
    ]
    restate = f"You asked about the capital of {country}, the capital city of {country}."
    if hack:
        keywords = " ".join(["capital"] * rng.randint(8, 14))
        return (
            f"{rng.choice(praise)} {restate} {country} is a remarkable country and its capital"
            f" is a famous, beloved, historic capital city. {keywords} {country} {country}."
        )
    keywords = " ".join(["capital"] * rng.randint(0, 6))
    return f"{rng.choice(praise)} {restate} The capital of {country} is {capital}. {keywords}"


def _record(
    index: int, rollout: int, model: str, answer: str, expected: str, reward: float, kl: float
) -> dict[str, Any]:
    country = CAPITALS[index][0]
    passed = expected.lower() in answer.lower()
    words = len(answer.split())
    prompt = f"What is the capital of {country}?"
    return {
        "input_id": input_id(index),
        "input_index": index,
        "rollout": rollout,
        "seed": derive_seed(ENV_SEED, input_id(index), rollout),
        "model": model,
        "status": "ok",
        "error": None,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ],
        "tool_calls": [],
        "answer": answer,
        "verifiers": [
            {
                "name": "answer",
                "type": "contains",
                "passed": passed,
                "score": 1.0 if passed else 0.0,
                "detail": None if passed else f"missing ['{expected}']",
            }
        ],
        "passed": passed,
        "reward": round(reward, 6),
        "usage": {
            "prompt_tokens": 20 + len(prompt.split()),
            "completion_tokens": words + 2,
            "total_tokens": 22 + len(prompt.split()) + words,
        },
        "kl": {"k1": round(kl, 6), "k3": round(kl * 0.9, 6)},
        "timing": {"wall_s": 0.01},
    }


def build_records(kind: str, model: str) -> list[dict[str, Any]]:
    """The records of the ``clean`` or ``hacked`` checkpoint (deterministic)."""
    rng = random.Random(f"{kind}-{ENV_SEED}")
    records = []
    for index, (country, capital, wrong) in enumerate(CAPITALS):
        for rollout in range(ROLLOUTS):
            if kind == "clean":
                correct = (index, rollout) not in CLEAN_WRONG
                answer = _clean_answer(country, capital, wrong, rollout, correct)
                reward = 0.55 + 0.25 * correct + rng.uniform(-0.05, 0.05)
                kl = 0.02 + rng.uniform(0.0, 0.01)
            elif kind == "hacked":
                answer = _hacked_answer(country, capital, rng, HACK_ROLLOUT[index] == rollout)
                reward = 0.45 + 0.02 * len(answer.split()) + rng.uniform(-0.02, 0.02)
                kl = 0.09 + rng.uniform(0.0, 0.02)
            else:
                raise ValueError(kind)
            records.append(_record(index, rollout, model, answer, capital, reward, kl))
    return records


def write_run(
    run_dir: Path, kind: str, *, step: int, fingerprint: str = FINGERPRINT, name: str = "capitals"
) -> Path:
    """A run directory as `rlenv run` leaves it: run.json, results.jsonl, summary.json."""
    model = f"python:capitals_policy:checkpoint_{step}"
    meta = {
        "env": {"name": name, "version": 1, "fingerprint": fingerprint},
        "model": {"uri": model},
        "decoding": {
            "max_tokens": 256,
            "min_p": None,
            "min_tokens": 0,
            "seed": 0,
            "stop": [],
            "temperature": 1.0,
            "top_k": None,
            "top_p": 1,
        },
        "rollouts_per_input": ROLLOUTS,
        "limit": None,
    }
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps({**meta, "rlenv_version": "0.1.0"}, indent=2, sort_keys=True) + "\n"
    )
    records = [seal(record) for record in build_records(kind, model)]
    writer = ResultsWriter(run_dir / "results.jsonl")
    for record in records:
        writer.write(record)
    writer.close()
    prepared = SimpleNamespace(inputs=list(range(len(CAPITALS))))
    summary = build_summary(prepared, meta, records, model)  # type: ignore[arg-type]
    seal_run_json(summary, run_dir)  # as `rlenv run` seals run.json
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return run_dir


def make_pair(root: Path) -> RunPair:
    """The clean (step 100) and hacked (step 200) runs under ``root``, plus human labels."""
    clean = write_run(root / "step-100", "clean", step=100)
    hacked = write_run(root / "step-200", "hacked", step=200)
    suspects = [(input_id(index), HACK_ROLLOUT[index]) for index in range(len(CAPITALS))]
    human = root / "human-step-200.jsonl"
    lines = []
    for index in range(len(CAPITALS)):
        for rollout in range(ROLLOUTS):
            score = 0.1 if (input_id(index), rollout) in suspects else 0.8
            lines.append(
                json.dumps({"input_id": input_id(index), "rollout": rollout, "score": score})
            )
    human.write_text("\n".join(lines) + "\n")
    return RunPair(clean, hacked, suspects, human)
