"""lm-eval's own score for given answers: the task YAML's filter pipelines and exact_match
metric (lm-eval's RegexFilter / TakeFirstFilter / exact_match_hf_evaluate, its jinja
doc_to_target) over the documents of its local data file. RUNS.json: {"TASK.yaml": [one answer
per document]}; prints {"TASK.yaml": {"exact_match,FILTER": mean}}. Run in .venv-lmeval
(tests/test_import_lm_eval.py), one process for all tasks."""

import json
import sys
from pathlib import Path

import lm_eval.filters  # noqa: F401  (registers the filters)
import yaml
from lm_eval.api.metrics import exact_match_hf_evaluate
from lm_eval.api.registry import get_filter
from lm_eval.utils import apply_template


def score(task_path: Path, answers: list[str]) -> dict[str, float]:
    config = yaml.safe_load(task_path.read_text())
    if "include" in config:
        config = {
            **yaml.safe_load((task_path.parent / config.pop("include")).read_text()),
            **config,
        }
    data = task_path.parent / config["dataset_kwargs"]["data_files"][config["test_split"]]
    docs = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    target = config["doc_to_target"]
    template = target if "{{" in target else "{{" + target + "}}"
    golds = [apply_template(template, doc) for doc in docs]
    pipelines = config.get("filter_list") or [
        {"name": "none", "filter": [{"function": "take_first"}]}
    ]
    scores = {}
    for metric in config["metric_list"]:
        options = {
            k: v
            for k, v in metric.items()
            if k not in ("metric", "aggregation", "higher_is_better")
        }
        for pipeline in pipelines:
            filtered = [[answer] for answer in answers]
            for step in pipeline["filter"]:
                kwargs = {k: v for k, v in step.items() if k != "function"}
                filtered = list(get_filter(step["function"])(**kwargs).apply(filtered, docs))
            predictions = [item if isinstance(item, str) else item[0] for item in filtered]
            per_doc = [
                exact_match_hf_evaluate(predictions=[p], references=[g], **options)["exact_match"]
                for p, g in zip(predictions, golds, strict=True)
            ]
            scores[f"{metric['metric']},{pipeline['name']}"] = float(sum(per_doc) / len(per_doc))
    return scores


runs = json.loads(Path(sys.argv[1]).read_text())
print(json.dumps({task: score(Path(task), answers) for task, answers in runs.items()}))
