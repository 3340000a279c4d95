"""The provider interface: one model call per turn, in the OpenAI chat format.

Which provider a model URI names is decided in ``rlenv.providers.registry``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlenv.errors import UserError
from rlenv.refs import import_ref as import_ref  # moved below the graders, which use it too


@dataclass
class ModelRequest:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    decoding: dict[str, Any]
    seed: int
    input_id: str
    rollout: int
    turn: int


@dataclass
class ModelReply:
    message: dict[str, Any]
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyContext:
    """What a python policy sees besides the conversation: never the reference fields."""

    seed: int
    rng: random.Random
    input_id: str
    rollout: int
    turn: int
    decoding: dict[str, Any]


class Provider(Protocol):
    uri: str
    #: True: the whole rollout runs inside a frozen-world worker (python, replay).
    #: False: model calls run in the orchestrator, outside the frozen world (HTTP, local HF).
    in_world: bool

    def identity(self) -> dict[str, Any]: ...

    async def complete(self, request: ModelRequest) -> ModelReply: ...

    async def aclose(self) -> None: ...


class InWorldPolicy(Protocol):
    """The worker-side half of an in-world provider: called inside the frozen world, once per
    turn (``rlenv.providers.registry.make_in_world_policy`` builds it from the URI)."""

    uri: str

    def complete_sync(self, request: ModelRequest) -> ModelReply: ...


def check_reference(uri: str, reference: str | None) -> None:
    """A reference model only makes sense for a local policy whose full distributions we have."""
    if reference and not uri.startswith("hf:"):
        raise UserError(
            f"--reference needs an hf:PATH policy (got {uri.split(':', 1)[0]}:); KL to the base"
            " model is computed from both models' full next-token distributions"
        )
