"""Grade-school arithmetic word problems, written the way inspect_evals writes gsm8k: a JSONL
dataset bundled beside the task, a system message, a prompt template asking for the answer on
its own line, and `match(numeric=True)` against the last number."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import match
from inspect_ai.solver import generate, prompt_template, system_message

MATH_PROMPT_TEMPLATE = """
Solve the following math problem step by step. The last line of your response should be of
the form "ANSWER: $ANSWER" (without quotes) where $ANSWER is the answer to the problem.

{prompt}

Remember to put your answer on its own line at the end in the form "ANSWER: $ANSWER" (without
quotes) where $ANSWER is the answer to the problem, and you do not need to use a \\boxed
command.

Reasoning:
""".strip()


def record_to_sample(record: dict) -> Sample:
    return Sample(
        id=record["id"],
        input=record["question"],
        target=str(record["answer"]),
        metadata={"reasoning": record["reasoning"]},
    )


@task
def arithmetic() -> Task:
    return Task(
        dataset=json_dataset(str(Path(__file__).parent / "arithmetic.jsonl"), record_to_sample),
        solver=[
            system_message("You are a careful math tutor."),
            prompt_template(MATH_PROMPT_TEMPLATE),
            generate(),
        ],
        scorer=match(numeric=True),
        config=GenerateConfig(temperature=0.0, max_tokens=512),
    )
