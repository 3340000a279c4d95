"""The OpenEnv wire types of a served env: an action is the policy's assistant message, an
observation what the frozen world answers, the state the episode's trajectory so far.

The action's fields are typed loosely on purpose: a wrong shape is answered by
:func:`rlenv.serve.episodes.model_reply` with one clear message (the protocol's error),
not by a list of validation errors."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from rlenv.serve.openenv_core import without_web_ui

with without_web_ui():
    from openenv.core.env_server.types import Action, Observation, State


class RlenvAction(Action):
    """One model turn, as an OpenAI chat assistant message: ``tool_calls`` (each
    ``{"id", "type": "function", "function": {"name", "arguments"}}``, arguments a JSON
    string or object) are replayed in the frozen world; a message without tool calls is the
    final answer, graded as `rlenv run` grades it."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    role: Any = Field(
        default=None,
        description='"assistant" or left out.',
        json_schema_extra={"type": ["string", "null"]},
    )
    content: Any = Field(
        default=None,
        description="The assistant message's text (the final answer when there are no tool calls).",
        json_schema_extra={"type": ["string", "null"]},
    )
    tool_calls: Any = Field(
        default=None,
        description="OpenAI tool calls: [{id, type: function, function: {name, arguments}}].",
        json_schema_extra={"type": ["array", "null"], "items": {"type": "object"}},
    )
    usage: Any = Field(
        default=None,
        description="Token counts of this turn ({prompt_tokens, completion_tokens, total_tokens}).",
        json_schema_extra={"type": ["object", "null"]},
    )


class RlenvObservation(Observation):
    """What the world answers: at reset the prompt and the tool schemas; after a tool call its
    results; at the end (``done``) the results line with its verdicts and reward."""

    episode_id: str = Field(default="", description="The episode this observation belongs to.")
    input_id: str = Field(default="", description="The input the episode is on.")
    rollout: int = Field(default=0, description="The rollout index of that input.")
    seed: int = Field(default=0, description="The rollout's derived seed.")
    turn: int = Field(default=0, description="The model turn the world now waits for.")
    messages: list[dict[str, Any]] = Field(
        default_factory=list,
        description="New messages: the prompt at reset, the tool results after a tool call.",
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="The env's tools as OpenAI function schemas (reset)."
    )
    status: str | None = Field(default=None, description="The rollout's status once done.")
    verifiers: list[dict[str, Any]] = Field(
        default_factory=list, description="Each verifier's outcome once done."
    )
    passed: bool | None = Field(default=None, description="Whether the verifiers passed.")
    rewards: dict[str, Any] | None = Field(
        default=None, description="The composite reward's components and total once done."
    )
    record: dict[str, Any] | None = Field(
        default=None, description="The episode's results line (as in results.jsonl) once done."
    )


class RlenvState(State):
    """The env and, once reset, the episode's trajectory so far."""

    env: dict[str, Any] = Field(default_factory=dict, description="Name, version, fingerprint.")
    tools: list[dict[str, Any]] = Field(default_factory=list)
    simulated_user: bool = Field(
        default=False,
        description="The env has a simulated user: an agent's reply is answered with the"
        " user's next turn until the user (or max_turns) ends the episode.",
    )
    input_id: str | None = None
    rollout: int | None = None
    done: bool = False
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
