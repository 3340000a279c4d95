"""Text as a reader sees it: what `contains` compares, and what `numeric` reads numbers from.

A block list that compares code points is bypassed by text that looks the same: a Cyrillic
``а`` for a Latin ``a``, a zero-width space or a soft hyphen inside a word, fullwidth or
mathematical letters. `visible` drops the characters that show nothing; `skeleton` also maps
compatibility forms (NFKC) and each character that is confusable with others to one
representative of its class (from confusable-homoglyphs' copy of Unicode's confusables data),
so that two texts that look alike compare equal.
"""

from __future__ import annotations

import unicodedata
from functools import cache

# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt): rendered as
# nothing when not supported. Format characters (category Cf: soft hyphen, zero-width space
# and joiners, bidi controls, tags) are dropped too, whatever their range.
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def _ignorable(char: str) -> bool:
    code = ord(char)
    if unicodedata.category(char) == "Cf":
        return True
    return any(low <= code <= high for low, high in _IGNORABLE_RANGES)


def visible(text: str) -> str:
    """The text without the characters that render as nothing (zero-width, soft hyphen, ...)."""
    return "".join(char for char in text if not _ignorable(char))


@cache
def _representatives() -> dict[str, str]:
    """Each confusable character -> the representative of its class: the classes join every
    single-character pair of the confusables data; the representative is the class's first
    ASCII letter, else its first ASCII character, else its first character."""
    from confusable_homoglyphs.confusables import confusables_data

    parent: dict[str, str] = {}

    def root(char: str) -> str:
        while parent.setdefault(char, char) != char:
            parent[char] = parent[parent[char]]
            char = parent[char]
        return char

    for char, homoglyphs in confusables_data.items():
        for homoglyph in homoglyphs:
            other = homoglyph["c"].replace("\u200e", "")  # the data wraps RTL glyphs in LRMs
            if len(char) == 1 and len(other) == 1:
                parent[root(char)] = root(other)
    classes: dict[str, list[str]] = {}
    for char in parent:
        classes.setdefault(root(char), []).append(char)
    mapping: dict[str, str] = {}
    for members in classes.values():
        chosen = min(members, key=lambda c: (not (c.isascii() and c.isalpha()), not c.isascii(), c))
        mapping.update((member, chosen) for member in members if member != chosen)
    return mapping


def skeleton(text: str) -> str:
    """What the text looks like: NFKC, invisible characters dropped, confusables mapped."""
    mapping = _representatives()
    shown = visible(unicodedata.normalize("NFKC", text))
    return "".join(mapping.get(char, char) for char in shown)
