"""`rlenv import lm-eval TASK.yaml`: a frozen spec from an lm-evaluation-harness YAML task
whose data is local (`dataset_path: json` or `csv` with `dataset_kwargs.data_files`).

`doc_to_text` (with `description` before it) becomes the spec's prompt template (jinja, as in
lm-eval); `doc_to_target` is rendered per document into the `target` field; each metric of
each filter pipeline becomes a verifier: the built-in `exact_match` when the pipeline only
takes the first answer, else `lm_eval_scorers:exact_match` (written beside the spec) for the
`regex`/`remove_whitespace`/case filters and `regexes_to_ignore`.
"""

from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path
from typing import Any

import yaml

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
from rlenv.importers.lm_eval_scorers import FILTERS

MAX_INCLUDES = 8
# keys the importer reads, and keys that change neither the prompt nor the score; any other
# key of the task is listed as left out
READ = {
    "task",
    "dataset_path",
    "dataset_kwargs",
    "test_split",
    "validation_split",
    "output_type",
    "doc_to_text",
    "doc_to_target",
    "description",
    "generation_kwargs",
    "metric_list",
    "filter_list",
    "num_fewshot",
    "repeats",
    "process_docs",
    "process_results",
    "doc_to_choice",
}
HARMLESS = {
    "tag",
    "group",
    "task_alias",
    "group_alias",
    "metadata",
    "dataset_name",
    "training_split",
    "fewshot_split",
    "should_decontaminate",
    "doc_to_decontamination_query",
    "target_delimiter",
    "fewshot_delimiter",
}


class _Function:
    """A `!function module.name` value: python lm-eval would import (never carried)."""

    def __init__(self, ref: str) -> None:
        self.ref = ref


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor(
    "!function",
    lambda loader, node: _Function(str(loader.construct_scalar(node))),  # type: ignore[arg-type]
)


def load_config(path: Path, depth: int = 0) -> dict[str, Any]:
    """The task YAML with its `include:` chain merged (the including file wins)."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(
            f"not a YAML task: {' '.join(str(exc).split())[:200]}", where=str(path)
        ) from None
    if not isinstance(document, dict):
        raise UserError("not a task: the YAML is not a mapping", where=str(path))
    include = document.pop("include", None)
    if include is None:
        return document
    if depth >= MAX_INCLUDES or not isinstance(include, str):
        raise UserError(
            f"include: {include!r} (a file name, at most {MAX_INCLUDES} deep)", where=str(path)
        )
    base = load_config(path.parent / include, depth + 1)
    return {**base, **document}


def _data_file(config: dict[str, Any], yaml_path: Path) -> tuple[Path, str]:
    """The local file of the evaluated split, and its format."""
    kind = config.get("dataset_path")
    if kind not in ("json", "csv"):
        raise UserError(
            f"dataset_path {kind!r}: only local data files are imported (dataset_path: json or"
            " csv with dataset_kwargs.data_files)",
            where=str(yaml_path),
        )
    split = config.get("test_split") or config.get("validation_split")
    if not isinstance(split, str):
        raise UserError("no test_split or validation_split to import", where=str(yaml_path))
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(files, str | list):
        files = {"train": files}  # what `datasets` does with a bare file name
    if not isinstance(files, dict) or split not in files:
        raise UserError(
            f"dataset_kwargs.data_files has no file for split {split!r}", where=str(yaml_path)
        )
    chosen = files[split]
    if isinstance(chosen, list):
        if len(chosen) != 1:
            raise UserError(
                f"split {split!r}: one data file, not {len(chosen)}", where=str(yaml_path)
            )
        chosen = chosen[0]
    candidate = Path(str(chosen))
    for root in (yaml_path.parent, Path.cwd()):
        if (root / candidate).is_file():
            return root / candidate, kind
    raise UserError(
        f"data file {chosen}: no such file (next to the YAML or here)", where=str(yaml_path)
    )


def _documents(path: Path, kind: str, imported: Imported) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if kind == "csv":
        imported.left_out.append("csv data: every value is read as text (datasets infers types)")
        return [dict(row) for row in csv.DictReader(text.splitlines())]
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except json.JSONDecodeError as exc:
        raise UserError(f"not JSON lines: {exc}", where=str(path)) from None
    if not all(isinstance(row, dict) for row in rows):
        raise UserError("every document must be a JSON object", where=str(path))
    return rows


def _environment() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(
        undefined=StrictUndefined, keep_trailing_newline=True
    )
    environment.filters["regex_replace"] = lambda text, pattern, repl, count=0: re.sub(
        pattern, repl, text, count=count
    )
    return environment


def _template(value: Any, field: str, documents: list[dict[str, Any]], where: str) -> str:
    """A doc_to_* value as a jinja template: a column name becomes `{{ column }}`."""
    if isinstance(value, _Function):
        raise UserError(
            f"{field}: !function {value.ref} is python lm-eval imports; not carried", where=where
        )
    if not isinstance(value, str):
        raise UserError(f"{field}: {value!r} is not a template", where=where)
    if documents and value in documents[0]:
        return "{{ " + value + " }}"
    return value


def _render(template: str, document: dict[str, Any], field: str, where: str) -> str:
    from jinja2 import TemplateError

    try:
        return str(_environment().from_string(template).render(**document))
    except TemplateError as exc:
        raise UserError(f"{field}: {exc}", where=where) from None


def _decoding(config: dict[str, Any], imported: Imported) -> None:
    kwargs = dict(config.get("generation_kwargs") or {})
    decoding: dict[str, Any] = {}
    if "until" in kwargs:
        until = kwargs.pop("until")
        decoding["stop"] = [until] if isinstance(until, str) else list(until)
    if "max_gen_toks" in kwargs:
        decoding["max_tokens"] = kwargs.pop("max_gen_toks")
    for key in ("temperature", "top_p", "top_k"):
        if key in kwargs:
            decoding[key] = kwargs.pop(key)
    if kwargs.pop("do_sample", None) is False:
        decoding["temperature"] = 0.0
    for key in sorted(kwargs):
        imported.left_out.append(f"generation_kwargs.{key}: not part of rlenv's decoding")
    imported.spec["decoding"] = decoding


def _verifiers(config: dict[str, Any], imported: Imported, target_field: str, where: str) -> None:
    pipelines = config.get("filter_list") or [
        {"name": "none", "filter": [{"function": "take_first"}]}
    ]
    metrics = config.get("metric_list") or [{"metric": "exact_match"}]
    verifiers: list[dict[str, Any]] = []
    for metric in metrics:
        name = metric.get("metric") if isinstance(metric, dict) else None
        if name != "exact_match":
            imported.left_out.append(f"metric {name}: only exact_match is carried")
            continue
        options = {
            key: metric[key]
            for key in ("ignore_case", "ignore_punctuation", "ignore_numbers", "regexes_to_ignore")
            if metric.get(key)
        }
        for pipeline in pipelines:
            label = f"exact_match,{pipeline.get('name', 'none')}"
            steps = pipeline.get("filter") or []
            unknown = [
                step.get("function") for step in steps if step.get("function") not in FILTERS
            ]
            if unknown:
                imported.left_out.append(f"verifier {label}: filter {unknown[0]} is not carried")
                continue
            plain = all(step["function"] == "take_first" for step in steps)
            if plain and not options.get("regexes_to_ignore") and not options.get("ignore_numbers"):
                normalize = [
                    step
                    for key, step in (
                        ("ignore_case", "lower"),
                        ("ignore_punctuation", "punctuation"),
                    )
                    if options.get(key)
                ]
                verifiers.append(
                    {
                        "name": label,
                        "type": "exact_match",
                        "expected_field": target_field,
                        "normalize": normalize,
                    }
                )
                continue
            imported.modules = ["lm_eval_scorers"]
            verifiers.append(
                {
                    "name": label,
                    "type": "python",
                    "function": "lm_eval_scorers:exact_match",
                    "options": copy.deepcopy(
                        {"target_field": target_field, "filters": steps, **options}
                    ),
                }
            )
    if not verifiers:
        raise UserError("no metric rlenv can carry over (exact_match)", where=where)
    imported.spec["verifiers"] = verifiers


def import_lm_eval(task_yaml: Path, out: Path) -> ImportResult:
    """Write a frozen spec (with pinned inputs) for lm-eval YAML task `task_yaml` into `out`."""
    check_out(out)
    config = load_config(task_yaml)
    where = str(task_yaml)
    output_type = config.get("output_type", "generate_until")
    if output_type != "generate_until":
        raise UserError(
            f"output_type {output_type}: rlenv grades generated answers (generate_until);"
            " log-likelihood tasks are not imported",
            where=where,
        )
    for field in ("process_docs", "process_results", "doc_to_choice"):
        if field in config:
            raise UserError(
                f"{field}: not carried over (rlenv grades the generated text)", where=where
            )
    data, kind = _data_file(config, task_yaml)
    name = spec_name(str(config.get("task") or task_yaml.stem))
    imported = Imported(name=name, spec={"name": name, "seed": 0, "time": FROZEN_TIME}, records=[])
    documents = _documents(data, kind, imported)
    if not documents:
        raise UserError(f"{data}: no documents", where=where)
    text = _template(config.get("doc_to_text"), "doc_to_text", documents, where)
    description = config.get("description") or ""
    if description:
        text = _template(description, "description", documents, where) + text
    target = _template(config.get("doc_to_target"), "doc_to_target", documents, where)
    target_field = "target" if "target" not in documents[0] else "lm_eval_target"
    for index, document in enumerate(documents):
        record = {"id": str(document.get("id", index)), **document}
        record["id"] = str(document.get("id", index))
        record[target_field] = _render(target, document, "doc_to_target", where)
        imported.records.append(record)
    unique_ids([record["id"] for record in imported.records], where)
    _carry_prompt(text, imported, where)
    if config.get("num_fewshot"):
        imported.left_out.append(
            f"num_fewshot {config['num_fewshot']}: lm-eval joins examples into one text;"
            " none are carried"
        )
    if config.get("repeats", 1) != 1:
        imported.spec["rollouts"] = int(config["repeats"])
    _decoding(config, imported)
    _verifiers(config, imported, target_field, where)
    for key in sorted(set(config) - READ - HARMLESS):
        imported.left_out.append(f"{key}: not carried")
    return write_env(imported, out, source=f"lm-eval task {task_yaml.name}")


def _carry_prompt(template: str, imported: Imported, where: str) -> None:
    """The template as the spec's prompt when rlenv's renderer gives lm-eval's text for every
    document; else (a filter rlenv's sandbox lacks) each prompt rendered here."""
    from rlenv.inputs import render

    rendered = [_render(template, record, "doc_to_text", where) for record in imported.records]
    try:
        same = all(
            render(template, record) == text
            for record, text in zip(imported.records, rendered, strict=True)
        )
    except ValueError:
        same = False
    if same:
        imported.spec["prompt"] = {"template": template}
        return
    for record, text in zip(imported.records, rendered, strict=True):
        record["prompt"] = text
    imported.left_out.append(
        "doc_to_text: rendered per document into `prompt` (rlenv's template renderer differs)"
    )
