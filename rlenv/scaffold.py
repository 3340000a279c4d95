"""`rlenv init NAME`: a working env to start from (spec, helper package, inputs, pinned hash)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlenv.canonical import sha256_file
from rlenv.errors import UserError

SPEC = """\
# {name}: scaffolded by `rlenv init`. Edit the inputs, tools, verifiers and policies, then
# `rlenv validate envs/{name}.yaml` (it prints the hash each missing or stale pin should hold;
# `rlenv pin` writes them) and `rlenv run envs/{name}.yaml`.
name: {name}
version: 1
seed: 1
time: "2025-01-01T00:00:00+00:00"
model: python:{package}.policies:baseline
decoding: {{temperature: 1.0, top_p: 1.0, top_k: 0, max_tokens: 256}}
inputs:
  path: ../fixtures/{name}/inputs.jsonl
  sha256: {inputs_sha}
tools:
  - name: add
    description: Add two integers.
    parameters:
      type: object
      properties: {{a: {{type: integer}}, b: {{type: integer}}}}
      required: [a, b]
      additionalProperties: false
    function: {package}.tools:add
verifiers:
  - {{name: answer, type: numeric, expected_field: answer}}
rollouts: 2
limits: {{max_turns: 4, timeout_s: 30}}
"""

TOOLS = '''"""Tools of the {name} env: `def tool(args: dict, ctx) -> JSON value` (frozen world)."""

from typing import Any


def add(args: dict[str, Any], ctx: Any) -> int:
    return int(args["a"]) + int(args["b"])
'''

POLICIES = '''"""Policies of the {name} env: `def policy(messages, tools, ctx) -> str | message`."""

import json
import re
from typing import Any


def baseline(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> Any:
    """Calls the add tool on the two numbers of the question, then answers with its result."""
    if messages[-1]["role"] == "tool":
        return messages[-1]["content"]
    a, b = (int(n) for n in re.findall(r"-?\\d+", messages[-1]["content"])[:2])
    call = {{"name": "add", "arguments": json.dumps({{"a": a, "b": b}})}}
    calls = [{{"id": "call_0", "type": "function", "function": call}}]
    return {{"content": None, "tool_calls": calls}}


def null(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> str:
    return "I don't know."
'''


def scaffold(name: str, root: Path = Path(".")) -> list[Path]:
    """Write envs/NAME.yaml, envs/NAME_env/ and fixtures/NAME/inputs.jsonl; never overwrite."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise UserError(f"env name {name!r}: use lower-case letters, digits and underscores")
    package = f"{name}_env"
    spec_path = root / "envs" / f"{name}.yaml"
    package_dir = root / "envs" / package
    inputs_path = root / "fixtures" / name / "inputs.jsonl"
    for path in (spec_path, package_dir, inputs_path):
        if path.exists():
            raise UserError(f"{path} already exists; not overwriting it")
    package_dir.mkdir(parents=True)
    inputs_path.parent.mkdir(parents=True)
    records = [
        {"id": f"{name}-{n:03d}", "prompt": f"What is {a} + {b}?", "answer": a + b}
        for n, (a, b) in enumerate([(2, 3), (10, 32), (-4, 9), (100, 250)])
    ]
    inputs_path.write_text("".join(json.dumps(record) + "\n" for record in records))
    (package_dir / "__init__.py").write_text(f'"""Helpers of the {name} env."""\n')
    (package_dir / "tools.py").write_text(TOOLS.format(name=name))
    (package_dir / "policies.py").write_text(POLICIES.format(name=name))
    spec_path.write_text(
        SPEC.format(name=name, package=package, inputs_sha=sha256_file(inputs_path))
    )
    return [spec_path, package_dir, inputs_path]
