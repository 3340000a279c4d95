"""Run by `rlenv import inspect` in a python that has inspect_ai (never in rlenv's own process):
loads one task of an Inspect AI task file and prints what rlenv needs to write a spec, as one
JSON object on stdout.

    python inspect_loader.py FILE.py TASK

It imports nothing of rlenv (it runs in Inspect's venv). A task it cannot load is one line on
stderr and exit code 2.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

# GenerateConfig fields rlenv's decoding carries; any other one set is reported as left out
CARRIED_CONFIG = ("temperature", "top_p", "top_k", "max_tokens", "stop_seqs", "seed")


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(2)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a registry parameter (objects become their registry name or repr)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return repr(value)


def _registry(obj: Any) -> tuple[str, dict[str, Any]]:
    from inspect_ai._util.registry import registry_info, registry_params

    try:
        name = registry_info(obj).name
    except ValueError:
        return getattr(obj, "__qualname__", repr(obj)), {}
    try:
        params = registry_params(obj)
    except ValueError:
        params = {}
    return name, _plain(params)


def _tools(solver: Any) -> list[dict[str, Any]]:
    """The tools a use_tools() solver holds (found in its closure), as name/description/schema."""
    from inspect_ai._util.registry import is_registry_object
    from inspect_ai.tool import ToolDef

    found: list[Any] = []

    def collect(value: Any) -> None:
        if isinstance(value, list | tuple):
            for item in value:
                collect(item)
        elif isinstance(value, ToolDef) or is_registry_object(value, "tool"):
            found.append(value)

    for cell in getattr(solver, "__closure__", None) or ():
        try:
            collect(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    tools = []
    for item in found:
        definition = item if isinstance(item, ToolDef) else ToolDef(item)
        tools.append(
            {
                "name": definition.name,
                "description": definition.description,
                "parameters": definition.parameters.model_dump(exclude_none=True),
            }
        )
    return tools


def _solvers(task: Any) -> list[dict[str, Any]]:
    solver = task.solver
    # a Chain keeps its solvers in _solvers, a Plan in steps; anything else is one solver
    steps = list(getattr(solver, "_solvers", None) or getattr(solver, "steps", None) or [solver])
    described = []
    for step in steps:
        name, params = _registry(step)
        entry: dict[str, Any] = {"name": name, "params": params}
        if name.endswith("use_tools"):
            entry["tools"] = _tools(step)
        described.append(entry)
    return described


def _content(message: Any) -> str | None:
    text = message.content
    return text if isinstance(text, str) else None


def _samples(task: Any) -> list[dict[str, Any]]:
    samples = []
    for index, sample in enumerate(task.dataset):
        data = sample.model_dump(exclude_none=True, mode="json")
        if not isinstance(sample.input, str):
            messages = []
            for message in sample.input:
                messages.append({"role": message.role, "content": _content(message)})
            data["input"] = messages
        data["index"] = index
        samples.append(data)
    return samples


def describe(file: Path, name: str) -> dict[str, Any]:
    """What rlenv needs from task `name` of `file`: samples, solvers, scorers, config."""
    from inspect_ai._util.registry import registry_info

    spec = importlib.util.spec_from_file_location(f"_rlenv_import_{file.stem}", file)
    if spec is None or spec.loader is None:
        _fail(f"{file}: not a python file")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.parent))
    spec.loader.exec_module(module)
    tasks = {}
    for attribute in vars(module).values():
        try:
            info = registry_info(attribute)
        except (ValueError, TypeError):
            continue
        if info.type == "task":
            tasks[info.name.split("/")[-1]] = attribute
    if name not in tasks:
        shown = ", ".join(sorted(tasks)) or "none"
        _fail(f"{file}: no task named {name!r} (tasks: {shown})")
    task = tasks[name]()
    scorers = []
    for scorer in task.scorer or []:
        scorer_name, params = _registry(scorer)
        scorers.append({"name": scorer_name, "params": params})
    config = task.config.model_dump(exclude_none=True, mode="json") if task.config else {}
    epochs = task.epochs
    return {
        "task": name,
        "samples": _samples(task),
        "solvers": _solvers(task),
        "scorers": scorers,
        "config": config,
        "epochs": getattr(epochs, "epochs", epochs),
        "epochs_reducer": [_registry(r)[0] for r in (getattr(epochs, "reducer", None) or [])],
        "message_limit": task.message_limit,
        "limits": {
            key: getattr(task, key)
            for key in ("token_limit", "time_limit", "working_limit", "cost_limit")
            if getattr(task, key, None) is not None
        },
        "setup": task.setup is not None,
        "sandbox": task.sandbox is not None,
    }


def main() -> None:
    if len(sys.argv) != 3:
        _fail("usage: inspect_loader.py FILE.py TASK")
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        _fail("inspect_ai is not importable in this python")
    asyncio.set_event_loop(asyncio.new_event_loop())
    described = describe(Path(sys.argv[1]).resolve(), sys.argv[2])
    json.dump(described, sys.stdout)


if __name__ == "__main__":
    main()
