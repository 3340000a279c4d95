"""Generate the search env's fictional corpus and question sets (seeded, offline, deterministic).

The world is the invented continent of Eskerra: towns, rivers, mountains, inventors and chemical
elements, each described by exactly one "fact" document, plus distractor documents (guilds,
fairs, bridges, huts, minerals, museums, ferries, newspapers, provinces) that share names and
words with the questions but never state the asked fact. Every question therefore has exactly
one answering document and a short answer (a name, a year or a number).

    python envs/search_env/make_corpus.py [--seed N] [--out fixtures/search]

writes corpus.jsonl (300 docs), questions.jsonl (40 held-out) and train_questions.jsonl (60
other questions over the same corpus, disjoint from the held-out ones).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_SEED = 20240611
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "fixtures" / "search"
N_HELD_OUT = 40
N_TRAIN = 60

ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r"]
ONSETS += ["s", "st", "t", "tr", "v", "w", "z", "th", "sk", "c"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou"]
CODAS = ["", "", "n", "r", "l", "s", "nd", "rk", "ll", "st", "v", "m"]

GIVEN_NAMES = [
    "Orla", "Tomas", "Idris", "Maren", "Corin", "Lysa", "Bram", "Edda", "Fenn", "Hale",
    "Ilse", "Jory", "Kasia", "Leof", "Mira", "Niall", "Odile", "Pell", "Quin", "Rhea",
    "Sabel", "Tobin", "Una", "Vesna", "Wren", "Yara", "Aldo", "Bettan", "Cleo", "Dagny",
    "Emrys", "Faye", "Gideon", "Hesper", "Ivo", "Juna", "Kell", "Lorne", "Mabry", "Nessa",
]  # fmt: skip
PRODUCTS = ["blue wool", "salt fish", "copper pots", "apple brandy", "slate roofs", "rope",
            "honey cakes", "glass beads", "barley beer", "felt hats", "tallow candles",
            "cheese"]  # fmt: skip
CROPS = ["barley", "flax", "rye", "hops", "apples", "turnips", "oats", "pears"]
CRAFTS = ["Weavers", "Coopers", "Glassblowers", "Masons", "Tanners", "Chandlers", "Ropemakers",
          "Clockmakers"]  # fmt: skip
INVENTION_ADJ = ["tidal", "folding", "copper", "pneumatic", "echo", "salt", "wind", "ice",
                 "signal", "thread", "brass", "steam", "mirror", "clockwork"]  # fmt: skip
INVENTION_NOUN = ["clock", "loom", "press", "compass", "kiln", "pump", "telegraph", "lens",
                  "bellows", "sextant", "plough", "lamp", "barometer", "winch"]  # fmt: skip
ELEMENT_KIND = ["soft grey metal", "pale yellow gas", "brittle black solid", "dense blue metal",
                "glowing green salt", "light silver metal"]  # fmt: skip
ORE_COLOUR = ["green", "red", "violet", "black", "white", "amber"]

SUFFIXES = {
    "town": ["holt", "wick", "mere", "stead", "ford", "by", "ham", "ton", "moor", "dale", "gate"],
    "river": ["el", "ine", "an", "ora", "uss", "ent", "ith"],
    "mountain": ["rith", "gar", "mont", "dor", "kesh", "vane"],
    "family": ["ick", "ley", "son", "er", "ow", "ard", "ing", "ett", "ham", "well"],
    "element": ["ium"],
    "mineral": ["ite"],
    "sea": ["ic", "an", "os"],
    "province": ["land", "mark", "shire", "vale"],
    "range": ["ean", "ic"],
    "plain": ["", "a", "o"],
}

# Openings that mention the entity but state no asked fact. About a quarter of the fact documents
# get one, so their later facts fall beyond the service's 240-character snippet: a realistic
# retrieval failure that keeps the snippet-only baseline below a perfect score.
PREAMBLE_RATE = 0.15
PREAMBLES = {
    "town": "Old coaching guides and parish rolls describe {name} as a quiet market settlement "
    "of narrow lanes, stone warehouses and a busy quay where barges unload timber each morning.",
    "river": "Boatmen, millers and eel fishers have worked the banks of the {name} River for "
    "centuries, and its spring floods are still marked on painted posts beside the locks.",
    "mountain": "Seen from the valley farms, Mount {name} is a broad grey wall of rock and ice "
    "that hides the sun until late morning for most of the long winter months.",
    "inventor": "Remembered in workshop songs and in the letters of many apprentices, {name} "
    "kept detailed notebooks full of sketches, failed designs and careful measurements.",
    "element": "Assayers in the northern smelting works long puzzled over the residue they "
    "later named {name}, which stained their crucibles and spoiled many batches of ore.",
}


@dataclass
class World:
    """Every generated entity and the documents/questions built from them."""

    rng: random.Random
    used: set[str] = field(default_factory=set)
    docs: list[dict[str, str]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)

    def word(self, kind: str) -> str:
        """A new capitalised invented word, unique across the whole world."""
        while True:
            stem = self.rng.choice(ONSETS) + self.rng.choice(VOWELS) + self.rng.choice(CODAS)
            if kind in ("river", "mountain", "sea", "plain"):
                stem += self.rng.choice(ONSETS) + self.rng.choice(VOWELS)
            suffix = self.rng.choice(SUFFIXES[kind])
            if suffix[:1] in "aeiouy" and stem[-1] in "aeiouy":
                stem += self.rng.choice(["r", "l", "n", "v", "s", "d"])
            candidate = (stem + suffix).capitalize()
            tripled = any(
                a == b == c
                for a, b, c in zip(candidate, candidate[1:], candidate[2:], strict=False)
            )
            if 4 <= len(candidate) <= 11 and not tripled and candidate.lower() not in self.used:
                self.used.add(candidate.lower())
                return candidate

    def person(self) -> str:
        return f"{self.rng.choice(GIVEN_NAMES)} {self.word('family')}"

    def doc(self, title: str, text: str) -> str:
        """Add a document; ids are assigned after the final shuffle."""
        key = f"tmp{len(self.docs)}"
        self.docs.append({"id": key, "title": title, "text": text})
        return key

    def preamble(self, kind: str, name: str) -> str:
        """Sometimes a long opening sentence, which pushes the facts out of a search snippet."""
        if self.rng.random() >= PREAMBLE_RATE:
            return ""
        return PREAMBLES[kind].format(name=name) + " "

    def ask(
        self, kind: str, doc: str, prompts: list[str], answer: object, aliases: list[str]
    ) -> None:
        self.questions.append(
            {
                "kind": kind,
                "doc": doc,
                "prompt": self.rng.choice(prompts),
                "answer": str(answer),
                "aliases": [a for a in aliases if a != str(answer)],
            }
        )


def article(phrase: str) -> str:
    return ("an " if phrase[0] in "aeiou" else "a ") + phrase


def surname(person: str) -> str:
    return person.split(" ", 1)[1]


def build(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Build the corpus and the full candidate question list for ``seed``."""
    w = World(random.Random(seed))
    rng = w.rng

    provinces = [w.word("province") for _ in range(6)]
    seas = [w.word("sea") for _ in range(4)]
    ranges = [w.word("range") for _ in range(3)]
    mountains = [w.word("mountain") for _ in range(18)]
    rivers = [w.word("river") for _ in range(16)]
    towns = [w.word("town") for _ in range(36)]

    # Mountains
    for name in mountains:
        height = rng.randint(1200, 6400)
        climbed = rng.randint(1780, 1960)
        climber = w.person()
        d = w.doc(
            f"Mount {name}",
            w.preamble("mountain", name)
            + f"Mount {name} is a peak in the {rng.choice(ranges)} range, {height} metres high. "
            f"It was first climbed in {climbed} by {climber}. "
            "Snow covers its summit for most of the year.",
        )
        w.ask(
            "mountain_height",
            d,
            [f"How high is Mount {name}?", f"What is the height of Mount {name} in metres?"],
            height,
            [f"{height} metres", f"{height} m"],
        )
        w.ask(
            "mountain_climber",
            d,
            [f"Who first climbed Mount {name}?", f"Who made the first ascent of Mount {name}?"],
            climber,
            [surname(climber)],
        )
        w.ask(
            "mountain_year",
            d,
            [f"In what year was Mount {name} first climbed?"],
            climbed,
            [],
        )
        hut = w.word("plain")
        w.doc(
            f"{hut} Hut",
            f"The {hut} Hut stands at {rng.randint(800, height - 300)} metres on the slopes of "
            f"Mount {name}. Walkers use it as a shelter before the final climb.",
        )

    # Rivers
    for name in rivers:
        length = rng.randint(40, 900)
        source = rng.choice(mountains)
        sea = rng.choice(seas)
        d = w.doc(
            f"{name} River",
            w.preamble("river", name)
            + f"The {name} River rises on Mount {source} and flows {length} kilometres into the "
            f"{sea} Sea. Its lower valley is farmed for {rng.choice(CROPS)}.",
        )
        w.ask(
            "river_length",
            d,
            [
                f"How long is the {name} River in kilometres?",
                f"What is the length of the {name} River?",
            ],
            length,
            [f"{length} km", f"{length} kilometres"],
        )
        w.ask(
            "river_source",
            d,
            [
                f"On which mountain does the {name} River rise?",
                f"Where is the source of the {name} River?",
            ],
            f"Mount {source}",
            [source],
        )
        w.ask(
            "river_sea",
            d,
            [f"Into which sea does the {name} River flow?"],
            f"{sea} Sea",
            [sea, f"the {sea} Sea"],
        )
    for _ in range(24):
        bridge = w.word("plain")
        w.doc(
            f"{bridge} Bridge",
            f"The {bridge} Bridge crosses the {rng.choice(rivers)} River. It was built in "
            f"{rng.randint(1500, 1930)} and is {rng.randint(30, 600)} metres long.",
        )
    for _ in range(20):
        ferry = w.word("plain")
        start = rng.randint(1700, 1880)
        w.doc(
            f"The ferry {ferry}",
            f"The ferry {ferry} carried passengers and cattle on the {rng.choice(rivers)} River "
            f"from {start} until {start + rng.randint(5, 60)}.",
        )

    # Towns
    town_river: dict[str, str] = {}
    town_year: dict[str, int] = {}
    town_province: dict[str, str] = {}
    for name in towns:
        year = rng.randint(1312, 1899)
        founder = w.person()
        river = rng.choice(rivers)
        population = rng.randint(800, 240000)
        province = rng.choice(provinces)
        town_river[name], town_year[name], town_province[name] = river, year, province
        d = w.doc(
            name,
            w.preamble("town", name)
            + f"{name} is a town in the province of {province}, on the {river} River. "
            f"It was founded in {year} by {founder}. {name} has a population of {population}. "
            f"The town is known for its {rng.choice(PRODUCTS)}.",
        )
        w.ask(
            "town_founded",
            d,
            [f"In what year was the town of {name} founded?", f"When was {name} founded?"],
            year,
            [],
        )
        w.ask(
            "town_founder",
            d,
            [f"Who founded the town of {name}?", f"Who was the founder of {name}?"],
            founder,
            [surname(founder)],
        )
        w.ask(
            "town_population",
            d,
            [f"What is the population of {name}?", f"How many people live in {name}?"],
            population,
            [],
        )
        w.ask(
            "town_river",
            d,
            [f"On which river does {name} lie?", f"Which river flows through the town of {name}?"],
            river,
            [f"{river} River", f"the {river} River"],
        )
    for name in rng.sample(towns, 30):
        guild_year = rng.randint(1320, 1900)
        while guild_year == town_year[name]:
            guild_year = rng.randint(1320, 1900)
        w.doc(
            f"{name} {rng.choice(CRAFTS)} Guild",
            f"The {name} {rng.choice(CRAFTS)} Guild was founded in {guild_year} by {w.person()}. "
            "Its members met each month in the old hall near the market square.",
        )
    for name in rng.sample(towns, 30):
        # Fixed-length template on purpose: these documents tie exactly under BM25, so the
        # service's seeded tie-breaking is exercised by queries like "lantern fair".
        w.doc(
            f"{name} Lantern Fair",
            f"The {name} Lantern Fair is held every spring in the town of {name}, with music "
            "and paper lanterns along the water.",
        )
    for name in rng.sample(towns, 22):
        w.doc(
            f"{name} Courier",
            f"The {name} Courier is a weekly newspaper printed in {name} since "
            f"{rng.randint(1780, 1920)}. It reports on markets, weddings and river levels.",
        )
    for province in provinces:
        members = sorted(t for t in towns if town_province[t] == province)
        listed = sorted(rng.sample(members, min(4, len(members))))
        towns_text = ", ".join(listed[:-1]) + f" and {listed[-1]}" if len(listed) > 1 else listed[0]
        w.doc(
            f"Province of {province}",
            f"{province} is a province of Eskerra. Its towns include {towns_text}. "
            "Its council meets twice a year.",
        )

    # Inventors
    pairs = [(a, n) for a in INVENTION_ADJ for n in INVENTION_NOUN]
    for adjective, noun in rng.sample(pairs, 24):
        invention = f"{adjective} {noun}"
        person = w.person()
        born = rng.randint(1700, 1880)
        invented = born + rng.randint(22, 60)
        hometown = rng.choice(towns)
        d = w.doc(
            person,
            w.preamble("inventor", person)
            + f"{person} was an inventor, born in {born} in the town of {hometown}. "
            f"{surname(person)} is best known for inventing the {invention} in {invented}.",
        )
        w.ask("inventor_of", d, [f"Who invented the {invention}?"], person, [surname(person)])
        w.ask(
            "inventor_born",
            d,
            [f"In what year was the inventor {person} born?", f"When was {person} born?"],
            born,
            [],
        )
        w.ask("inventor_hometown", d, [f"In which town was {person} born?"], hometown, [])
        w.ask(
            "invention_year",
            d,
            [f"In what year was the {invention} invented?"],
            invented,
            [],
        )
        museum_town = rng.choice([t for t in towns if t != hometown])
        w.doc(
            f"{surname(person)} Museum",
            f"The {surname(person)} Museum in {museum_town} opened in "
            f"{rng.randint(1890, 1990)}. It shows the workshop tools and notebooks of {person}.",
        )

    # Elements
    numbers = rng.sample(range(1, 121), 16)
    symbols: set[str] = set()
    for number in numbers:
        name = w.word("element")
        symbol = next(
            name[0] + c for c in name[1:] + "xqzjk" if c.isalpha() and (name[0] + c) not in symbols
        )
        symbols.add(symbol)
        discovered = rng.randint(1750, 1950)
        discoverer = w.person()
        d = w.doc(
            name,
            w.preamble("element", name)
            + f"{name} is a chemical element of Eskerra with the symbol {symbol} and atomic number "
            f"{number}. It was discovered in {discovered} by {discoverer}. {name} is a "
            f"{rng.choice(ELEMENT_KIND)}.",
        )
        w.ask("element_number", d, [f"What is the atomic number of {name}?"], number, [])
        w.ask(
            "element_discoverer",
            d,
            [f"Who discovered the element {name}?", f"Who discovered {name}?"],
            discoverer,
            [surname(discoverer)],
        )
        w.ask("element_year", d, [f"In what year was {name} discovered?"], discovered, [])
        mineral = w.word("mineral")
        w.doc(
            mineral,
            f"{mineral} is {article(rng.choice(ORE_COLOUR))} ore of {name}. "
            f"It was first described in {rng.randint(1700, 1950)} by {w.person()}, "
            f"who found it near {rng.choice(towns)}.",
        )

    # Stable public ids on a shuffled order, so an id says nothing about a document's kind.
    order = list(range(len(w.docs)))
    rng.shuffle(order)
    renamed: dict[str, str] = {}
    corpus: list[dict[str, Any]] = []
    for new_index, old_index in enumerate(order, start=1):
        doc = w.docs[old_index]
        renamed[doc["id"]] = f"d{new_index:04d}"
        corpus.append({"id": renamed[doc["id"]], "title": doc["title"], "text": doc["text"]})
    corpus.sort(key=lambda d: d["id"])
    for question in w.questions:
        question["doc"] = renamed[question["doc"]]
    return corpus, w.questions


def split_questions(
    questions: list[dict[str, Any]], seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Draw disjoint held-out and training sets (different facts, different prompts)."""
    rng = random.Random(seed + 1)
    chosen = rng.sample(questions, N_HELD_OUT + N_TRAIN)

    def record(prefix: str, index: int, q: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": f"{prefix}{index:03d}",
            "prompt": q["prompt"],
            "answer": q["answer"],
            "aliases": q["aliases"],
            "doc_id": q["doc"],
            "kind": q["kind"],
        }

    held_out = [record("q", i, q) for i, q in enumerate(chosen[:N_HELD_OUT], start=1)]
    train = [record("t", i, q) for i, q in enumerate(chosen[N_HELD_OUT:], start=1)]
    return held_out, train


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    lines = [json.dumps(r, ensure_ascii=False, separators=(", ", ": ")) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    corpus, questions = build(args.seed)
    held_out, train = split_questions(questions, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out / "corpus.jsonl", corpus)
    write_jsonl(args.out / "questions.jsonl", held_out)
    write_jsonl(args.out / "train_questions.jsonl", train)
    print(f"wrote {len(corpus)} docs, {len(held_out)} held-out and {len(train)} train questions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
