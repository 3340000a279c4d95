"""The ``user:`` block of a spec: the simulated user a conversation alternates with.

Exactly one of: ``turns`` (scripted: the user's messages after the first, in order),
``function`` (python, ``fn(messages, input, ctx) -> str | None``; None ends the conversation)
or ``model`` (an OpenAI-compatible model told its ``instructions`` from an input field; its
replies are recorded by `rlenv record` into ``cassette``, keyed by the conversation so far, and
replayed by `rlenv run`). The user ends the conversation with ``stop`` in its reply (or a
function's None, or the end of its turns); ``max_turns`` bounds the user's turns.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from rlenv.spec_base import IMPORT_REF, FileRef, Strict, signature
from rlenv.spec_data import USER_CASSETTE  # noqa: F401  (re-exported)


class SimulatedUser(Strict):
    turns: list[str] | None = None
    function: str | None = Field(None, pattern=IMPORT_REF, description=signature("user"))
    model: str | None = Field(None, pattern=r"^openai:\S+$")
    instructions_field: str = "user_instructions"
    base_url: str | None = None  # where `record` reaches the user model (its URL is recorded)
    temperature: float = Field(0.0, ge=0)
    max_tokens: int = Field(256, ge=1)
    cassette: FileRef | None = None
    stop: str = "###STOP###"
    max_turns: int = Field(8, ge=1, le=1000)

    @model_validator(mode="after")
    def _one_kind(self) -> SimulatedUser:
        kinds = [self.turns is not None, self.function is not None, self.model is not None]
        if sum(kinds) != 1:
            raise ValueError("a user needs exactly one of turns, function, model")
        if self.model is not None and (self.cassette is None or self.base_url is None):
            raise ValueError(
                "a user model needs base_url and cassette: {path: ...} (`rlenv record` fills it)"
            )
        return self
