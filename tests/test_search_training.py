"""Issue 28 item 7: the bundled search env has a pinned training split, so README "Training with
TRL" can be tried on it as written: `rt.dataset` gives its training questions (none held out),
`rt.environment_factory`'s `search` method replays a training question's search from the
cassette, and `rt.reward_funcs` grade a completion in that rollout's world."""

from __future__ import annotations

import json

from tests.conftest import ROOT, read_jsonl

SEARCH = ROOT / "envs" / "search.yaml"


def test_search_env_trains_as_the_readme_says() -> None:
    import rlenv.trl as rt

    dataset = rt.dataset(SEARCH)  # README: train_dataset=rt.dataset(spec)
    train = {row["id"]: row for row in read_jsonl(ROOT / "fixtures/search/train_questions.jsonl")}
    held_out = {row["id"] for row in read_jsonl(ROOT / "fixtures/search/questions.jsonl")}
    assert sorted(dataset["rlenv_id"]) == sorted(train) and not held_out & set(train)
    row = next(r for r in dataset if r["rlenv_id"] == "t001")
    environment = rt.environment_factory(SEARCH)()  # README: environment_factory=...
    environment.reset(**row)
    found = json.loads(environment.search(query=train["t001"]["prompt"]))
    assert environment._calls[0]["fixture"] == "hit", found  # recorded, never live
    assert train["t001"]["answer"] in json.dumps(found)
    functions = rt.reward_funcs(SEARCH)
    assert [f.__name__ for f in functions] == ["passed", "reward_model"]
    assert rt.reward_weights(SEARCH) == [1.0, 1.0]
    completion = [{"role": "assistant", "content": train["t001"]["answer"]}]
    passed = functions[0]([row["prompt"]], [completion], ["t001"], environments=[environment])
    assert passed == [1.0]
