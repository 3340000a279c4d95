"""`jsonschema`, imported without compiling grammars no caller may need.

jsonschema's format module imports `rfc3987_syntax` (when installed, as the `format-nongpl`
extra does) for its ``iri`` format, and that module compiles 39 lark grammars at import: about
4.5 s of CPU, most of a frozen-world worker's start, paid by every worker of an env with tools
although tool arguments never check a format. Here the module is a stand-in until the first
``iri`` check, which imports the real one and goes through it: the same checkers are
registered and the same answers given, only later.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_DEFERRED = "rfc3987_syntax"


def load_jsonschema() -> types.ModuleType:
    """The `jsonschema` module (imported now if it was not, with ``iri`` deferred)."""
    if "jsonschema" not in sys.modules and _DEFERRED not in sys.modules:
        try:
            installed = importlib.util.find_spec(_DEFERRED) is not None
        except (ImportError, ValueError):
            installed = False
        if installed:
            sys.modules[_DEFERRED] = _stand_in()
    import jsonschema

    return jsonschema


def _stand_in() -> types.ModuleType:
    stand_in = types.ModuleType(_DEFERRED)

    def is_valid_syntax(*args: Any, **kwargs: Any) -> Any:
        if sys.modules.get(_DEFERRED) is stand_in:
            del sys.modules[_DEFERRED]
        real = importlib.import_module(_DEFERRED)
        return real.is_valid_syntax(*args, **kwargs)

    stand_in.is_valid_syntax = is_valid_syntax  # type: ignore[attr-defined]
    return stand_in
