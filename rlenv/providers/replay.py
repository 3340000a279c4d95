"""`replay:FILE.jsonl`: grade answers or trajectories produced elsewhere (e.g. by a trainer).

Each line: {"input_id": ..., "rollout": 0, and one of "answer" | "completion" | "messages"}.
A missing (input id, rollout) pair is a model error for that rollout, never a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlenv.errors import ModelOutputError, UserError
from rlenv.jsonl import read_objects
from rlenv.providers.base import ModelReply, ModelRequest
from rlenv.providers.python import InWorldProvider


class ReplayProvider(InWorldProvider):
    env_code = False
    """Its policy is rlenv's own code reading data: in an env without tools or a simulated
    user, a rollout runs no env code, and the workers' share of it is small (its results are
    then written by a process of their own: rlenv.results_aside)."""

    @classmethod
    def open(cls, uri: str, path: str) -> ReplayProvider:
        file = Path(path)
        if not file.is_file():
            raise UserError(f"replay file not found: {file}", where="--model")
        load_replay(file)  # fail early, in the orchestrator, with file:line
        provider = cls(f"replay:{file.resolve()}")
        provider.display = uri
        return provider

    display: str = ""

    def check_inputs(self, inputs: list[Any], rollouts: int) -> None:
        """Every line is for an input of the env and a rollout of the run (else UserError
        naming its line: a replay made for another env or K would be ignored silently)."""
        ids = {record.id for record in inputs}
        path = Path(self.uri[len("replay:") :])
        for where, data in read_objects(path, what="replay file"):
            if str(data["input_id"]) not in ids:
                raise UserError(f"no input {str(data['input_id'])[:60]!r} in the env", where=where)
            if data.get("rollout", 0) >= rollouts:
                raise UserError(
                    f"rollout {data.get('rollout', 0)}, but the run makes {rollouts} per input"
                    " (--rollouts)",
                    where=where,
                )

    def identity(self) -> dict[str, Any]:
        from rlenv.canonical import sha256_file

        path = Path(self.uri[len("replay:") :])
        return {"uri": f"replay:{path.name}", "sha256": sha256_file(path)}


def load_replay(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for where, data in read_objects(path, what="replay file"):
        if "input_id" not in data:
            raise UserError("each replay line needs 'input_id'", where=where)
        if not any(key in data for key in ("answer", "completion", "messages")):
            raise UserError(
                "each replay line needs 'answer', 'completion' or 'messages'", where=where
            )
        rollout = data.get("rollout", 0)
        if type(rollout) is not int or rollout < 0:
            raise UserError(f"'rollout' is {rollout!r:.40}, not a rollout number", where=where)
        key = (str(data["input_id"]), rollout)
        if key in table:
            raise UserError(
                f"duplicate replay entry for input {key[0]!r} rollout {key[1]}", where=where
            )
        table[key] = data
    return table


class ReplayPolicy:
    """Worker-side: looks the rollout up and hands back its answer or whole trajectory."""

    env_code = False
    """rlenv's own code reading data: a rollout it answers runs no env code unless the env has
    tools or a simulated user (`rlenv.worker.protocol`: no child of its own then)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.table = load_replay(Path(uri[len("replay:") :]))

    def trajectory(self, input_id: str, rollout: int) -> list[dict[str, Any]] | None:
        entry = self.table.get((input_id, rollout))
        if entry is None or "messages" not in entry:
            return None
        return [dict(message) for message in entry["messages"]]

    def answered(self, input_id: str, rollout: int) -> dict[str, Any] | None:
        """The assistant message `complete_sync` would reply for an entry that replays an
        answer (or completion) without usage: a reply with nothing to add up. None for any
        other entry, or none (the agent loop then asks `complete_sync`)."""
        entry = self.table.get((input_id, rollout))
        if entry is None or "messages" in entry or entry.get("usage"):
            return None
        text = entry.get("answer", entry.get("completion"))
        return {"role": "assistant", "content": None if text is None else str(text)}

    def complete_sync(self, request: ModelRequest) -> ModelReply:
        entry = self.table.get((request.input_id, request.rollout))
        if entry is None:
            raise ModelOutputError(
                f"no replay entry for input {request.input_id!r} rollout {request.rollout}"
            )
        text = entry.get("answer", entry.get("completion"))
        return ModelReply(
            message={"role": "assistant", "content": None if text is None else str(text)},
            usage=dict(entry.get("usage") or {}),
        )
