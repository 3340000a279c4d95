"""`jsonschema`, imported without the format libraries no caller may need.

jsonschema's format module imports, when installed (the `format-nongpl` extra), a library per
format at its own import: `rfc3987_syntax` for ``iri`` compiles 39 lark grammars (about 4.5 s
of CPU), `rfc3986_validator` for ``uri`` compiles its grammar's regular expressions (~60 ms),
`isoduration` for ``duration`` imports arrow and dateutil (~30 ms). Every frozen-world worker
of an env with tools paid for them, although tool arguments are checked without formats. Here
each is a stand-in while jsonschema imports: the same checkers are registered (a stand-in
stands only for a library that is installed), and the first check of such a format imports
the real library and goes through it, with the same answers. A worker imports, at its start,
the libraries of the formats its graders' schemas name (`load_formats`), so no rollout's child
pays for them. The stand-ins leave `sys.modules` as soon as jsonschema holds them: code that
imports one of these libraries itself gets the real one.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_DEFERRED: dict[str, tuple[str, ...]] = {
    # module: the functions jsonschema's format module takes from it
    "rfc3987_syntax": ("is_valid_syntax",),
    "rfc3986_validator": ("validate_rfc3986",),
    "isoduration": ("parse_duration",),
}
FORMAT_MODULES: dict[str, str] = {
    "iri": "rfc3987_syntax",
    "iri-reference": "rfc3987_syntax",
    "uri": "rfc3986_validator",
    "uri-reference": "rfc3986_validator",
    "duration": "isoduration",
}
"""The formats whose checker needs a deferred module (jsonschema's ``_format``)."""
# keywords whose values are instances, not schemas: a "format" key inside them is data
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "example"})


class DurationParsingException(ValueError):
    """`isoduration.DurationParsingException`, as the ``duration`` checker catches it: the
    real one is raised again as this (its class is not loaded until the first check)."""


def load_jsonschema() -> types.ModuleType:
    """The `jsonschema` module (imported now if it was not, its format libraries deferred)."""
    if "jsonschema" in sys.modules:
        return sys.modules["jsonschema"]
    stand_ins = {
        name: _stand_in(name) for name in _DEFERRED if name not in sys.modules and _installed(name)
    }
    sys.modules.update(stand_ins)
    try:
        import jsonschema
    finally:
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    return jsonschema


def load_formats(formats: Iterable[str]) -> None:
    """Import now the libraries the checkers of `formats` need (those jsonschema has), so a
    worker's rollouts, each in a fresh child of it, do not import them at every first check."""
    load_jsonschema()
    for name in sorted({FORMAT_MODULES[f] for f in formats if f in FORMAT_MODULES}):
        if _installed(name):
            importlib.import_module(name)


def schema_formats(schema: Any) -> Iterator[str]:
    """Every `format` a schema names (not those inside const/enum/default/examples data)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "format" and isinstance(value, str):
                yield value
            elif key not in _DATA_KEYWORDS:
                yield from schema_formats(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from schema_formats(item)


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _stand_in(name: str) -> types.ModuleType:
    stand_in = types.ModuleType(name)
    for function in _DEFERRED[name]:
        setattr(stand_in, function, _deferred(name, function))
    if name == "isoduration":
        stand_in.DurationParsingException = DurationParsingException  # type: ignore[attr-defined]
    return stand_in


def _deferred(name: str, function: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        real = importlib.import_module(name)
        if name != "isoduration":
            return getattr(real, function)(*args, **kwargs)
        try:
            return getattr(real, function)(*args, **kwargs)
        except real.DurationParsingException as exc:
            raise DurationParsingException(*exc.args) from exc

    call.__name__ = call.__qualname__ = function
    return call
