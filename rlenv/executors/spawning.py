"""How `LocalExecutor` spawns a worker through multiprocessing's spawn: without the caller's
main module, through the world's command, with the world's variables only, and with no
resource tracker of its own."""

from __future__ import annotations

import os
from typing import Any


def without_main(preparation: Any) -> Any:
    """multiprocessing's preparation data for a spawned worker, without the caller's main
    module: spawn runs the parent's ``__main__`` file again in the child (as ``__mp_main__``),
    so a training script that calls rlenv (the TRL callback, `runner.run`) without an
    ``if __name__ == "__main__"`` guard ran again inside every frozen-world worker (training
    again, or failing there); a script read from stdin could not start a worker at all. A
    worker runs rlenv's own code only."""

    def prepared(name: str) -> dict[str, Any]:
        data: dict[str, Any] = preparation(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    return prepared


_NOWHERE: list[int] = []


def no_tracker() -> int:
    """A spawned worker's descriptor for multiprocessing's resource tracker: /dev/null, not a
    tracker process (~7 MB of a run's peak). What env code makes in it lives in the worker's
    own /dev/shm, emptied after every call; its registrations go to /dev/null."""
    if not _NOWHERE:
        _NOWHERE.append(os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC))
    return _NOWHERE[0]


def prefixed(command_line: Any, command: list[str]) -> Any:
    """multiprocessing's command line for a spawned worker with `command` (ending with the
    interpreter) in place of its interpreter."""

    def prefixed(**keywords: Any) -> list[str]:
        return [*command, *command_line(**keywords)[1:]]

    return prefixed


def spawn_with(environment: dict[str, str]) -> Any:
    """multiprocessing's `spawnv_passfds` with `environment` instead of the orchestrator's."""

    def spawnv_passfds(path: str, args: list[str], passfds: Any) -> int:
        passed = sorted({int(fd) for fd in passfds})
        for fd in passed:
            os.set_inheritable(fd, True)
        try:
            return os.posix_spawn(path, args, environment)
        finally:
            for fd in passed:
                os.set_inheritable(fd, False)

    return spawnv_passfds
