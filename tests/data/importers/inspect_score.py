"""Inspect's own score for given answers: runs TASK of FILE with the mockllm model answering
each sample with its answer from ANSWERS.json ({input text: answer}); prints {scorer: accuracy}.
Run in .venv-inspect (tests/test_import_inspect.py)."""

import json
import sys
import tempfile

from inspect_ai import eval as inspect_eval
from inspect_ai._eval.loader import load_tasks
from inspect_ai.model import ModelOutput, ModelUsage, get_model

spec, answers_path = sys.argv[1], sys.argv[2]
answers = json.load(open(answers_path))


def reply(messages, tools, tool_choice, config):
    text = [m.text for m in messages if m.role == "user"][-1]
    keys = sorted((key for key in answers if key in text), key=len, reverse=True)
    output = ModelOutput.from_content(model="mockllm", content=answers[keys[0]])
    # usage given, so mockllm does not count tokens with tiktoken (which downloads its tables)
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


task = load_tasks([spec])[0]
with tempfile.TemporaryDirectory() as logs:
    log = inspect_eval(
        task,
        model=get_model("mockllm/model", custom_outputs=reply),
        log_dir=logs,
        display="none",
    )[0]
if log.status != "success":
    sys.exit(f"inspect eval: {log.status}: {log.error}")
scores = {}
for score in log.results.scores:
    metric = score.metrics.get("accuracy") or score.metrics["mean"]
    scores[score.name] = metric.value
print(json.dumps(scores))
