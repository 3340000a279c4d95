"""Error classes that decide how a failure is reported and which exit code it gets."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (spec, files, arguments): one line, exit code 2, no traceback."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


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
