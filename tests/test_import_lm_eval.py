"""`rlenv import lm-eval`: lm-evaluation-harness YAML tasks with local data become frozen specs
whose per-verifier pass rate, for the same answers, equals lm-eval's own score (its filters
and exact_match, run in .venv-lmeval: `make lmeval-venv`); bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, cli, in_process, read_jsonl, require

LOCAL = "dataset_path: json\ndataset_kwargs: {data_files: {test: trivia_sample.jsonl}}\n"
DATA = ROOT / "tests" / "data" / "importers"
TASKS = DATA / "lm_eval"
LMEVAL_PYTHON = ROOT / ".venv-lmeval" / "bin" / "python"

GSM8K_ANSWERS = [
    "Natalia sold 24 in May, so 48 + 24 = 72.\n#### 72",  # both pipelines pass
    "Weng earned $10.",  # no ####: strict fails, flexible reads 10
    "She needs 50 more. #### 50.",  # strict reads "50." and ignores the final dot
    "#### 624",
    "The answer is 3,600 pens",  # flexible only (commas ignored)
    "1 + 2 = 3, not 4\n#### 4",  # wrong in both
]
TRIVIA_ANSWERS = ["canberra.", "Carbon Dioxide", "Washington", " 4", "William Shakespeare!"]


ANSWER_LINE = [
    "Sydney? No.\nAnswer:  Canberra ",  # spaces around: the filter strips them
    "Answer: carbon dioxide\nAnswer: oxygen",  # the last Answer: counts
    "George Washington",  # no Answer: line: the fallback, wrong
    "Answer:4",
    "Answer: Shakespeare, William",
]
ANSWERS = {
    "gsm8k_local.yaml": GSM8K_ANSWERS,
    "trivia_local.yaml": TRIVIA_ANSWERS,
    "trivia_answer_line.yaml": ANSWER_LINE,
}


@pytest.fixture(scope="module")
def lm_evals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, float]]:
    """lm-eval's own score of each compared task for its answers, all in one lm-eval process."""
    require(LMEVAL_PYTHON.is_file(), ".venv-lmeval (`make lmeval-venv`)")
    root = tmp_path_factory.mktemp("lm-eval")
    runs = root / "runs.json"
    runs.write_text(json.dumps({str(TASKS / task): answers for task, answers in ANSWERS.items()}))
    theirs = subprocess.run(
        [str(LMEVAL_PYTHON), str(DATA / "lm_eval_score.py"), str(runs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    scores = json.loads(theirs.stdout.strip().splitlines()[-1])
    return {task: scores[str(TASKS / task)] for task in ANSWERS}


def _rates(
    task: str, lm_evals: dict[str, dict[str, float]], tmp_path: Path
) -> tuple[dict[str, float], dict[str, float]]:
    """(rlenv's per-verifier pass rate, lm-eval's score) of `task` for its answers: imported
    (in this process; the entry point is in the determinism test), then `rlenv run` with a
    replay policy."""
    out = tmp_path / "env"
    done = in_process("import", "lm-eval", str(TASKS / task), "--out", str(out))
    assert done.exit_code == 0, done.stderr
    spec = next(out.glob("*.yaml"))
    records = read_jsonl(out / "inputs.jsonl")
    replay = tmp_path / "replay.jsonl"
    replay.write_text(
        "".join(
            json.dumps({"input_id": record["id"], "answer": answer}) + "\n"
            for record, answer in zip(records, ANSWERS[task], strict=True)
        )
    )
    done = cli(
        "run", str(spec), "--model", f"replay:{replay}", "--workers", "1",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts: dict[str, list[bool]] = {}
    for result in read_jsonl(tmp_path / "run" / "results.jsonl"):
        for verdict in result["verifiers"]:
            counts.setdefault(verdict["name"], []).append(verdict["passed"])
    ours = {name: sum(values) / len(values) for name, values in counts.items()}
    return ours, lm_evals[task]


def test_gsm8k_filters_and_regexes_to_ignore_equal_lm_evals(
    tmp_path: Path, lm_evals: dict[str, dict[str, float]]
) -> None:
    ours, theirs = _rates("gsm8k_local.yaml", lm_evals, tmp_path)
    assert ours == pytest.approx(theirs)
    assert ours["exact_match,strict-match"] != ours["exact_match,flexible-extract"]


def test_trivia_builtin_exact_match_equals_lm_evals(
    tmp_path: Path, lm_evals: dict[str, dict[str, float]]
) -> None:
    ours, theirs = _rates("trivia_local.yaml", lm_evals, tmp_path)
    assert ours == pytest.approx(theirs)
    spec = yaml.safe_load(next((tmp_path / "env").glob("*.yaml")).read_text())
    assert spec["verifiers"][0]["type"] == "exact_match"  # no filter: the built-in verifier
    assert spec["decoding"] == {"stop": ["\n", ".", ","], "max_tokens": 32, "temperature": 0.0}
    assert spec["prompt"]["template"].startswith("Answer the question with a short phrase.")


def test_regex_filter_with_strip_and_last_match_equals_lm_evals(
    tmp_path: Path, lm_evals: dict[str, dict[str, float]]
) -> None:
    ours, theirs = _rates("trivia_answer_line.yaml", lm_evals, tmp_path)
    assert ours == pytest.approx(theirs)
    assert ours == {"exact_match,answer-line": 0.4}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "task: t\ndataset_path: openai/gsm8k\ntest_split: test\n"
            "doc_to_text: q\ndoc_to_target: a\n",
            "dataset_path 'openai/gsm8k': only local data files",
        ),
        ("task: t\noutput_type: multiple_choice\n", "output_type multiple_choice"),
        (
            "task: t\ndataset_path: json\ndataset_kwargs: {data_files: {test: nope.jsonl}}\n"
            "test_split: test\n",
            "data file nope.jsonl: no such file",
        ),
        (
            "task: t\n"
            + LOCAL
            + "test_split: test\ndoc_to_text: !function utils.doc_to_text\ndoc_to_target: answer\n",
            "doc_to_text: !function utils.doc_to_text",
        ),
        (
            "task: t\n"
            + LOCAL
            + "test_split: test\ndoc_to_text: q\ndoc_to_target: answer\n"
            + "metric_list: [{metric: bleu}]\n",
            "no metric rlenv can carry over",
        ),
        ("[unclosed", "not a YAML task"),
    ],
)
def test_bad_tasks_are_one_line_exit_2(tmp_path: Path, content: str, message: str) -> None:
    task = tmp_path / "task.yaml"
    task.write_text(content)
    (tmp_path / "trivia_sample.jsonl").write_bytes((TASKS / "trivia_sample.jsonl").read_bytes())
    # called in this process: a refusal's one line and exit code (the entry point: below)
    done = in_process("import", "lm-eval", str(task), "--out", str(tmp_path / "out"))
    assert done.exit_code == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_left_out_is_listed_and_csv_data_and_import_is_deterministic(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("question,answer\nTwo plus two,4\nThree plus three,6\n")
    task = tmp_path / "task.yaml"
    task.write_text(
        "task: sums\ndataset_path: csv\ndataset_kwargs: {data_files: data.csv}\n"
        "test_split: train\ndoc_to_text: '{{question}}?'\ndoc_to_target: answer\n"
        "num_fewshot: 5\ngeneration_kwargs: {until: ['\\n'], num_beams: 2}\n"
        "metric_list: [{metric: exact_match}, {metric: bleu}]\nuse_prompt: 'promptsource:x'\n"
    )
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        done = cli("import", "lm-eval", str(task), "--out", str(out))
        assert done.returncode == 0, done.stderr
    for line in (
        "left out: csv data: every value is read as text",
        "left out: num_fewshot 5: lm-eval joins examples into one text",
        "left out: generation_kwargs.num_beams: not part of rlenv's decoding",
        "left out: metric bleu: only exact_match is carried",
        "left out: use_prompt: not carried",
    ):
        assert line in done.stdout, done.stdout
    spec_text = (outs[0] / "sums.yaml").read_text()
    assert "#   - metric bleu: only exact_match is carried" in spec_text
    records = read_jsonl(outs[0] / "inputs.jsonl")
    assert records[0] == {"id": "0", "question": "Two plus two", "answer": "4", "target": "4"}
    for file in outs[0].iterdir():
        assert file.read_bytes() == (outs[1] / file.name).read_bytes(), file.name


def test_missing_yaml_is_one_line(tmp_path: Path) -> None:
    done = cli("import", "lm-eval", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and done.stderr.strip().endswith("none.yaml: no such file")
