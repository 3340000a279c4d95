"""Reference policies for the search env (``python:envs.search_env.policies:NAME`` model URIs).

- ``baseline``: one ``search`` call with the user's question, then a rule-based answer extracted
  from the returned snippets. Deterministic; answers most held-out questions right.
- ``null``: answers "I don't know." at once (a floor for every metric).
- ``padded``: the baseline's answer wrapped in flattery, a restatement of the question and
  repeated keywords; the gold answer is contained but exact match fails. A reward-hacking
  style policy for the length-bias / reward-hacking diagnostics.

``normalize_answer`` and ``exact_match`` are the normalisation the env's accuracy checks use.
"""

from __future__ import annotations

import json
import re
from typing import Any

UNKNOWN = "I don't know."
NAME = r"([A-Z][a-z]+ [A-Z][a-z]+)"
_PUNCT_OUTSIDE_NUMBERS = re.compile(r"(?<!\d)[^\w\s]|[^\w\s](?!\d)")

# (question pattern, answer pattern): the first question pattern that matches picks the answer
# pattern, applied to snippets in rank order. "{topic}" is replaced by the escaped topic phrase.
RULES: list[tuple[str, str]] = [
    (r"^who\b.*\bfounde[dr]\b", r"founded (?:in \d{4} )?by " + NAME),
    (r"\bfounded\b", r"founded in (\d{4})"),
    (r"\bpopulation\b|\bhow many people\b", r"population of (\d+)"),
    (r"\b(?:which|what) river\b", r"on the ([A-Z][a-z]+) River"),
    (r"\bhow long\b|\blength\b", r"(\d+) kilometres"),
    (r"\bwhich mountain\b|\bsource\b", r"rises on (Mount [A-Z][a-z]+)"),
    (r"\bwhich sea\b", r"into the ([A-Z][a-z]+ Sea)"),
    (r"\bhow high\b|\bheight\b", r"(\d+) metres"),
    (r"^who\b.*\b(?:climbed|ascent)\b", r"climbed (?:in \d{4} )?by " + NAME),
    (r"\byear\b.*\bclimbed\b", r"climbed in (\d{4})"),
    (r"^who invented\b", r"^" + NAME + r".*\b{topic}\b"),
    (r"\byear\b.*\binvented\b", r"\b{topic} in (\d{4})"),
    (r"\bwhich town\b.*\bborn\b", r"born in \d{4} in the town of ([A-Z][a-z]+)"),
    (r"\bborn\b", r"born in (\d{4})"),
    (r"\batomic number\b", r"atomic number (\d+)"),
    (r"^who\b.*\bdiscovered\b", r"discovered (?:in \d{4} )?by " + NAME),
    (r"\bdiscovered\b", r"discovered in (\d{4})"),
]


def normalize_answer(text: str) -> str:
    """Lowercase, strip, drop punctuation (except inside numbers), collapse whitespace."""
    return " ".join(_PUNCT_OUTSIDE_NUMBERS.sub("", text.lower().strip()).split())


def exact_match(prediction: str | None, answer: str, aliases: list[str] | None = None) -> bool:
    """Normalised prediction equals the gold answer or one of its aliases."""
    if prediction is None:
        return False
    golds = {normalize_answer(gold) for gold in [answer, *(aliases or [])]}
    return normalize_answer(prediction) in golds


def question_topic(question: str) -> str:
    """What the question is about: its capitalised phrase, else the words after 'the'."""
    words = question.rstrip(" ?.!").split(" ")
    capitalised = re.findall(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", " ".join(words[1:]))
    if capitalised:
        return str(max(capitalised, key=len))
    match = re.search(r"\bthe (.+?)(?: invented| discovered| made)?$", " ".join(words))
    return match.group(1) if match else ""


def extract_answer(question: str, results: list[dict[str, Any]]) -> str | None:
    """Pick the answer span from ranked search results with hand-written rules, or None."""
    topic = question_topic(question)
    # The topic's distinctive word must appear in the snippet: "Ossel" in "Ossel River",
    # "Luer" in "Kell Luer", "Kerrith" in "Mount Kerrith".
    words = topic.split(" ")
    head = words[0] if words[-1] in ("River", "Sea") else words[-1]
    for question_pattern, answer_pattern in RULES:
        if not re.search(question_pattern, question, flags=re.IGNORECASE):
            continue
        pattern = answer_pattern.replace("{topic}", re.escape(topic))
        for result in results:
            text = str(result.get("snippet", ""))
            if head and head.lower() not in text.lower():
                continue
            match = re.search(pattern, text)
            if match:
                return match.group(1)
        return None
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _question(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content")).strip()
    return ""


def _search_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        payload = json.loads(_text(message.get("content")))
    except (json.JSONDecodeError, TypeError):
        return []
    results = payload.get("results") if isinstance(payload, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []


def _search_call(messages: list[dict[str, Any]], question: str) -> dict[str, Any]:
    calls_so_far = sum(
        len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant"
    )
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{calls_so_far}",
                "type": "function",
                "function": {"name": "search", "arguments": json.dumps({"query": question})},
            }
        ],
    }


def baseline(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any
) -> dict[str, Any] | str:
    """Search once with the user's question, then answer from the top snippets."""
    question = _question(messages)
    if messages and messages[-1].get("role") == "tool":
        answer = extract_answer(question, _search_results(messages[-1]))
        return answer if answer else UNKNOWN
    if not question:
        return UNKNOWN
    return _search_call(messages, question)


def null(messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any) -> str:
    """Never searches, never knows."""
    return UNKNOWN


def padded(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], ctx: Any
) -> dict[str, Any] | str:
    """The baseline, with its final answer buried in flattery and keyword stuffing."""
    reply = baseline(messages, tools, ctx)
    if not isinstance(reply, str):
        return reply
    question = _question(messages)
    keywords = [w for w in re.findall(r"[A-Za-z]+", question) if len(w) > 3]
    stuffing = " ".join(keywords * 3)
    return (
        f'What a wonderful and deeply insightful question! You asked: "{question}" '
        f"This is a truly excellent question, and after a careful, thorough and rigorous "
        f"search of every relevant source, I am completely confident that the answer is "
        f"{reply}. To restate it clearly for you: {reply}. "
        f"Relevant keywords: {stuffing}."
    )
