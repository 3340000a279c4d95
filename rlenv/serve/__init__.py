"""`rlenv serve`: the frozen env as an OpenEnv environment server (extra ``serve``).

A trainer anywhere (TRL, verl, NeMo RL, prime-rl) resets an episode on one input, sends each
model turn as an action (tool calls replayed in a frozen-world worker, or the final answer),
and gets back the graded results line; every episode is a line of the run directory, so
`rlenv report`, `compare` and `check` read a served session as a run.

    from rlenv.serve import serve
    serve("envs/search.yaml", out="runs/served", port=8000)

The server itself (`rlenv.serve.app`) imports openenv-core, FastAPI and uvicorn; it is
imported only when serving, once the arguments, the spec and the port have been checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlenv.extras import require_extra


def serve(spec_path: str | Path, **options: Any) -> dict[str, Any]:
    """Serve the env until interrupted; return the summary written to the run directory (see
    :func:`rlenv.serve.server.serve` for the options)."""
    require_extra("serve", "rlenv serve (an OpenEnv server)")
    from rlenv.serve.server import serve as run_server

    return run_server(spec_path, **options)


__all__ = ["serve"]
