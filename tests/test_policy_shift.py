"""Policy shift on real tiny GPT-2 checkpoints built in the test (no downloads).

The reference is a randomly initialised 2-layer GPT-2 with a character-level tokenizer; the
policy is the same model with seeded weight noise (per-token KL about 0.2 nats).
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rlenv.policy_shift import (  # noqa: E402
    HFModel,
    VocabularyMismatchError,
    aggregate,
    decoding_hazards,
    entropy,
    exact_kl,
    k1,
    k3,
    kl_flags,
    policy_shift,
    sampled_policy_shift,
    to_bits,
)

try:  # tests/ may or may not be a package
    from tests import tiny_models
except ImportError:  # pragma: no cover
    import tiny_models  # type: ignore[no-redef]

PURE = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
SAVE_PRETRAINED_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
}


def _chat(i: int = 0) -> list[dict]:
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"Question {i}: what is {i} + {i}?"},
    ]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_models")
    policy, reference = tiny_models.build_pair(root, seed=0, scale=0.03)
    plain = tiny_models.build_checkpoint(root / "plain", seed=0, chat_template=False)
    shuffled = list(reversed(tiny_models.CHARS))
    other = tiny_models.build_checkpoint(root / "other_vocab", seed=0, chars=shuffled)
    return {"policy": policy, "reference": reference, "plain": plain, "other": other}


@pytest.fixture(scope="session")
def policy(checkpoints) -> HFModel:
    return HFModel.load(checkpoints["policy"])


@pytest.fixture(scope="session")
def reference(checkpoints) -> HFModel:
    return HFModel.load(checkpoints["reference"])


def _numpy_log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _direct_log_dists(model: HFModel, prompt_ids: list[int], completion_ids: list[int]):
    """Full-sequence forward straight through the transformers model, softmax in numpy."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model.model(ids).logits[0].double().numpy()
    start = len(prompt_ids) - 1
    return _numpy_log_softmax(logits[start : start + len(completion_ids)])


# -- loading ---------------------------------------------------------------------------------


def test_loads_a_save_pretrained_directory_with_chat_template(checkpoints, policy):
    written = set(os.listdir(checkpoints["policy"]))
    assert written <= SAVE_PRETRAINED_FILES and "model.safetensors" in written
    assert policy.prompt_format == "chat_template"
    assert policy.model.dtype == torch.float32 and not policy.model.training
    assert policy.vocab_size == len(tiny_models.SPECIAL_TOKENS) + len(tiny_models.CHARS)
    assert policy.eos_token_ids == {0}
    text = policy.render_prompt([{"role": "user", "content": "hi"}])
    assert text == "<|user|>hi\n<|assistant|>"
    assert policy.decode(policy.encode_messages([{"role": "user", "content": "hi"}])) == "hi\n"


def test_tokenizer_without_chat_template_uses_plain_format(checkpoints):
    model = HFModel.load(checkpoints["plain"])
    assert model.prompt_format == "plain_role_content"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert model.render_prompt(messages) == "system: be brief\nuser: hi\nassistant: "
    out = model.generate(messages, seed=1, max_tokens=5, **PURE)
    assert out["prompt_format"] == "plain_role_content"
    assert model.decode(out["prompt_ids"]) == "system: be brief\nuser: hi\nassistant: "


def test_load_rejects_a_directory_without_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        HFModel.load(tmp_path)


def test_missing_extra_names_it(monkeypatch, checkpoints):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"rlenv\[hf\]"):
        HFModel.load(checkpoints["policy"])


# -- exact KL ----------------------------------------------------------------------------------


def test_exact_kl_matches_direct_numpy_computation(policy, reference):
    out = policy.generate(_chat(3), seed=11, max_tokens=40, **PURE)
    prompt, completion = out["prompt_ids"], out["completion_ids"]
    shift = policy_shift(policy, reference, prompt, completion, chunk_tokens=7)

    logp = _direct_log_dists(policy, prompt, completion)
    logq = _direct_log_dists(reference, prompt, completion)
    p = np.exp(logp)
    want_kl = (p * (logp - logq)).sum(axis=-1)
    rows = np.arange(len(completion))
    lp, lq = logp[rows, completion], logq[rows, completion]

    per = shift["per_token"]
    assert shift["estimator"] == "exact" and shift["tokens"] == len(completion) == 40
    np.testing.assert_allclose(per["kl"], want_kl, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(per["k1"], lp - lq, atol=1e-5)
    np.testing.assert_allclose(per["k3"], np.exp(lq - lp) - (lq - lp) - 1, atol=1e-5)
    np.testing.assert_allclose(per["entropy"], -(p * logp).sum(axis=-1), atol=1e-5)
    assert min(per["kl"]) > 0
    seq = shift["sequence"]
    assert seq["kl_sum"] == pytest.approx(want_kl.sum(), rel=1e-5)
    assert seq["kl_mean"] == pytest.approx(want_kl.mean(), rel=1e-5)
    assert to_bits(seq["kl_sum"]) == pytest.approx(want_kl.sum() / math.log(2), rel=1e-5)

    # The generation's own logprobs (KV cache) agree with teacher forcing.
    np.testing.assert_allclose(out["logprobs_raw"], lp, atol=1e-4)
    np.testing.assert_allclose(out["entropy"], per["entropy"], atol=1e-4)
    assert out["logprobs"] == out["logprobs_raw"]  # pure sampling: same distribution

    scored = policy.score(prompt, completion, full=True)
    assert scored["logprobs_full"].shape == (40, policy.vocab_size)
    assert scored["logprobs_full"].dtype == np.float64
    np.testing.assert_allclose(scored["logprobs_full"], logp, atol=1e-5)
    np.testing.assert_allclose(scored["logprobs"], lp, atol=1e-5)


def test_identical_models_have_zero_shift(checkpoints, reference, policy):
    twin = HFModel.load(checkpoints["reference"])  # same weights, separate instance
    out = reference.generate(_chat(5), seed=5, max_tokens=30, **PURE)
    shift = policy_shift(twin, reference, out["prompt_ids"], out["completion_ids"])
    for name in ("kl", "k1", "k3"):
        assert np.abs(shift["per_token"][name]).max() <= 1e-12, name
    assert shift["sequence"]["kl_sum"] == pytest.approx(0.0, abs=1e-10)

    # Server-style estimate from the sampler's own logprobs: zero up to KV-cache rounding.
    sampled = sampled_policy_shift(
        out["logprobs"], reference, out["prompt_ids"], out["completion_ids"]
    )
    assert sampled["estimator"] == "server_logprobs" and sampled["per_token"]["kl"] is None
    assert np.abs(sampled["per_token"]["k1"]).max() < 1e-4
    assert aggregate([sampled])["estimator"] == "server_logprobs"

    # And a genuinely different policy is not zero.
    moved = policy_shift(policy, reference, out["prompt_ids"], out["completion_ids"])
    assert moved["sequence"]["kl_mean"] > 0.05


def test_vocabulary_mismatch_is_refused(checkpoints, policy):
    other = HFModel.load(checkpoints["other"])
    assert other.vocab_size == policy.vocab_size  # same size, different token ids
    with pytest.raises(VocabularyMismatchError, match="different tokenizers"):
        policy_shift(policy, other, [4, 40], [41, 42])


def _sampled_shifts(policy, reference, decoding: dict, *, tokens: int) -> list[dict]:
    """Seeded rollouts under ``decoding`` until ``tokens`` tokens, each scored exactly."""
    records, count, i = [], 0, 0
    while count < tokens:
        out = policy.generate(_chat(i), seed=1000 + i, max_tokens=120, **decoding)
        records.append(policy_shift(policy, reference, out["prompt_ids"], out["completion_ids"]))
        count += len(out["completion_ids"])
        i += 1
    return records


def _k1_z(records: list[dict]) -> float:
    d = np.concatenate([np.subtract(r["per_token"]["k1"], r["per_token"]["kl"]) for r in records])
    return float(d.mean() / (math.sqrt(float((d**2).sum())) / d.size))


def test_sampled_estimators_converge_to_exact_kl(policy, reference):
    """k1 and k3 averaged over >= 2000 purely sampled tokens match the exact mean KL.

    Tolerance: d_t = k_t - KL_t has E[d_t | tokens before t] = 0 under pure sampling, so the
    d_t are martingale differences (uncorrelated, though not independent) and the standard error
    of mean(d) is sqrt(sum d_t^2) / N. We require |mean(d)| <= 4 standard errors (a correct
    implementation fails with probability ~6e-5; seeds are fixed, so the figures are
    reproducible) and the standard error to be under 10% of the KL, so the check has power.
    """
    records = _sampled_shifts(policy, reference, PURE, tokens=2400)
    kl_t = np.concatenate([r["per_token"]["kl"] for r in records])
    summary = aggregate(records)
    assert summary["estimator"] == "exact" and summary["tokens"] == kl_t.size >= 2000
    assert summary["mean_token_kl"] == pytest.approx(kl_t.mean(), rel=1e-9)
    figures = {}
    for name in ("k1", "k3"):
        estimate = np.concatenate([r["per_token"][name] for r in records])
        d = estimate - kl_t
        stderr = math.sqrt(float((d**2).sum())) / d.size
        figures[name] = (estimate.mean(), kl_t.mean(), d.mean() / stderr, stderr)
        assert summary[f"mean_{name}"] == pytest.approx(estimate.mean(), rel=1e-9)
        assert abs(d.mean()) <= 4 * stderr, figures
        assert stderr < 0.1 * kl_t.mean(), figures
    print(f"\nconvergence over {kl_t.size} tokens, {len(records)} rollouts:")
    for name, (est, exact, z, se) in figures.items():
        print(f"  {name}: mean {est:.4f} vs exact {exact:.4f} nats (z {z:+.2f}, stderr {se:.4f})")
    assert kl_flags(summary) == []
    json.dumps(summary, allow_nan=False)


def test_top_k_sampling_biases_k1(policy, reference):
    """The hazard is real: with top_k=5 the k1 of raw logprobs overshoots the exact KL.

    Same rollouts and statistic as the convergence test; this is what the check catches (the
    measured z is about +9.4 here, against |z| <= 4 required of pure sampling).
    """
    records = _sampled_shifts(policy, reference, {**PURE, "top_k": 5}, tokens=2400)
    assert _k1_z(records) > 3
    assert [h["name"] for h in decoding_hazards({**PURE, "top_k": 5})] == ["top_k_truncation"]


# -- generation ---------------------------------------------------------------------------------


def test_generation_is_a_pure_function_of_checkpoint_messages_decoding_seed(checkpoints, policy):
    first = policy.generate(_chat(1), seed=42, max_tokens=30, **PURE)
    again = policy.generate(_chat(1), seed=42, max_tokens=30, **PURE)
    fresh = HFModel.load(checkpoints["policy"]).generate(_chat(1), seed=42, max_tokens=30, **PURE)
    for other in (again, fresh):
        assert other["completion_ids"] == first["completion_ids"]
        assert other["logprobs"] == first["logprobs"]
        assert other["text"] == first["text"]
    seeds = [policy.generate(_chat(1), seed=s, max_tokens=30, **PURE) for s in range(5)]
    assert len({tuple(o["completion_ids"]) for o in seeds}) >= 4
    assert first["usage"] == {
        "prompt_tokens": len(first["prompt_ids"]),
        "completion_tokens": 30,
        "total_tokens": len(first["prompt_ids"]) + 30,
    }
    assert first["finish_reason"] == "length"


def test_truncated_and_greedy_decoding_report_the_sampling_distribution(policy):
    out = policy.generate(_chat(2), seed=3, max_tokens=30, temperature=1.0, top_k=5)
    full = policy.score(out["prompt_ids"], out["completion_ids"], full=True)["logprobs_full"]
    rows = np.arange(len(out["completion_ids"]))
    top5 = np.argsort(-full, axis=-1)[:, :5]
    assert all(tok in top5[i] for i, tok in enumerate(out["completion_ids"]))
    # Renormalised over 5 tokens: each sampled logprob exceeds the raw one by -log(top-5 mass).
    top5_mass = np.log(np.exp(np.take_along_axis(full, top5, axis=-1)).sum(axis=-1))
    np.testing.assert_allclose(
        np.array(out["logprobs"]), full[rows, out["completion_ids"]] - top5_mass, atol=1e-4
    )

    nucleus = policy.generate(_chat(2), seed=3, max_tokens=30, temperature=1.0, top_p=0.3)
    full = policy.score(nucleus["prompt_ids"], nucleus["completion_ids"], full=True)
    for i, tok in enumerate(nucleus["completion_ids"]):
        dist = np.exp(full["logprobs_full"][i])
        assert dist[dist > dist[tok]].sum() < 0.3  # the mass ranked before it is under top_p
    assert all(
        a >= b - 1e-9 for a, b in zip(nucleus["logprobs"], nucleus["logprobs_raw"], strict=True)
    )

    greedy = policy.generate(_chat(2), seed=3, max_tokens=20, temperature=0)
    assert greedy == {**policy.generate(_chat(2), seed=99, max_tokens=20, temperature=0), "seed": 3}
    full = policy.score(greedy["prompt_ids"], greedy["completion_ids"], full=True)
    assert greedy["completion_ids"] == list(full["logprobs_full"].argmax(axis=-1))
    assert greedy["logprobs"] == [0.0] * 20


def test_min_new_tokens_suppresses_eos(policy):
    # Find a sampled reply that ends with EOS, then replay it with EOS banned for longer.
    for seed in range(400):
        out = policy.generate(_chat(0), seed=seed, max_tokens=8, **PURE)
        if out["finish_reason"] == "stop":
            break
    else:  # pragma: no cover
        pytest.fail("no EOS in 400 short samples")
    assert out["completion_ids"][-1] == 0
    longer = policy.generate(_chat(0), seed=seed, max_tokens=8, min_new_tokens=8, **PURE)
    assert 0 not in longer["completion_ids"] and longer["finish_reason"] == "length"
    assert len(longer["completion_ids"]) == 8


def test_stop_strings_trim_the_text(policy):
    full = policy.generate(_chat(4), seed=8, max_tokens=60, **PURE)
    assert full["finish_reason"] == "length" and len(full["text"]) >= 55
    stop = full["text"][30:32]
    cut = full["text"].find(stop)
    # Generation ends at the first token whose decoded prefix contains the stop string.
    ids = full["completion_ids"]
    n_stop = next(n for n in range(1, 61) if stop in policy.decode(ids[:n]))
    out = policy.generate(_chat(4), seed=8, max_tokens=60, stop=[stop], **PURE)
    assert out["finish_reason"] == "stop"
    assert out["text"] == full["text"][:cut]
    assert out["completion_ids"] == ids[:n_stop]
    assert out["logprobs"] == full["logprobs"][:n_stop]
    assert out["usage"]["completion_tokens"] == n_stop
    # Several stops: the earliest occurrence wins.
    late = full["text"][50:53]
    both = policy.generate(_chat(4), seed=8, max_tokens=60, stop=[late, stop], **PURE)
    assert both["text"] == full["text"][: min(cut, full["text"].find(late))]


# -- hazards -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decoding", "name"),
    [
        ({**PURE, "top_k": 40}, "top_k_truncation"),
        ({**PURE, "top_p": 0.9}, "top_p_truncation"),
        ({**PURE, "temperature": 0.7}, "temperature_mismatch"),
        ({**PURE, "temperature": 0}, "temperature_mismatch"),
        ({**PURE, "min_new_tokens": 5}, "min_length_eos_suppression"),
        ({**PURE, "min_tokens": 1}, "min_length_eos_suppression"),
    ],
)
def test_decoding_hazards_fire(decoding, name):
    hazards = decoding_hazards(decoding)
    assert [h["name"] for h in hazards] == [name]
    for hazard in hazards:
        assert set(hazard) == {"name", "message", "recommendation"}
        assert "\n" not in hazard["message"] + hazard["recommendation"]
        assert "top_k 0, top_p 1, no minimum length, pad with EOS" in hazard["recommendation"]


def test_no_hazard_for_pure_sampling():
    assert decoding_hazards(PURE) == []
    assert decoding_hazards({}) == []
    assert decoding_hazards({"temperature": None, "top_k": None, "top_p": None}) == []
    assert decoding_hazards({"temperature": 0.7}, scoring_temperature=0.7) == []


def test_padding_and_combined_hazards():
    names = [h["name"] for h in decoding_hazards(PURE, batched_padding=True)]
    assert names == ["padding_tokens_scored"]
    combined = {"temperature": 0.7, "top_p": 0.95, "top_k": 50, "min_new_tokens": 1}
    assert len(decoding_hazards(combined)) == 4


def test_kl_flags_negative_mean_k1():
    negative = aggregate([{"k1": [-0.2, 0.05, -0.1], "k3": [0.02, 0.001, 0.005]}])
    assert negative["estimator"] == "sampled_k1_k3" and negative["mean_k1"] < 0
    flags = kl_flags(negative)
    assert [f["name"] for f in flags] == ["negative_mean_k1"]
    assert "\n" not in flags[0]["message"]
    assert kl_flags(aggregate([{"k1": [0.2, -0.05], "k3": [0.02, 0.001]}])) == []
    assert kl_flags(aggregate([])) == []


# -- kl.py (numpy) -------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:divide by zero")
def test_numpy_kl_helpers_on_known_values():
    logp = np.log(np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]))
    logq = np.log(np.array([[0.9, 0.1, 0.0], [1 / 3, 1 / 3, 1 / 3]]))
    want = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    np.testing.assert_allclose(exact_kl(logp, logq), [want, 0.0], atol=1e-12)
    np.testing.assert_allclose(entropy(logp), [math.log(2), math.log(3)], atol=1e-12)
    assert exact_kl(np.log([[0.5, 0.5]]), np.log([[1.0, 0.0]]))[0] == math.inf
    np.testing.assert_allclose(k1([-1.0], [-2.0]), [1.0])
    np.testing.assert_allclose(k3([-1.0], [-2.0]), [math.exp(-1) + 1 - 1])
    assert k3([-1.0], [-1.0])[0] == 0.0
    with pytest.raises(ValueError, match="shape"):
        exact_kl(np.zeros((2, 3)), np.zeros((2, 4)))


def test_aggregate_is_json_safe_and_token_weighted():
    records = [
        {
            "estimator": "exact",
            "kl": [0.1, 0.3],
            "k1": [0.2, 0.2],
            "k3": [0.1, 0.1],
            "entropy": [1.0, 2.0],
        },
        {"estimator": "exact", "kl": [math.inf], "k1": [0.5], "k3": [0.4], "entropy": [3.0]},
    ]
    summary = aggregate(records)
    assert summary["estimator"] == "exact" and summary["tokens"] == 3
    # issue 14: the infinite token is counted, and the means stay over the finite ones
    assert summary["non_finite_tokens"] == 1
    assert summary["mean_token_kl"] == pytest.approx(0.2)
    assert summary["mean_k1"] == pytest.approx(0.3)  # (0.2 + 0.2 + 0.5) / 3, token-weighted
    assert summary["mean_sequence_k1"] == pytest.approx(0.45)  # (0.4 + 0.5) / 2
    assert summary["mean_entropy"] == pytest.approx(2.0)
    json.dumps(summary, allow_nan=False)
    sampled = aggregate([{"k1": [0.1], "k3": [0.2]}, {"kl": [0.3], "k1": [0.1], "k3": [0.4]}])
    assert sampled["estimator"] == "sampled_k1_k3"
    assert sampled["mean_sequence_kl"] == pytest.approx(0.3)  # k3 stands in for exact KL
    empty = aggregate([])
    assert empty["tokens"] == 0 and empty["mean_k1"] is None
    json.dumps(empty, allow_nan=False)
