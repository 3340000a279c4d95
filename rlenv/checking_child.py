"""The checking child: the env's in-world checks (those that import its python modules) run in
a child interpreter with the frozen world's environment variables and socket filter, so
module-level env code never runs in the orchestrator, which holds the API keys and the network.
`rlenv.env.load_environment` starts it; the problems come back as plain data on a pipe.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlenv.errors import Problems, SpecError, UserError

if TYPE_CHECKING:
    from rlenv.spec import LoadedSpec

ResultsOf = Callable[["LoadedSpec", Any, "str | None", bool], "dict[str, list[UserError] | None]"]
"""`rlenv.env`'s in-world checks of a purpose, run here: each check's problems (None: skipped)."""


def problems_to_data(problems: list[UserError]) -> list[dict[str, Any]]:
    """Problems as plain data, to cross a process boundary (an exception's pickle is code)."""
    flat: list[UserError] = []
    for problem in problems:
        flat.extend(problem.problems if isinstance(problem, Problems) else [problem])
    return [
        {"spec": isinstance(p, SpecError), "message": p.message, "where": p.where} for p in flat
    ]


def problems_from_data(data: Any) -> list[UserError]:
    """The problems `problems_to_data` described (what is not one is left out)."""
    problems: list[UserError] = []
    for item in data if isinstance(data, list) else []:
        if isinstance(item, dict) and isinstance(item.get("message"), str):
            where = item.get("where")
            kind = SpecError if item.get("spec") else UserError
            problems.append(kind(item["message"], where=where if isinstance(where, str) else None))
    return problems


_BODY = "from rlenv.env import _world_child; _world_child()"


class CheckingChild:
    """The in-world checks of one `load_environment`, running in a child interpreter started
    with the frozen world's environment variables (`world_environment`: no API key), which
    installs the world's socket filter before it imports any env module. Its answer comes back
    as JSON on a pipe of its own; what env code prints goes to stderr."""

    def __init__(
        self, loaded: LoadedSpec, purpose: str, model: str | None, defer_expensive: bool
    ) -> None:
        from rlenv.world.environment import world_environment

        spec = loaded.path
        self.read, write = os.pipe()
        request = {
            # the spec as loaded here, sent as data: the child neither reads nor validates it
            # again (building the spec's validators was a third of `rlenv validate`)
            "loaded": base64.b64encode(pickle.dumps(loaded)).decode("ascii"),
            "purpose": purpose,
            "model": model,
            "defer_expensive": defer_expensive,
            "answer_fd": write,
        }
        # -P: no cwd (nor the script's directory) at the front of sys.path, and rlenv's own
        # directory first: a decoy `rlenv/` where the user stands must not answer the checks
        home = str(Path(__file__).resolve().parent.parent)  # the directory holding rlenv/
        body = f"import sys; sys.path.insert(0, {home!r}); {_BODY}"
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-c", body],
                stdin=subprocess.PIPE,
                stdout=2,  # what env code prints at import: stderr, never the JSON on stdout
                env=world_environment(),
                pass_fds=(write,),
            )
        finally:
            os.close(write)
        assert self.process.stdin is not None
        with self.process.stdin:
            self.process.stdin.write(json.dumps(request).encode())
        self.found: dict[str, list[UserError]] | None = None
        self.where = str(spec)

    def problems(self, name: str) -> list[UserError]:
        """The problems the child's check `name` found (waits for the child once)."""
        if self.found is None:
            self.found = self._wait()
        return self.found.get(name, [])

    def _wait(self) -> dict[str, list[UserError]]:
        with os.fdopen(self.read, "rb") as answer:
            self.read = -1
            data = answer.read()
        code = self.process.wait()
        try:
            found = json.loads(data)
            checks = found["checks"]
        except (ValueError, TypeError, KeyError):
            raise UserError(
                "importing the env's python modules ended the process that checks them (exit"
                f" code {code}) before the checks finished: module-level code must not exit",
                where=self.where,
            ) from None
        if found.get("error"):
            raise UserError(
                f"checking the env's modules failed: {found['error']}", where=self.where
            )
        return {name: problems_from_data(items) for name, items in checks.items()}

    def close(self) -> None:
        if self.read >= 0:
            os.close(self.read)
            self.read = -1
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def answer_checks(results_of: ResultsOf) -> None:
    """The checking child's body (`CheckingChild`): read the request on stdin, enter the world's
    socket filter, run the in-world checks (`results_of`), write {"checks": {name: [problem,
    ...]}}."""
    request = json.loads(sys.stdin.buffer.read())
    answer_fd = int(request["answer_fd"])
    os.set_inheritable(answer_fd, False)  # nothing env code starts gets the answer pipe
    from rlenv.world import sockets
    from rlenv.world.light_imports import leave_out_httpx_cli

    sockets.install(whole_process=True)
    leave_out_httpx_cli()  # as a worker imports env code
    checks: dict[str, list[dict[str, Any]]] = {}
    error = None
    try:
        results = results_of(
            pickle.loads(base64.b64decode(request["loaded"])),
            request["purpose"],
            request["model"],
            request["defer_expensive"],
        )
        checks = {name: problems_to_data(found) for name, found in results.items() if found}
    except Exception as exc:  # not env code's (import_ref says that in one line): ours
        error = f"{type(exc).__name__}: {exc}"
    payload = json.dumps({"checks": checks, "error": error}).encode()
    with os.fdopen(answer_fd, "wb") as answer:
        answer.write(payload)


__all__ = ["CheckingChild", "answer_checks", "problems_from_data", "problems_to_data"]
