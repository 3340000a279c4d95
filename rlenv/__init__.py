"""rlenv: frozen RL test environments for language-model policies.

Public functions are imported lazily so `import rlenv` (and `rlenv --help`) stays fast.
"""

from __future__ import annotations

from typing import Any

from rlenv.version import __version__

__all__ = ["__version__", "run", "validate", "verify"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from rlenv.runner import run

        return run
    if name == "validate":
        from rlenv.validate import validate

        return validate
    if name == "verify":
        from rlenv.verify import verify

        return verify
    raise AttributeError(name)
