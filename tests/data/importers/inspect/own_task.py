"""A task written for rlenv's importer tests: inline samples with metadata, multi-target
answers, a system message, a tool, and a scorer rlenv cannot carry (in `unsupported`)."""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import exact, f1, match
from inspect_ai.solver import generate, prompt_template, system_message, use_tools
from inspect_ai.tool import tool

SAMPLES = [
    Sample(
        id="u1",
        input="Name a primary color.",
        target=["red", "blue", "yellow"],
        metadata={"hint": "think of paint"},
    ),
    Sample(
        id="u2",
        input="What is the largest planet?",
        target="Jupiter",
        metadata={"hint": "a gas giant"},
    ),
    Sample(
        id="u3",
        input="How many legs does a spider have?",
        target="8",
        metadata={"hint": "more than an insect"},
    ),
    Sample(
        id="u4",
        input="What is {braces} in Python?",
        target="a set or a dict",
        metadata={"hint": "curly"},
    ),
]


@tool
def lookup():
    async def execute(term: str) -> str:
        """Look a term up in the encyclopedia.

        Args:
          term: The term to look up.
        """
        return f"no entry for {term}"

    return execute


@task
def own() -> Task:
    return Task(
        dataset=SAMPLES,
        solver=[
            system_message("Answer in a few words. Hints are given in {{braces}}."),
            prompt_template("{prompt}\n(hint: {hint})"),
            use_tools([lookup()]),
            generate(),
        ],
        scorer=[match(location="end"), match(location="any", ignore_case=False), exact()],
        epochs=2,
        time_limit=600,
    )


@task
def unsupported() -> Task:
    return Task(dataset=SAMPLES, solver=[generate()], scorer=f1())


@task
def graded() -> Task:
    """Graded by Inspect's default grader: the model under test (rlenv needs one named)."""
    from inspect_ai.scorer import model_graded_qa

    return Task(dataset=SAMPLES, solver=[generate()], scorer=model_graded_qa(partial_credit=True))
