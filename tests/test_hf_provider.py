"""`hf:` policies end to end: KL to the reference in results and summary, hazards, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import EnvBuilder, cli, read_jsonl

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests import tiny_models  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    return tiny_models.build_pair(tmp_path_factory.mktemp("ckpt"), seed=0, scale=0.03)


def _spec(builder: EnvBuilder, **decoding) -> Path:
    return builder.write(
        "",
        inputs=[
            {"id": "p1", "prompt": "Hello there", "answer": "x"},
            {"id": "p2", "prompt": "What is 2+2?", "answer": "4"},
        ],
        model=None,
        decoding={"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 12, **decoding},
        verifiers=[{"type": "regex", "pattern": "[a-z]"}],
        rollouts=2,
    )


def _independent_kl(policy_dir: Path, reference_dir: Path, messages, completion_ids) -> np.ndarray:
    """KL(policy || reference) per completion token, from raw logits, in float64 numpy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(policy_dir))
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + completion_ids])
    out = []
    for directory in (policy_dir, reference_dir):
        model = AutoModelForCausalLM.from_pretrained(str(directory)).float().eval()
        with torch.no_grad():
            logits = model(ids).logits[0].double().numpy()
        rows = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(completion_ids)]
        rows = rows - rows.max(axis=-1, keepdims=True)
        out.append(rows - np.log(np.exp(rows).sum(axis=-1, keepdims=True)))
    logp, logq = out
    return (np.exp(logp) * (logp - logq)).sum(axis=-1)


def test_kl_to_reference_matches_independent_computation(
    env_builder: EnvBuilder, tmp_path: Path, pair
) -> None:
    policy, reference = pair
    spec = _spec(env_builder)
    result = cli(
        "run",
        str(spec),
        "--model",
        f"hf:{policy}",
        "--reference",
        f"hf:{reference}",
        "--out",
        str(tmp_path / "run"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    kl = summary["kl"]
    assert kl["estimator"] == "exact" and kl["mean_sequence_kl"] > 0 and kl["mean_entropy"] > 0
    assert summary["hazards"] == []
    records = read_jsonl(tmp_path / "run" / "results.jsonl")
    record = records[0]
    completion = [entry["token_id"] for entry in record["logprobs"][0]["tokens"]]
    expected = _independent_kl(policy, reference, record["messages"][:-1], completion)
    got = np.asarray(record["kl"]["per_token"]["kl"])
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert (got >= 0).all()
    k1 = np.asarray(record["kl"]["per_token"]["k1"])
    logp = np.asarray(record["kl"]["per_token"]["logprob"])
    logq = np.asarray(record["kl"]["per_token"]["ref_logprob"])
    np.testing.assert_allclose(k1, logp - logq, atol=1e-12)
    np.testing.assert_allclose(record["kl"]["sequence"]["kl_sum"], expected.sum(), rtol=1e-4)


def test_identical_models_have_zero_kl(env_builder: EnvBuilder, tmp_path: Path, pair) -> None:
    policy, _ = pair
    spec = _spec(env_builder)
    result = cli(
        "run",
        str(spec),
        "--model",
        f"hf:{policy}",
        "--reference",
        f"hf:{policy}",
        "--out",
        str(tmp_path / "same"),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    kl = json.loads(result.stdout)["kl"]
    assert kl["mean_sequence_kl"] == pytest.approx(0.0, abs=1e-9)
    assert kl["mean_k1"] == pytest.approx(0.0, abs=1e-9)


def test_hazard_warnings_on_truncated_sampling(
    env_builder: EnvBuilder, tmp_path: Path, pair
) -> None:
    policy, reference = pair
    spec = _spec(env_builder, top_k=5, top_p=0.9, temperature=0.7)
    result = cli(
        "run",
        str(spec),
        "--model",
        f"hf:{policy}",
        "--reference",
        f"hf:{reference}",
        "--out",
        str(tmp_path / "hz"),
        "--limit",
        "1",
    )
    assert result.returncode == 0, result.stderr
    assert "WARN     top_k_truncation" in result.stdout
    assert "WARN     top_p_truncation" in result.stdout
    assert "WARN     temperature_mismatch" in result.stdout
    summary = json.loads((tmp_path / "hz" / "summary.json").read_text())
    names = {hazard["name"] for hazard in summary["hazards"]}
    assert {"top_k_truncation", "top_p_truncation", "temperature_mismatch"} <= names


def test_hf_runs_are_deterministic(env_builder: EnvBuilder, pair) -> None:
    policy, _ = pair
    spec = _spec(env_builder)
    result = cli("verify", str(spec), "--model", f"hf:{policy}")
    assert result.returncode == 0, result.stdout + result.stderr


def test_bad_checkpoints_and_reference_are_user_errors(
    env_builder: EnvBuilder, tmp_path: Path, pair
) -> None:
    spec = _spec(env_builder)
    missing = cli(
        "run", str(spec), "--model", f"hf:{tmp_path / 'nope'}", "--out", str(tmp_path / "a")
    )
    assert missing.returncode == 2 and "checkpoint directory not found" in missing.stderr
    not_ckpt = tmp_path / "empty"
    not_ckpt.mkdir()
    bad = cli("run", str(spec), "--model", f"hf:{not_ckpt}", "--out", str(tmp_path / "b"))
    assert bad.returncode == 2 and "no config.json" in bad.stderr
    wrong = cli(
        "run",
        str(spec),
        "--model",
        "python:x:y",
        "--reference",
        f"hf:{pair[1]}",
        "--out",
        str(tmp_path / "c"),
    )
    assert wrong.returncode == 2 and "--reference needs an hf:PATH policy" in wrong.stderr
    for result in (missing, bad, wrong):
        assert "Traceback" not in result.stderr
