"""The OpenEnv server of a frozen env, built with `openenv-core` (extra ``serve``).

`create_app` of openenv-core gives the protocol (``/health``, ``/schema``, ``/metadata``,
``/reset``, ``/step``, ``/state``, ``/ws``) and its WebSocket sessions, one environment
instance per session; each instance drives :class:`rlenv.serve.episodes.Episode` s over the
shared :class:`ServedWorld`. Over plain HTTP (stateless in OpenEnv: a fresh instance per
request) an episode is found again by the ``episode_id`` that `/reset` returned.

Imported by :func:`rlenv.serve.server.serve` once the arguments, the spec and the port have
been checked, so a refused `rlenv serve` never pays for openenv-core's import.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
from typing import Any

from rlenv.serve.episodes import (
    MAX_ACTION_BYTES,
    Episode,
    ServedWorld,
    ServeError,
    Step,
    composite_reward,
    model_reply,
)
from rlenv.serve.models import RlenvAction, RlenvObservation, RlenvState
from rlenv.serve.openenv_core import without_web_ui

with without_web_ui():
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import EnvironmentMetadata

MAX_BODY_BYTES = 2 * MAX_ACTION_BYTES
"""An HTTP request body larger than this is refused (413) before it is read."""
WS_MAX_BYTES = 4 * MAX_ACTION_BYTES
"""A WebSocket message larger than this closes the connection (1009, the protocol's own)."""

_OVER_HTTP: contextvars.ContextVar[bool] = contextvars.ContextVar("over_http", default=False)


def observation(episode: Episode, step: Step, tools: list[dict[str, Any]]) -> RlenvObservation:
    record = step.record
    done = record is not None
    reward = None
    if record is not None:
        reward = composite_reward(
            record, episode.world.prepared.loaded.spec.reward_model is not None
        )
    return RlenvObservation(
        done=done,
        reward=reward,
        episode_id=episode.episode_id,
        input_id=episode.input.id,
        rollout=episode.task.rollout,
        seed=episode.seed,
        turn=step.turn,
        messages=step.messages,
        tools=tools,
        status=None if record is None else record.get("status"),
        verifiers=[] if record is None else list(record.get("verifiers") or []),
        passed=None if record is None else record.get("passed"),
        rewards=None if record is None else record.get("rewards"),
        record=record,
    )


class ServedEnvironment(Environment[RlenvAction, RlenvObservation, RlenvState]):
    """One OpenEnv environment instance: a WebSocket session's, or one HTTP request's."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    world: ServedWorld  # set on the subclass `make_app` builds
    max_sessions: int = 1
    _numbers = itertools.count(1)

    def __init__(self) -> None:
        super().__init__()
        self.episode: Episode | None = None
        self.steps = 0
        self.over_http = _OVER_HTTP.get()

    # -- the protocol ----------------------------------------------------------------------

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> RlenvObservation:
        raise ServeError("this env is asynchronous: reset is served by reset_async")

    def step(
        self, action: RlenvAction, timeout_s: float | None = None, **kwargs: Any
    ) -> RlenvObservation:
        raise ServeError("this env is asynchronous: step is served by step_async")

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        input_id: str | None = None,
        **kwargs: Any,
    ) -> RlenvObservation:
        """Enter a fresh frozen world for one input (`input_id`, else `seed` mod the number of
        inputs, else the next in order): the prompt messages and the tool schemas."""
        world = self.world
        if kwargs:
            raise ServeError(
                f"unknown reset parameter {sorted(kwargs)[0]!r} (seed, episode_id, input_id)"
            )
        if episode_id is not None and episode_id in world.episodes:
            raise ServeError(f"episode_id {episode_id!r} is in progress already")
        if self.over_http and len(world.episodes) >= self.max_sessions:
            raise ServeError(
                f"{len(world.episodes)} episodes are in progress over HTTP (the limit):"
                " finish one first"
            )
        if self.episode is not None:  # a new reset on a session abandons its episode
            self._abandon()
        name = episode_id or f"episode-{next(self._numbers)}"
        episode = world.open(name, input_id, seed)
        self.episode, self.steps = episode, 0
        if self.over_http:
            world.episodes[name] = episode
        try:
            first = await episode.start()
        except BaseException:
            self._abandon()
            raise
        return observation(episode, first, world.tools)

    async def step_async(
        self,
        action: RlenvAction,
        timeout_s: float | None = None,
        episode_id: str | None = None,
        **kwargs: Any,
    ) -> RlenvObservation:
        """One model turn: tool calls are replayed (their results come back), a message
        without tool calls is the final answer (graded; the results line comes back), or, when
        the env has a simulated user, the agent's reply (the user's next turn comes back until
        the user or max_turns ends the episode; then it is graded)."""
        episode = self._episode(episode_id)
        reply = model_reply(action.model_dump(exclude_none=True))
        step = await episode.step(reply)
        self.steps += 1
        if step.done:
            self.world.episodes.pop(episode.episode_id, None)
        return observation(episode, step, [])

    @property
    def state(self) -> RlenvState:
        world = self.world
        episode = self.episode
        user = world.prepared.loaded.spec.user is not None
        if episode is None:
            return RlenvState(env=world.describe(), tools=world.tools, simulated_user=user)
        return RlenvState(
            episode_id=episode.episode_id,
            step_count=self.steps,
            env=world.describe(),
            tools=world.tools,
            simulated_user=user,
            input_id=episode.input.id,
            rollout=episode.task.rollout,
            done=episode.done,
            messages=[dict(message) for message in episode.messages],
            tool_calls=[dict(call) for call in episode.tool_calls],
        )

    def get_metadata(self) -> EnvironmentMetadata:
        spec = self.world.prepared.loaded.spec
        return EnvironmentMetadata(
            name=spec.name,
            description=spec.description or f"rlenv env {spec.name}",
            version=str(spec.version),
        )

    def close(self) -> None:
        """A WebSocket session ended: its unfinished episode is abandoned (nothing written).
        An HTTP request's instance leaves its episode to the next request."""
        if not self.over_http and self.episode is not None and not self.episode.done:
            episode = self.episode
            loop = self.world.loop
            if loop is not None:
                loop.call_soon_threadsafe(episode.cancel)

    # -- helpers --------------------------------------------------------------------------------

    def _episode(self, episode_id: str | None) -> Episode:
        if self.over_http:
            if episode_id is None:
                raise ServeError("over HTTP a step names its episode: pass episode_id")
            episode = self.world.episodes.get(episode_id)
            if episode is None:
                raise ServeError(
                    f"no episode {episode_id!r} in progress (finished, never reset, or abandoned)"
                )
            return episode
        if self.episode is None:
            raise ServeError("no episode: reset first")
        if episode_id is not None and episode_id != self.episode.episode_id:
            raise ServeError(
                f"this session's episode is {self.episode.episode_id!r}, not {episode_id!r}"
            )
        return self.episode

    def _abandon(self) -> None:
        if self.episode is not None:
            self.episode.cancel()
            self.world.episodes.pop(self.episode.episode_id, None)
            self.episode = None


class _Requests:
    """ASGI middleware: marks plain HTTP requests (their environment instances are stateless)
    and refuses a body over :data:`MAX_BODY_BYTES` with 413 and one line."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            try:
                await self.app(scope, receive, send)
            except Exception as exc:  # openenv closes a socket the client closed already
                if type(exc).__name__ not in ("WebSocketDisconnect", "ClientDisconnected"):
                    raise
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            detail = f"the request is {int(length)} bytes, more than the limit of {MAX_BODY_BYTES}"
            body = json.dumps({"detail": detail}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        token = _OVER_HTTP.set(True)
        try:
            await self.app(scope, receive, send)
        finally:
            _OVER_HTTP.reset(token)


def make_app(world: ServedWorld, max_sessions: int) -> Any:
    """The FastAPI app of openenv-core's `create_app` over `world`, up to `max_sessions`
    WebSocket sessions at once; a bad request is answered with one line (WebSocket: the
    protocol's error message; HTTP: 400 with ``detail``)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    environment = type(
        "RlenvServedEnvironment",
        (ServedEnvironment,),
        {"world": world, "max_sessions": max_sessions},
    )
    app = create_app(
        environment,
        RlenvAction,
        RlenvObservation,
        env_name=world.prepared.loaded.spec.name,
        max_concurrent_envs=max_sessions,
    )

    @app.exception_handler(ServeError)
    async def bad_request(request: Request, exc: ServeError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": str(exc)})

    @app.on_event("startup")
    async def remember_loop() -> None:
        world.loop = asyncio.get_running_loop()

    app.add_middleware(_Requests)
    return app
