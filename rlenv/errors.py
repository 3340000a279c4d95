"""Error classes that decide how a failure is reported and which exit code it gets."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (spec, files, arguments): one line, exit code 2, no traceback."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class SpecError(UserError):
    """A problem in an env spec or a file it references."""


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


class WorkerLost(Exception):
    """A worker was killed for overrunning ``limits.timeout_s`` or died under a call (env code
    called ``os._exit``, segfaulted, was SIGKILLed): ``status`` is the rollout's status
    (``timeout``, or the error status of what was running), ``error`` says what happened. The
    executor has already replaced the worker."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
