"""`python:pkg.module:function` policies: called inside the frozen world, once per turn."""

from __future__ import annotations

from typing import Any

from rlenv.bounds import reply_problem
from rlenv.errors import ModelOutputError, PolicyCrash
from rlenv.providers.base import ModelReply, ModelRequest, PolicyContext, import_ref
from rlenv.seeding import derive_seed, seed_everything


class InWorldProvider:
    """Orchestrator-side handle: the rollout is shipped whole to a frozen-world worker."""

    in_world = True

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def identity(self) -> dict[str, Any]:
        return {"uri": self.uri}

    async def complete(self, request: ModelRequest) -> ModelReply:  # pragma: no cover
        raise RuntimeError("in-world providers are called inside the worker")

    async def aclose(self) -> None:
        return None


def normalise_reply(value: Any) -> dict[str, Any]:
    """Accept a str or an assistant message dict from a policy; check its shape. A reply that
    is not bounded data (`rlenv.bounds`: too deep, too large, a lone surrogate, too many tool
    calls) is the policy's failure: `PolicyCrash` (the rollout's ``policy_error``)."""
    # the wrong type of answer is the model's outcome (model_error), checked first; what is
    # left must be bounded data, else the policy failed (policy_error)
    if not isinstance(value, str | dict):
        raise ModelOutputError(f"policy returned {type(value).__name__}, expected str or dict")
    content = value if isinstance(value, str) else value.get("content")
    if content is not None and not isinstance(content, str):
        raise ModelOutputError(
            f"policy returned content of type {type(content).__name__}, expected str"
        )
    problem = reply_problem(value)
    if problem is not None:
        raise PolicyCrash(f"the policy's reply {problem}")
    if isinstance(value, str):
        return {"role": "assistant", "content": value}
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = value.get("tool_calls") or []
    if calls:
        if not isinstance(calls, list):
            raise ModelOutputError("tool_calls must be a list")
        message["tool_calls"] = []
        for number, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ModelOutputError(f"tool_calls[{number}] has no function name")
            arguments = function.get("arguments", "{}")
            if not isinstance(arguments, str):
                from rlenv.canonical import canonical_bytes

                arguments = canonical_bytes(arguments).decode()
            message["tool_calls"].append(
                {
                    "id": str(call.get("id") or f"call_{number}"),
                    "type": "function",
                    "function": {"name": function["name"], "arguments": arguments},
                }
            )
    return message


class PythonPolicy:
    """Worker-side: the imported policy function."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.function = import_ref(uri[len("python:") :], what=f"model {uri}")
        if not callable(self.function):
            from rlenv.errors import UserError

            raise UserError(f"model {uri}: not callable")

    def complete_sync(self, request: ModelRequest) -> ModelReply:
        seed = derive_seed(request.seed, "turn", request.turn)
        rng = seed_everything(seed)
        context = PolicyContext(
            seed=request.seed,
            rng=rng,
            input_id=request.input_id,
            rollout=request.rollout,
            turn=request.turn,
            decoding=request.decoding,
        )
        value = self.function(request.messages, request.tools, context)
        return ModelReply(message=normalise_reply(value))
