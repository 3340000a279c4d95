"""`pkg.module:name` import strings resolved to objects, with a one-line error when they cannot
be: how tools, verifiers, reward functions and python policies are named. Ground floor, so the
graders and the providers both use it without importing each other.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from rlenv.errors import UserError


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr for a while: what env code prints when it is
    imported (in the orchestrator, by the checks) never reaches `rlenv ... --json`."""
    for stream in (sys.stdout, sys.__stdout__):
        with contextlib.suppress(Exception):
            stream.flush()  # type: ignore[union-attr]
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all
        yield
        return
    os.dup2(2, 1)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.__stdout__):
            with contextlib.suppress(Exception):
                stream.flush()  # type: ignore[union-attr]
        os.dup2(saved, 1)
        os.close(saved)


def import_ref(ref: str, *, what: str) -> Any:
    """Resolve `pkg.module:name` to an object, with a one-line error when it cannot be. What
    the module prints while it is imported goes to stderr."""
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise UserError(f"{what}: expected 'pkg.module:name', got {ref!r}")
    try:
        with _stdout_to_stderr():
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{what}: cannot import module {module_name!r} ({exc})") from None
    except Exception as exc:
        raise UserError(
            f"{what}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    except (SystemExit, KeyboardInterrupt) as exc:  # module-level code must not end the process
        raise UserError(
            f"{what}: importing {module_name!r} tried to end the process:"
            f" {type(exc).__name__}({exc})"
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UserError(f"{what}: module {module_name!r} has no {attribute!r}") from None


__all__ = ["import_ref"]
