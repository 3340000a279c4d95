"""A python method standing for one tool, as TRL's ``environment_factory`` wants it: its
signature, type hints and docstring describe the tool's JSON-schema parameters, and a call goes
to the instance's ``_call(name, arguments)`` (the in-process env, `rlenv.trl`, or a served one,
`rlenv.serve.client`)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def tool_method(name: str, description: str, parameters: dict[str, Any]) -> Callable[..., str]:
    """A method named `name` whose signature, type hints and docstring describe the tool's
    JSON-schema parameters (what TRL/transformers turn back into the tool schema)."""
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    doc_args = []
    for arg, schema in properties.items():
        kind = JSON_TYPES.get(str(schema.get("type")), str)
        annotations[arg] = kind
        default = inspect.Parameter.empty if arg in required else None
        params.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        )
        doc_args.append(f"    {arg}: {schema.get('description') or arg}")

    def method(self: Any, **arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None or k in required}
        return self._call(name, given)

    method.__name__ = method.__qualname__ = name
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = (description or name) + (
        "\n\nArgs:\n" + "\n".join(doc_args) if doc_args else ""
    )
    return method
