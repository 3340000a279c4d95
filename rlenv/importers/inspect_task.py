"""`rlenv import inspect FILE.py@TASK`: a frozen spec from an Inspect AI task.

Inspect is not imported here: `inspect_loader.py` runs in a python that has inspect_ai
(`--python`, default `.venv-inspect/bin/python`, else `python3` if it imports inspect_ai) and
prints the task's samples, solvers, scorers and config as JSON; this module turns that into a
spec, pinned inputs and the scorer module (`inspect_scorers.py`) beside it.
"""

from __future__ import annotations

import json
import shutil
import string
import subprocess
from pathlib import Path
from typing import Any

from rlenv.errors import UserError
from rlenv.importers.common import (
    FROZEN_TIME,
    Imported,
    ImportResult,
    check_out,
    spec_name,
    unique_ids,
    write_env,
)

LOADER = Path(__file__).with_name("inspect_loader.py")
LOAD_TIMEOUT_S = 300.0
SCORERS = (
    "match",
    "includes",
    "exact",
    "pattern",
    "answer",
    "model_graded_qa",
    "model_graded_fact",
)
RESERVED = ("id", "prompt", "messages", "target", "choices", "input_text")
JUDGE_INSTRUCTIONS = (
    "\nAfter assessing the submitted answer, end your reply with 'score: N' (without quotes)"
    " where N is 1 for a correct answer, {partial}0 for an incorrect one.\n\nFirst, write out"
    " in a step by step manner your reasoning about the criterion to be sure that your"
    " conclusion is correct. Then end with 'score: N'.\n"
)
QA_TEMPLATE = (
    "\nYou are assessing a submitted answer on a given task based on a criterion. Here is the"
    " data:\n\n[BEGIN DATA]\n***\n[Task]: {question}\n***\n[Submission]: {answer}\n***\n"
    "[Criterion]: {criterion}\n***\n[END DATA]\n\nDoes the submission meet the criterion?\n\n"
    "{instructions}\n"
)
FACT_TEMPLATE = (
    "\nYou are comparing a submitted answer to an expert answer on a given question. Here is"
    " the data:\n\n[BEGIN DATA]\n************\n[Question]: {question}\n************\n"
    "[Expert]: {criterion}\n************\n[Submission]: {answer}\n************\n[END DATA]\n\n"
    "Compare the factual content of the submitted answer with the expert answer. Ignore any"
    " differences in style, grammar, or punctuation.\n\nDoes the submission contain the content"
    " in the expert answer?\n\n{instructions}\n"
)


def find_python(python: str | None, roots: tuple[Path, ...] | None = None) -> str:
    """The interpreter that loads the task: `python`, else .venv-inspect under `roots` (default:
    here, then rlenv's checkout), else python3 if it imports inspect_ai; else one line, exit 2."""
    if python is not None:
        found = shutil.which(python) or (python if Path(python).is_file() else None)
        if found is None:
            raise UserError(f"{python}: no such python", where="--python")
        return found
    if roots is None:
        roots = (Path.cwd(), Path(__file__).resolve().parents[2])
    for root in roots:
        candidate = root / ".venv-inspect" / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    system = shutil.which("python3")
    if system is not None:
        probe = subprocess.run(
            [system, "-c", "import inspect_ai"], capture_output=True, timeout=120, check=False
        )
        if probe.returncode == 0:
            return system
    raise UserError(
        "no python with inspect_ai: run `make inspect-venv` (.venv-inspect) or give --python"
    )


def load_task(file: Path, task: str, python: str) -> dict[str, Any]:
    """Run the loader in `python` and return its description of the task."""
    try:
        done = subprocess.run(
            [python, str(LOADER), str(file.resolve()), task],
            cwd=file.resolve().parent,
            capture_output=True,
            text=True,
            timeout=LOAD_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"loading task {task!r} took over {LOAD_TIMEOUT_S:.0f} s") from None
    except OSError as exc:
        raise UserError(f"{python}: {exc.strerror}", where="--python") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit code {done.returncode}"
        raise UserError(f"cannot load {file}@{task}: {last}")
    try:
        described: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise UserError(f"cannot load {file}@{task}: the loader printed no JSON") from None
    return described


def _short(name: str) -> str:
    return name.split("/")[-1]


def _escape(text: str) -> str:
    """Literal text inside a jinja template."""
    if "{{" in text or "{%" in text or "{#" in text or "}}" in text:
        return "{% raw %}" + text + "{% endraw %}"
    return text


def _jinja(
    template: str, prompt: str, params: dict[str, Any], fields: tuple[set[str], set[str]]
) -> str | None:
    """A str.format template of Inspect as a jinja template (`{prompt}` becomes `prompt`, a
    sample field `{{ name }}` (`fields`: in every sample, in some), a solver parameter its
    value, an unknown name stays as written, as Inspect leaves it); None when a placeholder
    has a format spec, conversion or index."""
    parts: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for literal, name, spec, conversion in parsed:
        parts.append(_escape(literal))
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            return None
        if name == "prompt":
            parts.append(prompt)
        elif name in params:
            parts.append(_escape(str(params[name])))
        elif name in fields[0]:
            parts.append("{{ " + name + " }}")
        elif name in fields[1]:
            kept = _escape("{" + name + "}")
            parts.append(
                f"{{% if {name} is defined %}}{{{{ {name} }}}}{{% else %}}{kept}{{% endif %}}"
            )
        else:
            parts.append(_escape("{" + name + "}"))
    return "".join(parts)


def _records(
    described: dict[str, Any], imported: Imported, where: str
) -> tuple[set[str], set[str]]:
    """Samples as input records; returns the metadata fields every sample has, and those some
    have."""
    common: set[str] | None = None
    some: set[str] = set()
    extras = {"files": 0, "setup": 0, "sandbox": 0}
    for sample in described["samples"]:
        record: dict[str, Any] = {"id": str(sample.get("id", sample["index"] + 1))}
        if isinstance(sample["input"], str):
            record["prompt"] = sample["input"]
            record["input_text"] = sample["input"]
        else:
            messages = sample["input"]
            if any(message["content"] is None for message in messages):
                raise UserError(f"sample {record['id']}: a message that is not text", where=where)
            record["messages"] = messages
            users = [m["content"] for m in messages if m["role"] == "user"]
            record["input_text"] = users[-1] if users else ""
        record["target"] = sample.get("target", "")
        if "choices" in sample:
            record["choices"] = sample["choices"]
        metadata = sample.get("metadata") or {}
        for key, value in metadata.items():
            if key in RESERVED:
                raise UserError(
                    f"sample {record['id']}: metadata field {key!r} clashes with the record's"
                    f" own {key!r}",
                    where=where,
                )
            record[key] = value
        common = set(metadata) if common is None else common & set(metadata)
        some |= set(metadata)
        for key in extras:
            extras[key] += key in sample
        imported.records.append(record)
    unique_ids([record["id"] for record in imported.records], where)
    for key, count in extras.items():
        if count:
            imported.left_out.append(f"sample {key}: {count} sample(s) declare {key}")
    return common or set(), some


def _solvers(
    described: dict[str, Any], imported: Imported, fields: tuple[set[str], set[str]]
) -> None:
    prompt = "{{ prompt }}"
    templated = False
    systems: list[str] = []
    message_input = any("messages" in record for record in imported.records)
    for solver in described["solvers"]:
        name, params = _short(solver["name"]), dict(solver["params"])
        if name in ("generate", "chain"):
            continue
        if name == "use_tools":
            imported.tools += solver.get("tools", [])
            for tool in solver.get("tools", []):
                imported.left_out.append(
                    f"tool {tool['name']}: runs inside Inspect; listed for `rlenv record`"
                    " (commented at the end of the spec)"
                )
            continue
        template = params.pop("template", None)
        if name == "system_message" and isinstance(template, str):
            text = _jinja(template, "{prompt}", params, fields)
            if text is not None and "{{" not in text and "{%" not in text:
                systems.append(template.format_map(_Keep(params)))
                continue
            imported.left_out.append(
                "solver system_message: its template uses sample fields (a per-sample system"
                " message)"
            )
            continue
        if name in ("prompt_template", "chain_of_thought") and isinstance(template, str):
            converted = None if message_input else _jinja(template, prompt, params, fields)
            if converted is not None:
                prompt, templated = converted, True
                continue
            reason = "chat-message inputs" if message_input else "a placeholder with a format"
            imported.left_out.append(f"solver {name}: {reason} (the template is not carried)")
            continue
        imported.left_out.append(f"solver {name}: no rlenv equivalent")
    if len(systems) > 1:
        imported.left_out.append(
            f"solver system_message: {len(systems)} system messages joined into one"
        )
    if systems:
        imported.spec["system_prompt"] = "\n\n".join(systems)
    if templated:
        imported.spec["prompt"] = {"template": prompt}


class _Keep(dict):  # type: ignore[type-arg]
    """format_map mapping that leaves unknown placeholders as written (as Inspect does)."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _unique(name: str, taken: set[str]) -> str:
    label, number = name, 1  # as Inspect names a repeated scorer: match, match1, ...
    while label in taken:
        label, number = f"{name}{number}", number + 1
    taken.add(label)
    return label


def _judge(
    name: str, params: dict[str, Any], judge_model: str | None, label: str
) -> dict[str, Any]:
    model = params.get("model")
    if isinstance(model, list):
        model = model[0] if len(model) == 1 else None
    if isinstance(model, str) and "/" in model:
        model = "openai:" + model.split("/", 1)[1] if model.startswith("openai/") else None
    chosen = judge_model or model
    if chosen is None:
        raise UserError(
            f"scorer {name}: no OpenAI-compatible grader model in the task (Inspect grades"
            " with the model under test); give --judge-model openai:NAME"
        )
    if not chosen.startswith("openai:"):
        chosen = f"openai:{chosen}"
    partial = bool(params.get("partial_credit"))
    template = params.get("template") or (
        QA_TEMPLATE if name == "model_graded_qa" else FACT_TEMPLATE
    )
    if not isinstance(template, str) or params.get("include_history"):
        raise UserError(f"scorer {name}: a custom template object or include_history")
    instructions = JUDGE_INSTRUCTIONS.format(
        partial="0.5 for a partially correct one, " if partial else ""
    )
    values = {
        "question": "{{ input_text }}",
        "answer": "{{ answer }}",
        "criterion": "{{ target if target is string else target | join('') }}",
        "instructions": instructions,
    }
    parts = []
    for literal, field, _spec, _conversion in string.Formatter().parse(template):
        parts.append(_escape(literal))
        if field is not None:
            parts.append(values.get(field, "{{ " + field + " }}"))
    return {
        "name": label,
        "type": "judge",
        "judge": {
            "model": chosen,
            "rubric": "".join(parts),
            "scale": [0, 1],
            "threshold": 1.0,
            "cassette": {"path": f"judge-{label}.jsonl"},
        },
    }


def _scorers(
    described: dict[str, Any], imported: Imported, judge_model: str | None
) -> list[dict[str, Any]]:
    verifiers: list[dict[str, Any]] = []
    taken: set[str] = set()
    for scorer in described["scorers"]:
        name, params = _short(scorer["name"]), dict(scorer["params"])
        if name not in SCORERS:
            raise UserError(
                f"scorer {name!r} has no rlenv equivalent (carried: {', '.join(SCORERS)})"
            )
        label = _unique(name, taken)
        if name.startswith("model_graded"):
            verifiers.append(_judge(name, params, judge_model, label))
            imported.left_out.append(
                f"scorer {name}: Inspect's grader replies GRADE: C/P/I; the rubric asks for"
                " 'score: 1/0.5/0' instead (rlenv's judge reads a number); record its cassette"
                " with `rlenv record`"
            )
            continue
        if name == "match" and params.get("numeric"):
            imported.left_out.append(
                "scorer match(numeric=True): numbers are read as Python's float() reads them;"
                " Inspect also reads vulgar fractions, superscripts and Chinese numerals"
            )
        if name == "answer":
            params = {"kind": params.get("pattern", "letter")}
        if name == "pattern" and not isinstance(params.get("pattern"), str):
            raise UserError("scorer pattern: its pattern is not a string")
        imported.modules = ["inspect_scorers"]
        verifiers.append(
            {
                "name": label,
                "type": "python",
                "function": f"inspect_scorers:{name}",
                "options": params,
            }
        )
    if not verifiers:
        raise UserError("the task has no scorer rlenv can carry over")
    return verifiers


def _decoding(described: dict[str, Any], imported: Imported) -> None:
    config = dict(described.get("config") or {})
    decoding: dict[str, Any] = {}
    for source, target in (
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("max_tokens", "max_tokens"),
        ("stop_seqs", "stop"),
        ("seed", "seed"),
    ):
        if source in config:
            decoding[target] = config.pop(source)
    for key in sorted(config):
        imported.left_out.append(f"config {key}: not part of rlenv's decoding")
    if decoding:
        imported.spec["decoding"] = decoding


def import_inspect(
    target: str, out: Path, *, python: str | None = None, judge_model: str | None = None
) -> ImportResult:
    """Write a frozen spec (with pinned inputs) for Inspect task `FILE.py@TASK` into `out`."""
    file_text, at, task = target.rpartition("@")
    if not at or not file_text or not task:
        raise UserError(f"{target!r}: give FILE.py@TASK")
    check_out(out)
    file = Path(file_text)
    if not file.is_file():
        raise UserError(f"{file}: no such file")
    described = load_task(file, task, find_python(python))
    where = f"{file}@{task}"
    imported = Imported(
        name=spec_name(task),
        spec={"name": spec_name(task), "seed": 0, "time": FROZEN_TIME},
        records=[],
    )
    if not described["samples"]:
        raise UserError("the task's dataset is empty", where=where)
    fields = _records(described, imported, where)
    _solvers(described, imported, fields)
    imported.spec["verifiers"] = _scorers(described, imported, judge_model)
    _decoding(described, imported)
    epochs = described.get("epochs")
    if isinstance(epochs, int) and epochs > 1:
        imported.spec["rollouts"] = epochs
        reducers = [_short(name) for name in described.get("epochs_reducer") or []]
        if reducers and reducers != ["mean"]:
            imported.left_out.append(
                f"epochs reducer {', '.join(reducers)}: rlenv reports pass rate"
            )
    if described.get("message_limit"):
        imported.left_out.append(
            f"message_limit {described['message_limit']}: rlenv limits turns (limits.max_turns)"
        )
    for key, value in sorted((described.get("limits") or {}).items()):
        imported.left_out.append(f"{key} {value}: not carried (rlenv has limits.timeout_s)")
    for key in ("setup", "sandbox"):
        if described.get(key):
            imported.left_out.append(f"task {key}: not carried")
    return write_env(imported, out, source=f"Inspect task {file.name}@{task}")
