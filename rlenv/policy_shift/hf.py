"""Local Hugging Face causal LMs as policy and reference: seeded sampling, scoring, exact KL.

torch and transformers are imported inside the functions (the ``rlenv[hf]`` extra), so importing
this module is cheap. Everything runs on CPU in float32 with a fixed thread count, and sampling
uses our own loop and a ``torch.Generator`` seeded per call, so a generation is a pure function
of (checkpoint, messages, decoding, seed).
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import numpy as np

from rlenv.policy_shift import kl as kl_math

PROMPT_FORMAT_CHAT = "chat_template"
PROMPT_FORMAT_PLAIN = "plain_role_content"


def _require_torch() -> Any:
    """Import torch and transformers, or say which extra to install."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "rlenv.policy_shift.hf needs torch and transformers: install rlenv[hf] "
            "(pip install 'rlenv[hf]')"
        ) from exc
    return torch


class VocabularyMismatchError(ValueError):
    """Policy and reference do not share a tokenizer/vocabulary, so their KL is undefined."""


class HFModel:
    """A local causal-LM checkpoint (model + tokenizer) in float32 eval mode on CPU.

    ``prompt_format`` is "chat_template" when the tokenizer has one, else "plain_role_content":
    each message rendered as ``"role: content\\n"`` followed by ``"assistant: "``.
    """

    def __init__(self, path: str, model: Any, tokenizer: Any) -> None:
        self.path = path
        self.model = model
        self.tokenizer = tokenizer
        self.prompt_format = (
            PROMPT_FORMAT_CHAT if getattr(tokenizer, "chat_template", None) else PROMPT_FORMAT_PLAIN
        )
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_positions = _max_positions(model.config)
        self.eos_token_ids = _eos_token_ids(model, tokenizer)
        forward_params = inspect.signature(model.forward).parameters
        self._logits_to_keep = next(
            (name for name in ("logits_to_keep", "num_logits_to_keep") if name in forward_params),
            None,
        )

    @classmethod
    def load(cls, path: str | Path, *, num_threads: int | None = 1) -> HFModel:
        """Load tokenizer and model from a local directory (e.g. a TRL output dir), offline.

        ``num_threads`` pins torch's intra-op threads (process-wide) so float reductions run in
        the same order every time; None leaves torch's setting alone.
        """
        torch = _require_torch()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        directory = Path(path)
        if not (directory / "config.json").is_file():
            raise FileNotFoundError(f"{directory}: not a checkpoint directory (no config.json)")
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        torch.use_deterministic_algorithms(True, warn_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
        model.to(torch.float32)
        model.eval()
        return cls(str(directory), model, tokenizer)

    # -- prompts -------------------------------------------------------------------------

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> str:
        """The prompt text for a conversation, ending where the assistant's reply starts."""
        if self.prompt_format == PROMPT_FORMAT_CHAT:
            kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
            if tools:
                kwargs["tools"] = tools
            return str(self.tokenizer.apply_chat_template(messages, **kwargs))
        lines = [f"{m.get('role', 'user')}: {m.get('content') or ''}\n" for m in messages]
        return "".join(lines) + "assistant: "

    def encode_messages(
        self, messages: list[dict[str, Any]], tools: list[dict] | None = None
    ) -> list[int]:
        """Prompt token ids; a chat template carries its own special tokens, so add none."""
        text = self.render_prompt(messages, tools)
        add_special = self.prompt_format == PROMPT_FORMAT_PLAIN
        return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    # -- sampling --------------------------------------------------------------------------

    def generate(
        self,
        messages: list[dict[str, Any]],
        *,
        seed: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        min_new_tokens: int = 0,
        tools: list[dict] | None = None,
    ) -> dict[str, Any]:
        """Sample a reply with a KV cache and a generator seeded by ``seed``.

        Order of logit processing (as in transformers): EOS masked while fewer than
        ``min_new_tokens`` were generated, then temperature, top-k, top-p; temperature 0 is
        greedy. ``logprobs`` are under that processed distribution (0 for greedy),
        ``logprobs_raw`` and ``entropy`` under the model's unmodified temperature-1 one.
        ``completion_ids`` include a sampled EOS and the token that completed a stop string;
        ``text`` excludes special tokens and is cut before the earliest stop string.
        """
        torch = _require_torch()
        temperature = 1.0 if temperature is None else float(temperature)
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, not {temperature}")
        stops = [s for s in (stop or []) if s]
        prompt_ids = self.encode_messages(messages, tools)
        if not prompt_ids:
            raise ValueError("empty prompt: the model needs at least one token of context")
        budget = max(0, int(max_tokens))
        if self.max_positions is not None:
            budget = min(budget, self.max_positions - len(prompt_ids))
        generator = torch.Generator().manual_seed(int(seed) % (2**63))
        eos = sorted(self.eos_token_ids)

        completion: list[int] = []
        logprobs: list[float] = []
        logprobs_raw: list[float] = []
        entropies: list[float] = []
        finish_reason = "length"
        text: str | None = None
        next_input = torch.tensor([prompt_ids], dtype=torch.long)
        seen = len(prompt_ids)
        past = None
        with torch.inference_mode():
            for step in range(budget):
                mask = torch.ones((1, seen), dtype=torch.long)
                out = self.model(
                    input_ids=next_input, attention_mask=mask, past_key_values=past, use_cache=True
                )
                past = out.past_key_values
                logits = out.logits[0, -1].to(torch.float64)
                raw = torch.log_softmax(logits, dim=-1)
                banned = eos if step < min_new_tokens else []
                sampling = _sampling_logprobs(torch, logits, raw, temperature, top_k, top_p, banned)
                if temperature == 0:
                    token = int(torch.argmax(sampling))
                    token_logprob = 0.0
                else:
                    token = _inverse_cdf_sample(torch, sampling, generator)
                    token_logprob = float(sampling[token])
                completion.append(token)
                logprobs.append(token_logprob)
                logprobs_raw.append(float(raw[token]))
                entropies.append(float(_entropy_t(torch, raw)))
                if token in self.eos_token_ids:
                    finish_reason = "stop"
                    break
                if stops:
                    decoded = self.decode(completion)
                    cut = _earliest_stop(decoded, stops)
                    if cut is not None:
                        text = decoded[:cut]
                        finish_reason = "stop"
                        break
                next_input = torch.tensor([[token]], dtype=torch.long)
                seen += 1
        if text is None:
            text = self.decode(completion)
        return {
            "text": text,
            "prompt_ids": prompt_ids,
            "completion_ids": completion,
            "logprobs": logprobs,
            "logprobs_raw": logprobs_raw,
            "entropy": entropies,
            "finish_reason": finish_reason,
            "prompt_format": self.prompt_format,
            "seed": int(seed),
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(completion),
                "total_tokens": len(prompt_ids) + len(completion),
            },
        }

    # -- teacher forcing -------------------------------------------------------------------

    def completion_logits(self, prompt_ids: list[int], completion_ids: list[int]) -> Any:
        """Next-token logits [T, V] (float32 torch tensor) for each completion position."""
        torch = _require_torch()
        if not prompt_ids:
            raise ValueError("empty prompt: the first completion token needs context")
        count = len(completion_ids)
        if count == 0:
            return torch.zeros((0, self.vocab_size), dtype=torch.float32)
        ids = torch.tensor([list(prompt_ids) + list(completion_ids)], dtype=torch.long)
        kwargs: dict[str, Any] = {}
        if self._logits_to_keep is not None:
            kwargs[self._logits_to_keep] = count + 1
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False, **kwargs)
            logits = logits.logits[0]
        # logits[i] predicts token i+1; keep the T positions that predict the completion.
        return logits[-(count + 1) : -1].to(torch.float32)

    def score(
        self, prompt_ids: list[int], completion_ids: list[int], *, full: bool = False
    ) -> dict[str, Any]:
        """Teacher-forced per-token logprobs and entropy (temperature 1) of a completion.

        With ``full=True`` also ``logprobs_full``: the next-token log-distributions as a numpy
        float64 array [T, V] (memory T * V * 8 bytes).
        """
        torch = _require_torch()
        logits = self.completion_logits(prompt_ids, completion_ids)
        log_dist = torch.log_softmax(logits.to(torch.float64), dim=-1)
        index = torch.tensor(list(completion_ids), dtype=torch.long)
        token_logprobs = log_dist[torch.arange(len(completion_ids)), index]
        result: dict[str, Any] = {
            "logprobs": [float(v) for v in token_logprobs],
            "entropy": [float(v) for v in _entropy_t(torch, log_dist)],
        }
        if full:
            result["logprobs_full"] = log_dist.numpy()
        return result


def policy_shift(
    policy: HFModel,
    reference: HFModel,
    prompt_ids: list[int],
    completion_ids: list[int],
    *,
    chunk_tokens: int = 256,
) -> dict[str, Any]:
    """Per-token and per-sequence shift of ``policy`` from ``reference`` on one completion, nats.

    Per token: exact KL(policy||reference) from the full temperature-1 distributions, k1, k3,
    policy entropy, and both models' logprobs of the token. Per sequence: sum and mean of each.
    The full distributions are converted to float64 ``chunk_tokens`` rows at a time.
    """
    check_same_vocabulary(policy, reference)
    logits_p = policy.completion_logits(prompt_ids, completion_ids)
    logits_q = reference.completion_logits(prompt_ids, completion_ids)
    ids = np.asarray(completion_ids, dtype=np.int64)
    kls, ents, logp, logq = [], [], [], []
    for start in range(0, len(completion_ids), max(1, chunk_tokens)):
        stop = start + max(1, chunk_tokens)
        lp = _log_softmax_np(logits_p[start:stop].double().numpy())
        lq = _log_softmax_np(logits_q[start:stop].double().numpy())
        rows = np.arange(lp.shape[0])
        kls.append(kl_math.exact_kl(lp, lq))
        ents.append(kl_math.entropy(lp))
        logp.append(lp[rows, ids[start:stop]])
        logq.append(lq[rows, ids[start:stop]])
    per_token = {
        "kl": _concat(kls),
        "k1": kl_math.k1(_concat(logp), _concat(logq)),
        "k3": kl_math.k3(_concat(logp), _concat(logq)),
        "entropy": _concat(ents),
        "logprob": _concat(logp),
        "ref_logprob": _concat(logq),
    }
    return kl_math.shift_record("exact", per_token)


def sampled_policy_shift(
    policy_logprobs: list[float],
    reference: HFModel,
    prompt_ids: list[int],
    completion_ids: list[int],
    *,
    estimator: str = "server_logprobs",
) -> dict[str, Any]:
    """k1/k3 from the policy's own sampled-token logprobs (e.g. a server's) and the reference.

    No exact KL (the policy's full distributions are not available); ``entropy`` is None.
    Unbiased only under pure sampling: see ``hazards.decoding_hazards``.
    """
    if len(policy_logprobs) != len(completion_ids):
        raise ValueError(
            f"{len(policy_logprobs)} policy logprobs for {len(completion_ids)} completion tokens"
        )
    if estimator not in kl_math.ESTIMATORS[1:]:
        raise ValueError(f"estimator must be one of {kl_math.ESTIMATORS[1:]}, not {estimator!r}")
    ref = np.asarray(reference.score(prompt_ids, completion_ids)["logprobs"], dtype=np.float64)
    logp = np.asarray(policy_logprobs, dtype=np.float64)
    per_token = {
        "kl": None,
        "k1": kl_math.k1(logp, ref),
        "k3": kl_math.k3(logp, ref),
        "entropy": None,
        "logprob": logp,
        "ref_logprob": ref,
    }
    return kl_math.shift_record(estimator, per_token)


def check_same_vocabulary(policy: HFModel, reference: HFModel) -> None:
    """Raise VocabularyMismatchError unless both share tokenizer vocabulary and logit size."""
    if policy is reference:
        return
    if policy.vocab_size != reference.vocab_size:
        raise VocabularyMismatchError(
            f"policy {policy.path} has {policy.vocab_size} output logits, reference "
            f"{reference.path} has {reference.vocab_size}: KL needs the same vocabulary"
        )
    vocab_p, vocab_q = policy.tokenizer.get_vocab(), reference.tokenizer.get_vocab()
    if vocab_p != vocab_q:
        differing = sorted(set(vocab_p.items()) ^ set(vocab_q.items()), key=str)[:3]
        raise VocabularyMismatchError(
            f"policy {policy.path} and reference {reference.path} use different tokenizers "
            f"(e.g. {differing}): KL needs the same vocabulary"
        )


def to_bits(nats: Any) -> Any:
    """Convert nats to bits."""
    return kl_math.to_bits(nats)


# -- helpers ------------------------------------------------------------------------------


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)


def _log_softmax_np(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _entropy_t(torch: Any, log_dist: Any) -> Any:
    probs = log_dist.exp()
    return -torch.where(probs > 0, probs * log_dist, torch.zeros_like(probs)).sum(dim=-1)


def _sampling_logprobs(
    torch: Any,
    logits: Any,
    raw: Any,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    banned: list[int],
) -> Any:
    """Log-probabilities of the distribution actually sampled from (float64, [V])."""
    top_k = int(top_k or 0)
    top_p = 1.0 if top_p is None else float(top_p)
    vocab = logits.shape[-1]
    if not banned and temperature in (0, 1) and (top_k <= 0 or top_k >= vocab) and top_p >= 1:
        return raw
    scores = logits.clone()
    if banned:
        scores[banned] = -math.inf
    if temperature and temperature != 1:
        scores = scores / float(temperature)
    if 0 < top_k < vocab:
        kth = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if top_p < 1:
        sorted_scores, order = torch.sort(scores, descending=True, stable=True)
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop_sorted[0] = False
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        scores = scores.masked_fill(drop, -math.inf)
    return torch.log_softmax(scores, dim=-1)


def _inverse_cdf_sample(torch: Any, log_dist: Any, generator: Any) -> int:
    """One draw: the first token whose cumulative probability exceeds a seeded uniform."""
    cdf = torch.cumsum(log_dist.exp(), dim=-1)
    uniform = torch.rand((), generator=generator, dtype=torch.float64) * cdf[-1]
    index = int(torch.searchsorted(cdf, uniform.reshape(1), right=True)[0])
    return min(index, cdf.shape[0] - 1)


def _earliest_stop(text: str, stops: list[str]) -> int | None:
    hits = [pos for pos in (text.find(s) for s in stops) if pos >= 0]
    return min(hits) if hits else None


def _max_positions(config: Any) -> int | None:
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _eos_token_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    candidates = [getattr(tokenizer, "eos_token_id", None)]
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        candidates.append(getattr(generation_config, "eos_token_id", None))
    candidates.append(getattr(model.config, "eos_token_id", None))
    for value in candidates:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)
