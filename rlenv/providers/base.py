"""The provider interface: one model call per turn, in the OpenAI chat format.

Which provider a model URI names is decided in ``rlenv.providers.registry``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlenv.errors import UserError


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


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr for a while: what env code prints when it is
    imported (in the orchestrator, by the checks) never reaches `rlenv ... --json`."""
    for stream in (sys.stdout, sys.__stdout__):
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os.dup2(saved, 1)
        os.close(saved)


def import_ref(ref: str, *, what: str) -> Any:
    """Resolve `pkg.module:name` to an object, with a one-line error when it cannot be. What
    the module prints while it is imported goes to stderr."""
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"{what}: expected 'pkg.module:name', got {ref!r}")
    try:
        with _stdout_to_stderr():
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{what}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:
        raise UserError(
            f"{what}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    except (SystemExit, KeyboardInterrupt) as exc:  # module-level code must not end the process
        raise UserError(
            f"{what}: importing {module_name!r} tried to end the process:"
            f" {type(exc).__name__}({exc})"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UserError(f"{what}: module {module_name!r} has no {attribute!r}") from None


def check_reference(uri: str, reference: str | None) -> None:
    """A reference model only makes sense for a local policy whose full distributions we have."""
    if reference and not uri.startswith("hf:"):
        raise UserError(
            f"--reference needs an hf:PATH policy (got {uri.split(':', 1)[0]}:); KL to the base"
            " model is computed from both models' full next-token distributions"
        )
