"""Warnings for decoding settings that bias sampled KL estimates, and for suspicious KL figures.

The sampled estimators k1 and k3 are unbiased for KL(policy||reference) only when each token was
drawn from the very distribution the policy is scored with. Truncation (top-k, top-p), EOS
suppression (a minimum length), a sampling temperature other than the scoring temperature, and
scoring padding tokens all break that: the classic symptom is a negative mean k1, i.e. an
apparently negative KL.
"""

from __future__ import annotations

from typing import Any

PURE_SAMPLING = "sample purely: top_k 0, top_p 1, no minimum length, pad with EOS"

_MIN_LENGTH_KEYS = ("min_new_tokens", "min_tokens", "min_length")


def _hazard(name: str, message: str, recommendation: str) -> dict[str, str]:
    return {"name": name, "message": message, "recommendation": recommendation}


def decoding_hazards(
    decoding: dict[str, Any], *, scoring_temperature: float = 1.0, batched_padding: bool = False
) -> list[dict[str, str]]:
    """List the decoding settings that make sampled KL (k1/k3) to the reference biased.

    ``decoding`` uses the spec's keys (temperature, top_p, top_k, min_new_tokens / min_tokens /
    min_length); a missing temperature counts as 1. ``batched_padding`` says whether padding
    tokens of batched generation are scored as if they were sampled.
    """
    hazards: list[dict[str, str]] = []
    top_k = decoding.get("top_k")
    if top_k is not None and top_k > 0:
        hazards.append(
            _hazard(
                "top_k_truncation",
                f"top_k={top_k} samples from a truncated distribution; k1/k3 against the full "
                "distribution are biased and can go negative.",
                f"Set top_k 0 for KL runs; {PURE_SAMPLING}.",
            )
        )
    top_p = decoding.get("top_p")
    if top_p is not None and top_p < 1:
        hazards.append(
            _hazard(
                "top_p_truncation",
                f"top_p={top_p} drops the distribution's tail; k1/k3 against the full "
                "distribution are biased and can go negative.",
                f"Set top_p 1 for KL runs; {PURE_SAMPLING}.",
            )
        )
    for key in _MIN_LENGTH_KEYS:
        value = decoding.get(key)
        if value is not None and value > 0:
            hazards.append(
                _hazard(
                    "min_length_eos_suppression",
                    f"{key}={value} suppresses EOS for the first tokens; those tokens are not "
                    "sampled from the scored distribution.",
                    f"Drop the minimum length for KL runs; {PURE_SAMPLING}.",
                )
            )
            break
    temperature = decoding.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    if temperature != float(scoring_temperature):
        hazards.append(
            _hazard(
                "temperature_mismatch",
                f"sampling at temperature {temperature:g} but scoring at temperature "
                f"{float(scoring_temperature):g}; the sampled KL estimate is biased.",
                f"Sample at the scoring temperature ({float(scoring_temperature):g}); "
                f"{PURE_SAMPLING}.",
            )
        )
    if batched_padding:
        hazards.append(
            _hazard(
                "padding_tokens_scored",
                "padding tokens of batched generation are scored as if sampled; they inflate or "
                "deflate the per-token KL.",
                f"Mask padding out of the KL or pad with EOS and stop there; {PURE_SAMPLING}.",
            )
        )
    return hazards


def kl_flags(aggregate: dict[str, Any]) -> list[dict[str, str]]:
    """Flags on a run-level KL summary (``kl.aggregate`` output): a negative mean k1.

    Under pure sampling E[k1] = KL >= 0, so a negative mean k1 means the logprobs did not come
    from the distribution that was sampled (truncation, temperature, padding, a different
    checkpoint or tokenizer) or the run is too short to tell.
    """
    flags: list[dict[str, str]] = []
    mean_k1 = aggregate.get("mean_k1")
    if mean_k1 is not None and mean_k1 < 0:
        stderr = aggregate.get("k1_stderr")
        spread = f" (stderr {stderr:.3g})" if stderr else ""
        flags.append(
            _hazard(
                "negative_mean_k1",
                f"mean k1 is {mean_k1:.4g} nats{spread} over {aggregate.get('tokens', '?')} "
                "tokens; KL cannot be negative, so the sampled logprobs do not match the scored "
                "distribution.",
                f"Check the decoding hazards and that policy and reference share a tokenizer; "
                f"{PURE_SAMPLING}.",
            )
        )
    return flags
