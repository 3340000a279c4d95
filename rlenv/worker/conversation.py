"""A conversation with a simulated user (the spec's ``user:`` block, `rlenv.spec_user`).

The loop (`rlenv.agent.conversation_loop`, driven here for an in-world policy and by the runner
for an outside one, whose user turns are then calls to a worker) alternates agent turns (each
run by `rlenv.agent.rollout_loop`: model replies and tool calls until the agent answers without
a tool call) with user turns, made by `WorldUser` in the world, until the user ends it (its
``stop`` marker, a function's None, the end of its scripted turns), the user's turn limit, or
the agent's (``limits.max_turns``, counted over the whole conversation). Every user turn is in
the record under ``extra.user_turns`` (after which agent turn, what was said, fixture use).

A model user is called in the world over HTTP like a tool: `rlenv record` writes its replies to
its cassette, keyed by the request body, which holds the conversation so far; `rlenv run`
replays them, and a reply never recorded ends the rollout as a ``fixture_miss`` naming the turn.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.agent import ToolCrash, UserCall, conversation_loop
from rlenv.errors import FixtureMiss, env_frames
from rlenv.refs import import_ref
from rlenv.spec_data import USER_CASSETTE
from rlenv.worker.config import WorkerConfig

if TYPE_CHECKING:  # records of the spec in a worker (`rlenv.spec_data`), typed as its models
    from rlenv.spec import LoadedSpec
    from rlenv.spec_user import SimulatedUser

__all__ = ["UserCall", "WorldUser", "conversation_loop"]


def _as_user_model_messages(instructions: str, messages: list[dict[str, Any]]) -> list[Any]:
    """The conversation from the user's side: the agent's words are what it hears."""
    seen: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            seen.append({"role": "assistant", "content": content})
        elif message.get("role") == "assistant" and isinstance(content, str) and content:
            seen.append({"role": "user", "content": content})
    return seen


class WorldUser:
    """The spec's simulated user inside the frozen world."""

    def __init__(self, loaded: LoadedSpec, config: WorkerConfig, tools: Any) -> None:
        assert loaded.spec.user is not None
        self.loaded = loaded
        self.user: SimulatedUser = loaded.spec.user
        self.config = config
        self.tools = tools  # WorldTools: its replay cassette serves the user model's HTTP too
        self.function = (
            import_ref(self.user.function, what="user function") if self.user.function else None
        )

    def reply(
        self, messages: list[dict[str, Any]], data: dict[str, Any], user_turn: int, ctx: Any
    ) -> str | None:
        """The user's next message (None: the user has nothing more to say)."""
        user = self.user
        if user.turns is not None:
            return user.turns[user_turn - 1] if user_turn <= len(user.turns) else None
        if self.function is not None:
            try:
                said = self.function([dict(m) for m in messages], dict(data), ctx)
            except Exception as exc:
                raise ToolCrash(f"user turn {user_turn}: {type(exc).__name__}: {exc}") from None
            except BaseException as exc:  # SystemExit and the like: the rollout's end
                raise ToolCrash(f"user turn {user_turn}: {exc!r}", env_frames(exc)) from None
            if said is not None and not isinstance(said, str):
                raise ToolCrash(
                    f"user turn {user_turn}: the user function returned"
                    f" {type(said).__name__}, expected str or None"
                )
            return said
        return self._model_reply(messages, data, user_turn)

    def _model_reply(self, messages: list[dict[str, Any]], data: dict[str, Any], turn: int) -> str:
        import httpx

        user = self.user
        instructions = data.get(user.instructions_field)
        if not isinstance(instructions, str):
            raise ToolCrash(
                f"user turn {turn}: the input has no {user.instructions_field!r} text field"
                " (the user model's instructions)"
            )
        assert user.model is not None
        body = {
            "model": user.model.removeprefix("openai:"),
            "messages": _as_user_model_messages(instructions, messages),
            "temperature": user.temperature,
            "max_tokens": user.max_tokens,
        }
        url = f"{(user.base_url or 'http://user.rlenv.invalid/v1').rstrip('/')}/chat/completions"
        cassette = self.tools.cassette
        if cassette is not None:
            type(cassette).current = USER_CASSETTE
        try:
            with self._recording():
                response = httpx.post(url, json=body, timeout=60)
            response.raise_for_status()
            content = response.json()["choices"][0]["message"]["content"]
        except FixtureMiss:
            raise FixtureMiss(
                f"user turn {turn}: the simulated user's reply to this conversation was never"
                " recorded (record it with `rlenv record`)"
            ) from None
        except Exception as exc:
            raise ToolCrash(f"user turn {turn}: user model: {type(exc).__name__}: {exc}") from None
        finally:
            if cassette is not None:
                type(cassette).current = None
                cassette.events.clear()
        return content if isinstance(content, str) else ""

    def _recording(self) -> Any:
        if not self.config.live_tools or not self.config.record_dir:
            return contextlib.nullcontext()
        from rlenv.world.recording import recording_cassette
        from rlenv.world.scrub import spec_scrubber

        return recording_cassette(
            Path(self.config.record_dir) / f"{USER_CASSETTE}.yaml", spec_scrubber(self.loaded)
        )
