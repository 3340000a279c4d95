"""`hf:PATH`: a local transformers causal LM as the policy (extra `rlenv[hf]`).

Generation runs in the orchestrator (outside the frozen world), one call at a time, with the
rollout's derived seed per turn, so output is a pure function of checkpoint, messages, decoding
and seed. With a reference model (`--reference hf:BASE`) every sampled completion is also scored
under the reference by teacher forcing: exact per-token KL from both full distributions, the
sampled estimators k1 and k3, and the policy's entropy.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from rlenv.canonical import sha256_file
from rlenv.errors import ModelOutputError, UserError
from rlenv.providers.base import ModelReply, ModelRequest
from rlenv.seeding import derive_seed

TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def load_checkpoint(path: str, *, what: str) -> Any:
    """Load an HFModel or raise a one-line UserError (missing extra, missing or bad directory)."""
    directory = Path(path)
    if not directory.is_dir():
        raise UserError(f"{what}: checkpoint directory not found: {directory}")
    if not (directory / "config.json").is_file():
        raise UserError(f"{what}: {directory} is not a checkpoint directory (no config.json)")
    try:
        from rlenv.policy_shift.hf import HFModel

        return HFModel.load(directory)
    except ImportError as exc:
        raise UserError(f"{what}: {exc}") from None
    except (OSError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{what}: cannot load checkpoint {directory}: {message}") from None


def checkpoint_identity(path: Path) -> dict[str, Any]:
    """A cheap identity of a checkpoint: hash of its config and file sizes (not the weights)."""
    files = sorted(p for p in path.iterdir() if p.is_file())
    return {
        "config_sha256": sha256_file(path / "config.json"),
        "files": {p.name: p.stat().st_size for p in files},
    }


def parse_tool_calls(text: str, tools: list[dict[str, Any]], turn: int) -> dict[str, Any]:
    """Hermes/Qwen-style `<tool_call>{"name", "arguments"}</tool_call>` blocks to OpenAI calls."""
    found = TOOL_CALL.findall(text) if tools else []
    if not found:
        return {"role": "assistant", "content": text}
    known = {tool["function"]["name"] for tool in tools}
    calls = []
    for number, block in enumerate(found):
        try:
            data = json.loads(block)
        except json.JSONDecodeError as exc:
            raise ModelOutputError(f"tool call {number} is not valid JSON ({exc.msg})") from None
        name = data.get("name") if isinstance(data, dict) else None
        if name not in known:
            raise ModelOutputError(f"tool call {number} names unknown tool {name!r}")
        arguments = data.get("arguments", {})
        calls.append(
            {
                "id": f"call_{turn}_{number}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    content = TOOL_CALL.sub("", text).strip() or None
    return {"role": "assistant", "content": content, "tool_calls": calls}


class HFProvider:
    in_world = False

    def __init__(self, uri: str, path: str, reference: str | None = None) -> None:
        self.uri = uri
        self.path = Path(path)
        self.model = load_checkpoint(path, what=f"model {uri}")
        self.reference_uri = reference
        self.reference = None
        if reference:
            if not reference.startswith("hf:"):
                raise UserError(
                    f"--reference {reference!r}: exact KL needs a local checkpoint (hf:PATH)"
                )
            self.reference = load_checkpoint(reference[3:], what=f"reference {reference}")
            from rlenv.policy_shift.hf import VocabularyMismatchError, check_same_vocabulary

            try:
                check_same_vocabulary(self.model, self.reference)
            except VocabularyMismatchError as exc:
                raise UserError(f"--reference: {exc}") from None
        self._lock: asyncio.Lock | None = None

    def identity(self) -> dict[str, Any]:
        identity = {"uri": self.uri, "checkpoint": checkpoint_identity(self.path)}
        if self.reference is not None:
            identity["reference"] = {
                "uri": self.reference_uri,
                "checkpoint": checkpoint_identity(Path(self.reference.path)),
            }
        return identity

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one generation at a time: CPU-bound, and torch state is shared
            return await asyncio.to_thread(self._complete, request)

    def _complete(self, request: ModelRequest) -> ModelReply:
        decoding = request.decoding
        seed = derive_seed(request.seed, "turn", request.turn)
        sent = {
            "temperature": decoding["temperature"],
            "top_p": decoding["top_p"],
            "top_k": decoding.get("top_k") or 0,
            "max_tokens": decoding["max_tokens"],
            "stop": list(decoding.get("stop") or []),
            "min_new_tokens": decoding.get("min_tokens") or 0,
            "seed": seed,
        }
        output = self.model.generate(
            request.messages,
            seed=seed,
            temperature=sent["temperature"],
            top_p=sent["top_p"],
            top_k=sent["top_k"],
            max_tokens=sent["max_tokens"],
            stop=sent["stop"],
            min_new_tokens=sent["min_new_tokens"],
            tools=request.tools or None,
        )
        message = parse_tool_calls(output["text"], request.tools, request.turn)
        extra: dict[str, Any] = {"finish_reason": output["finish_reason"], "sent": sent}
        if self.reference is not None:
            from rlenv.policy_shift.hf import policy_shift

            extra["kl"] = policy_shift(
                self.model, self.reference, output["prompt_ids"], output["completion_ids"]
            )
        logprobs = [
            {"token_id": int(token), "logprob": float(logprob)}
            for token, logprob in zip(output["completion_ids"], output["logprobs_raw"], strict=True)
        ]
        return ModelReply(
            message=message, usage=dict(output["usage"]), logprobs=logprobs, extra=extra
        )

    async def aclose(self) -> None:
        return None
