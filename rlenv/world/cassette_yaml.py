"""A vcrpy YAML cassette read one interaction at a time: the same data as vcrpy's own loader
(its safe `_CassetteLoader`), in a fraction of the memory.

PyYAML composes a whole document into nodes (each scalar a node with two position marks) before
it builds one value: a 4.7 MB cassette of 10 000 interactions took ~233 MB at its peak, and a
first `rlenv run` of it (which builds the cassette's index) peaked at ~313 MB of PSS against
~145 MB for the runs after it. A cassette as vcrpy writes it is a block mapping whose
``interactions:`` items each start at column 0 with ``- ``; each item is parsed on its own,
so only one item's nodes exist at a time.

Only text of that shape is split: anything else (a flow-style list, items indented, document
markers or directives, no item at all) is parsed whole, as is every text in which one part does
not parse alone (an alias to an anchor in another item, a quoted string whose next line starts
at column 0) or parses to anything but one item (tests/test_cassette_yaml.py holds the
catalogue, each case checked against the whole parse).
"""

from __future__ import annotations

from typing import Any


def deserialize(text: str) -> Any:
    """`text` parsed as vcrpy's yamlserializer parses it."""
    import yaml
    from vcr.serializers import yamlserializer

    parts = _split(text)
    if parts is None:
        return yamlserializer.deserialize(text)
    head, items = parts
    try:
        data = yamlserializer.deserialize(head)
        if not isinstance(data, dict) or data.get("interactions") is not None:
            return yamlserializer.deserialize(text)
        interactions = []
        for item in items:
            parsed = yamlserializer.deserialize(item)
            if not isinstance(parsed, list) or len(parsed) != 1:
                return yamlserializer.deserialize(text)
            interactions.append(parsed[0])
    except yaml.YAMLError:
        return yamlserializer.deserialize(text)
    data["interactions"] = interactions
    return data


def _split(text: str) -> tuple[str, list[str]] | None:
    """(the text without its interactions' items, each item's text), or None when the text is
    not of the shape that splits (see the module's docstring)."""
    head: list[str] = []
    items: list[list[str]] = []
    inside = False  # in the block of the top-level `interactions:` key
    for line in text.splitlines(keepends=True):
        first = line[:1]
        if first in ("", " ", "\n", "\r", "#") or line.isspace():
            (items[-1] if inside and items else head).append(line)
            continue
        if first in ("%", "\t") or line.startswith(("---", "...")):
            return None  # a directive, a document marker, a tab: parsed whole
        if line.startswith("- ") or line.rstrip("\r\n") == "-":
            if not inside:
                return None  # a top-level sequence, or items of another key
            items.append([line])
            continue
        inside = line.rstrip() == "interactions:"
        if inside and items:
            return None  # a second `interactions:` key
        head.append(line)
    if not items:
        return None
    return "".join(head), ["".join(item) for item in items]
