"""A served env in TRL's GRPOTrainer, through openenv-core's own client (extra ``serve``).

    from rlenv.serve.client import environment_factory, reward_func

    Env = environment_factory("http://envhost:8000")
    trainer = GRPOTrainer(model=..., train_dataset=dataset,  # rows carry ``rlenv_id``
                          environment_factory=Env, reward_funcs=[reward_func], ...)

Each environment instance holds one WebSocket session: `reset(**row)` starts an episode on the
row's ``rlenv_id``, the env's tools are its methods (each call is a step, replayed in the
frozen world), and `reward_func` sends each completion's final answer as the last step and
returns the reward the server graded, exactly as `rlenv run` grades it. No env code and no
spec is needed on the trainer's machine.
"""

from __future__ import annotations

import json
from typing import Any

from rlenv.tool_methods import tool_method

_NO_USER_TURNS = (
    "the env has a simulated user, and TRL's environment_factory plays tool turns only, so an"
    " episode never ends on the model's final reply; train it in-process with rlenv.trl (its"
    " user turns not played) or drive served episodes with a loop that answers the user"
)


def _connect(base_url: str) -> Any:
    from rlenv.serve.openenv_core import without_web_ui

    with without_web_ui():
        from openenv.core.generic_client import GenericEnvClient

    client = GenericEnvClient(base_url=base_url, message_timeout_s=600).sync()
    client.connect()
    return client


class ServedEnvironment:
    """Base of the classes `environment_factory` builds (TRL takes every public method but
    `reset` for a tool: the helpers here are private)."""

    base_url: str = ""

    def __init__(self) -> None:
        self.client = _connect(self.base_url)
        self.observation: dict[str, Any] = {}
        self.calls = 0
        self.result: dict[str, Any] | None = None

    def reset(self, **row: Any) -> str | None:
        """Start an episode on the row's input (``rlenv_id``; else the server's next)."""
        input_id = row.get("rlenv_id")
        result = self.client.reset(**({"input_id": str(input_id)} if input_id else {}))
        self.observation, self.calls, self.result = result.observation, 0, None
        return None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        call = {
            "id": f"call_{self.calls}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, sort_keys=True)},
        }
        self.calls += 1
        result = self.client.step({"tool_calls": [call]})
        self.observation = result.observation
        if result.done:  # the spec's max_turns was reached: the episode was graded
            self.result = result.observation
            return "the episode is over"
        tool = [m for m in result.observation["messages"] if m.get("role") == "tool"]
        return str(tool[-1]["content"]) if tool else ""

    def _finish(self, answer: str) -> float | None:
        """Send the final answer; the graded reward (None if not gradable)."""
        if self.result is None:
            result = self.client.step({"content": answer})
            if not result.done:  # a simulated user answered: TRL has no turn to play it
                raise RuntimeError(
                    f"episode {result.observation.get('episode_id')}: {_NO_USER_TURNS}"
                )
            self.result = result.observation
            return result.reward
        return self.result.get("reward") if isinstance(self.result, dict) else None

    def _close(self) -> None:
        self.client.close()


def environment_factory(base_url: str) -> type[ServedEnvironment]:
    """A class for GRPOTrainer(environment_factory=...) over the env served at `base_url`:
    its tools (read from the server's state) are the class's methods. An env with a simulated
    user is refused (ValueError): TRL's loop has no user turns, so no episode would finish."""
    client = _connect(base_url)
    try:
        state = client.state()
    finally:
        client.close()
    namespace: dict[str, Any] = {"base_url": base_url}
    for tool in state.get("tools") or []:
        function = tool["function"]
        namespace[function["name"]] = tool_method(
            function["name"], function.get("description") or "", function.get("parameters") or {}
        )
    name = str((state.get("env") or {}).get("name") or "served").replace("-", "_")
    if state.get("simulated_user"):
        raise ValueError(f"the env served at {base_url} ({name}): {_NO_USER_TURNS}")
    return type(f"Served_{name}", (ServedEnvironment,), namespace)


def final_text(completion: Any) -> str:
    """The final answer of a TRL completion (text, or the last assistant message's text)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(list(completion)):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def reward_func(
    completions: list[Any], environments: list[Any] | None = None, **_: Any
) -> list[float | None]:
    """TRL reward function: each completion's final answer is its episode's last step; the
    reward is the one the server graded (the composite reward of `rlenv run`)."""
    if not environments:
        raise ValueError("reward_func needs environment_factory=environment_factory(URL)")
    return [
        environment._finish(final_text(completion))
        for completion, environment in zip(completions, environments, strict=True)
    ]
