"""Inspect's own scores for given answers: for each FILE.py@TASK in RUNS.json
({"FILE.py@TASK": {text in the sample's input: answer}}), runs the task with the mockllm
model answering each sample with the answer whose key its prompt holds (the longest);
prints {"FILE.py@TASK": {scorer: accuracy or mean}}. Run in .venv-inspect
(tests/test_import_inspect.py), one process for all tasks."""

import json
import sys
import tempfile

from inspect_ai import eval as inspect_eval
from inspect_ai._eval.loader import load_tasks
from inspect_ai.model import ModelOutput, ModelUsage, get_model


def replier(answers):
    def reply(messages, tools, tool_choice, config):
        text = [m.text for m in messages if m.role == "user"][-1]
        keys = sorted((key for key in answers if key in text), key=len, reverse=True)
        output = ModelOutput.from_content(model="mockllm", content=answers[keys[0]])
        # usage given, so mockllm does not count tokens with tiktoken (it downloads its tables)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return output

    return reply


runs = json.load(open(sys.argv[1]))
results = {}
for spec, answers in runs.items():
    task = load_tasks([spec])[0]
    with tempfile.TemporaryDirectory() as logs:
        model = get_model("mockllm/model", custom_outputs=replier(answers))
        log = inspect_eval(task, model=model, log_dir=logs, display="none")[0]
    if log.status != "success":
        sys.exit(f"inspect eval of {spec}: {log.status}: {log.error}")
    scores = {}
    for score in log.results.scores:
        metric = score.metrics.get("accuracy") or score.metrics["mean"]
        scores[score.name] = metric.value
    results[spec] = scores
print(json.dumps(results))
