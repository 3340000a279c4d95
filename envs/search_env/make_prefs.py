"""Generate the search env's preference pairs for the held-out reward model (seeded, offline).

Built from ``train_questions.jsonl`` and the corpus only -- never from the held-out
``questions.jsonl`` -- so the reward model trained on them has not seen the env's test inputs
(``rlenv.rm.leakage`` checks this). The 60 training questions are split by question: 48 feed
``prefs_train.jsonl`` and the other 12 feed ``prefs_heldout.jsonl``, so the held-out pairs ask
about facts the reward model never saw.

Chosen answers are correct: the gold answer bare or wrapped ("The answer is 1779."), an
alias, or a sentence stating the fact, sometimes long. Rejected answers are "I don't know"
(``dont_know``), refusals (``refusal``), the correct answer to a different question
(``off_topic``), a sentence from a distractor document about the same entity (``wrong_entity``:
"The Nimstead Coopers Guild was founded in 1464 by Ivo Zaswell.") or a value taken from it
(``wrong_value``: "The answer is 1464." -- often of the right type, so only the corpus could tell
it apart). A seeded coin makes chosen the longer answer in some pairs and the shorter in others,
so length alone does not separate them. Each pair records its ``type`` and the ``core`` of the
chosen answer (the gold answer, used by ``rlenv rm eval`` for short-but-good counterexamples).

    python envs/search_env/make_prefs.py [--seed N] [--out fixtures/search] [--train-rm]

``--train-rm`` then trains the bundled reward model into ``fixtures/search/rm`` (the same as
``rlenv rm train fixtures/search/prefs_train.jsonl --out fixtures/search/rm``; needs the rm extra).
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

DEFAULT_SEED = 20250601
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "search"
N_TRAIN_QUESTIONS = 48  # the remaining training questions feed the held-out pairs

ANSWER_TYPE = {
    "town_founded": "year",
    "mountain_year": "year",
    "inventor_born": "year",
    "invention_year": "year",
    "element_year": "year",
    "town_founder": "person",
    "mountain_climber": "person",
    "inventor_of": "person",
    "element_discoverer": "person",
    "town_population": "number",
    "river_length": "number",
    "mountain_height": "number",
    "element_number": "number",
    "town_river": "place",
    "river_source": "place",
    "river_sea": "place",
    "inventor_hometown": "place",
}
SENTENCES = {
    "town_founded": "{T} was founded in {A}.",
    "town_founder": "{T} was founded by {A}.",
    "town_population": "{T} has a population of {A}.",
    "town_river": "{T} lies on the {A} River.",
    "river_length": "The {T} is {A} kilometres long.",
    "river_source": "The {T} rises on {A}.",
    "river_sea": "The {T} flows into the {A}.",
    "mountain_height": "{T} is {A} metres high.",
    "mountain_climber": "{T} was first climbed by {A}.",
    "mountain_year": "{T} was first climbed in {A}.",
    "inventor_of": "The {I} was invented by {A}.",
    "inventor_born": "{T} was born in {A}.",
    "inventor_hometown": "{T} was born in the town of {A}.",
    "invention_year": "The {I} was invented in {A}.",
    "element_number": "{T} has the atomic number {A}.",
    "element_discoverer": "{T} was discovered by {A}.",
    "element_year": "{T} was discovered in {A}.",
}
WRAPPERS = ["{v}", "{v}", "The answer is {v}.", "It is {v}.", "I found that the answer is {v}."]
DONT_KNOW = [
    "I don't know.",
    "Unknown.",
    "I'm not sure.",
    "I could not find that.",
    "I don't know the answer to that question, sorry.",
    "I could not find any information about this in the documents I searched.",
]
REFUSALS = [
    "I'm sorry, but I can't help with that request.",
    "As an AI language model, I am unable to look up this information for you.",
    "I cannot answer questions like this one. Please consult another source.",
    "Sorry, I am not able to search for that right now, so I will not guess.",
    "I can't help with that.",
    "I won't answer that.",
]
POOL_PATTERNS = {
    "year": r"\b(1[3-9]\d\d)\b",
    "person": r"\b([A-Z][a-z]+ [A-Z][a-z]+)\b",
    "number": r"\b(\d{2,6})\b",
    "place": r"(?:on the |town of |rises on )((?:Mount )?[A-Z][a-z]+)",
}
NOT_NAME = {"The", "Its", "It", "Mount", "Eskerra", "Lantern", "Fair", "Guild", "Courier", "Museum",
            "Hut", "Bridge", "River", "Sea"}  # fmt: skip


def values_in(text: str, kind: str) -> list[str]:
    """The years, names, numbers or places in a text (names of guilds, fairs, etc. excluded)."""
    found = []
    for value in re.findall(POOL_PATTERNS[kind], text):
        if kind == "person" and set(value.split()) & NOT_NAME:
            continue
        if kind == "number" and re.fullmatch(r"1[3-9]\d\d", value):
            continue
        found.append(value)
    return found


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def value_pools(corpus: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Candidate wrong answers of each type, taken from the whole corpus, sorted."""
    pools: dict[str, set[str]] = {kind: set() for kind in POOL_PATTERNS}
    for doc in corpus:
        for kind in POOL_PATTERNS:
            pools[kind].update(values_in(doc["text"], kind))
    return {kind: sorted(values) for kind, values in pools.items()}


def entity(doc: dict[str, Any]) -> str:
    """What a fact document is about: its title ("Mount Kerrith", "Ossel River", "Samdale")."""
    return str(doc["title"])


def invention(prompt: str) -> str:
    match = re.search(r"the ([a-z]+ [a-z]+) invented|invented the ([a-z]+ [a-z]+)", prompt)
    if not match:
        return "invention"
    return match.group(1) or match.group(2)


def sentence(question: dict[str, Any], doc: dict[str, Any], answer: str) -> str:
    template = SENTENCES[question["kind"]]
    return template.format(T=entity(doc), A=answer, I=invention(question["prompt"]))


def distractors(question: dict[str, Any], corpus: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(sentence, value) from other documents that mention the question's entity.

    The sentence is about a different entity (the town's guild, a bridge on the river, the
    inventor's museum, the element's ore), the value is a year, name, number or place in it.
    """
    title = entity(_doc(corpus, question["doc_id"]))
    head = title.replace("Mount ", "").replace(" River", "")
    if question["kind"].startswith("invent"):
        head = head.split(" ", 1)[1]  # a person: their surname names the museum
    found: list[tuple[str, str]] = []
    gold = {str(question["answer"]), *question["aliases"]}
    for doc in corpus:
        if doc["id"] == question["doc_id"] or head not in doc["text"]:
            continue
        for part in re.split(r"(?<=\.) ", doc["text"]):
            if head not in part:
                continue
            for kind in sorted(POOL_PATTERNS):
                for value in values_in(part, kind):
                    if value not in gold and value not in head and head not in value:
                        found.append((part, value))
    return sorted(set(found))


def _doc(corpus: list[dict[str, Any]], doc_id: str) -> dict[str, Any]:
    return next(doc for doc in corpus if doc["id"] == doc_id)


def pick_other(pool: list[str], avoid: set[str], rng: random.Random) -> str:
    while True:
        value = rng.choice(pool)
        if value not in avoid:
            return value


def words(text: str) -> int:
    return len(text.split())


def pick_pair(chosen: list[str], rejected: list[str], rng: random.Random) -> tuple[str, str]:
    """A (chosen, rejected) pair; a coin decides which of the two is longer when both can be."""
    chosen_longer = rng.random() < 0.5
    candidates = [
        (c, r)
        for c in chosen
        for r in rejected
        if (words(c) > words(r)) == chosen_longer and words(c) != words(r)
    ]
    return rng.choice(candidates or [(c, r) for c in chosen for r in rejected])


def pairs_for(
    question: dict[str, Any],
    others: list[dict[str, Any]],
    corpus: list[dict[str, Any]],
    pools: dict[str, list[str]],
    rng: random.Random,
) -> list[dict[str, Any]]:
    """Six or seven preference pairs about one question, one per kind of bad answer."""
    doc = _doc(corpus, question["doc_id"])
    gold = str(question["answer"])
    answer_type = ANSWER_TYPE[question["kind"]]
    avoid = {gold, *question["aliases"]}
    stated = sentence(question, doc, gold)
    long_stated = (
        f"According to the encyclopedia entry on {entity(doc)},"
        f" {stated[0].lower() + stated[1:-1] if stated.startswith('The ') else stated[:-1]},"
        " as the article states in its first lines."
    )
    chosen = [gold, *question["aliases"], *(w.format(v=gold) for w in WRAPPERS[2:])]
    chosen += [stated, long_stated]
    same_value = pick_other(pools[answer_type], avoid, rng)
    other = rng.choice(others)
    other_doc = _doc(corpus, other["doc_id"])
    found = distractors(question, corpus)
    distractor_text, distractor_value = rng.choice(found) if found else (same_value, same_value)
    rejected = {
        "dont_know": DONT_KNOW,
        "refusal": REFUSALS,
        "off_topic": [str(other["answer"]), sentence(other, other_doc, str(other["answer"]))],
        "wrong_entity": [distractor_text],
        "wrong_value": [w.format(v=distractor_value) for w in WRAPPERS[1:]],
    }
    kinds = list(rejected)
    kinds.append(rng.choice(kinds[:3]))
    if rng.random() < 0.4:
        kinds.append(rng.choice(kinds[:4]))
    made = [(*pick_pair(chosen, rejected[kind], rng), kind) for kind in kinds]
    return [
        {
            "id": f"{question['id']}-{number}",
            "prompt": question["prompt"],
            "chosen": chosen_text,
            "rejected": rejected_text,
            "type": kind,
            "core": gold,
        }
        for number, (chosen_text, rejected_text, kind) in enumerate(made, start=1)
    ]


def build(
    seed: int, train_questions: list[dict[str, Any]], corpus: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train pairs, held-out pairs) over disjoint question sets."""
    rng = random.Random(seed)
    questions = sorted(train_questions, key=lambda q: q["id"])
    rng.shuffle(questions)
    train_q, heldout_q = questions[:N_TRAIN_QUESTIONS], questions[N_TRAIN_QUESTIONS:]
    pools = value_pools(corpus)
    out: list[list[dict[str, Any]]] = []
    for group in (train_q, heldout_q):
        pairs: list[dict[str, Any]] = []
        for question in sorted(group, key=lambda q: q["id"]):
            others = [q for q in group if q["id"] != question["id"]]
            pairs.extend(pairs_for(question, others, corpus, pools, rng))
        out.append(pairs)
    return out[0], out[1]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    lines = [json.dumps(record, ensure_ascii=False) for record in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--data", type=Path, default=DEFAULT_DIR, help="corpus + train questions")
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--train-rm", action="store_true", help="then train the bundled reward model into OUT/rm"
    )
    args = parser.parse_args(argv)
    corpus = read_jsonl(args.data / "corpus.jsonl")
    train_questions = read_jsonl(args.data / "train_questions.jsonl")
    train, heldout = build(args.seed, train_questions, corpus)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "prefs_train.jsonl", train)
    write_jsonl(args.out / "prefs_heldout.jsonl", heldout)
    longer = sum(len(p["chosen"].split()) > len(p["rejected"].split()) for p in train + heldout)
    print(
        f"wrote {len(train)} train and {len(heldout)} held-out pairs"
        f" (chosen longer in {longer} of {len(train) + len(heldout)})"
    )
    if args.train_rm:
        from rlenv.rm.train import train as train_rm

        result = train_rm(args.out / "prefs_train.jsonl", args.out / "rm")
        metrics = result.manifest["metrics"]
        print(
            f"trained {result.out}: train accuracy {metrics['train_accuracy']:.3f},"
            f" holdout accuracy {metrics['holdout_accuracy']:.3f} ({result.seconds:.1f}s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
