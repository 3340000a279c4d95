"""Capital cities from a bundled CSV, written the way inspect_evals writes short-answer tasks:
a `csv_dataset` with a FieldSpec (an alias list in metadata), a prompt template that uses a
metadata field, and several scorers over the same answers: `includes`, `exact`,
`match(location="begin")`, `pattern` and `answer("word")`."""

from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, csv_dataset
from inspect_ai.scorer import answer, exact, includes, match, pattern
from inspect_ai.solver import generate, prompt_template

TEMPLATE = """Answer with the name of the capital of the {region} country below, then repeat it
on a last line as "ANSWER: <city>".

Country: {prompt}"""


@task
def capitals() -> Task:
    return Task(
        dataset=csv_dataset(
            str(Path(__file__).parent / "capitals.csv"),
            FieldSpec(input="country", target="capital", id="id", metadata=["region"]),
        ),
        solver=[prompt_template(TEMPLATE), generate()],
        scorer=[
            includes(),
            exact(),
            match(location="begin"),
            pattern(r"capital is (\w+)"),
            answer("word"),
        ],
    )


@task
def capitals_graded() -> Task:
    """The same questions graded by a model (Inspect's model_graded_fact)."""
    from inspect_ai.scorer import model_graded_fact

    return Task(
        dataset=csv_dataset(
            str(Path(__file__).parent / "capitals.csv"),
            FieldSpec(input="country", target="capital", id="id", metadata=["region"]),
        ),
        solver=[generate()],
        scorer=model_graded_fact(model="openai/gpt-4o-mini"),
    )
