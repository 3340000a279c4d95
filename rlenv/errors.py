"""Error classes that decide how a failure is reported and which exit code it gets."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


class UserError(Exception):
    """Bad input from the user (spec, files, arguments): one line, exit code 2, no traceback."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole (class, message, where, any attribute of a subclass): a run's
        results writer raises it from another process (rlenv.results_aside)."""
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Exception:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class SpecError(UserError):
    """A problem in an env spec or a file it references."""


class Problems(SpecError):
    """Several user errors found in one pass (`validate` lists them all): printed one per line,
    exit code 2; ``str()`` is the first, with how many more."""

    def __init__(self, problems: list[UserError]) -> None:
        self.problems = problems
        first = problems[0]
        rest = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(str(first) + rest)
        self.where = first.where

    @property
    def lines(self) -> list[str]:
        return [str(problem) for problem in self.problems]


class RunFailed(Exception):
    """The run could not finish (exit code 1)."""


class InfraError(Exception):
    """The model endpoint (or another piece of infrastructure) failed; not the model's fault."""


class ModelOutputError(Exception):
    """The model answered, but in a form the environment cannot use (a model failure)."""


class FixtureMiss(Exception):
    """A tool made a request that was never recorded and no fallback was declared."""


class VerifierCrash(Exception):
    """A verifier tried to end its process (SystemExit, KeyboardInterrupt or another
    BaseException): the rollout's status is ``verifier_error`` and it does not pass."""

    def __init__(self, message: str, frames: list[str] | None = None) -> None:
        super().__init__(message)
        self.frames = frames or []
        self.results: Sequence[Mapping[str, Any]] = []  # each verifier's result, this one ungraded


class PolicyCrash(Exception):
    """An in-world policy raised (or tried to end its process): the rollout is a policy error.
    ``frames`` is the short traceback of the env's own code (:func:`env_frames`)."""

    def __init__(self, message: str, frames: list[str] | None = None) -> None:
        super().__init__(message)
        self.frames = frames or []


TRACEBACK_FRAMES = 5
"""How many of the env's innermost frames an error keeps."""


def env_frames(exc: BaseException, limit: int = TRACEBACK_FRAMES) -> list[str]:
    """The short traceback of an error in env code: its innermost frames that belong to the
    env (not rlenv, the standard library or installed packages), one line each:
    ``my_env/tools.py:12 in search: return data["b"]``.

    Files are named by module (``pkg/mod.py``), never by host path, so a record that carries
    them keeps the same digest on every machine.
    """
    import linecache
    import os
    import sysconfig
    import traceback

    installed = {
        os.path.realpath(path)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
    frames: list[str] = []
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        filename = frame.f_code.co_filename
        module = str(frame.f_globals.get("__name__") or "")
        if filename.startswith("<") or module == "rlenv" or module.startswith("rlenv."):
            continue
        real = os.path.realpath(filename)
        parts = real.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            continue
        if any(real.startswith(root + os.sep) for root in installed):
            continue
        if module and module != "__main__":
            shown = module.replace(".", "/")
            shown += "/__init__.py" if filename.endswith("__init__.py") else ".py"
        else:
            shown = os.path.basename(filename)
        code = linecache.getline(filename, lineno).strip()
        frames.append(f"{shown}:{lineno} in {frame.f_code.co_name}" + (f": {code}" if code else ""))
    return frames[-limit:]


class WorkerLost(Exception):
    """A worker was killed for overrunning ``limits.timeout_s`` or died under a call (env code
    called ``os._exit``, segfaulted, was SIGKILLed): ``status`` is the rollout's status
    (``timeout``, or the error status of what was running), ``error`` says what happened. The
    executor has already replaced the worker."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


def portable(error: BaseException, fallback: Callable[[str], BaseException]) -> BaseException:
    """`error` itself if its pickle is rebuilt (one of rlenv's helper processes hands it to
    the orchestrator, which raises it as it is: its class, message and ``where``), else
    `fallback` made from its type and message."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return fallback(f"{type(error).__name__}: {error}")
    return error
