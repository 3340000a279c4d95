"""How a numeric verifier reads numbers in a declared locale and base (rlenv.verifiers.numbers),
in process: each locale's grammar reads its own example and refuses digit groups of another,
and a base-2/8/16 answer is read with its sign and prefix, words skipped, a digit outside the
base refused with the token named. Part of the mutation run's fast set for the verifiers."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rlenv.verifiers.numbers import (
    _GRAMMARS,
    LOCALE_EXAMPLES,
    LOCALES,
    Unreadable,
    _grammar,
    numbers_in,
)


@pytest.mark.parametrize("locale", sorted(LOCALES))
def test_each_locale_grammar_reads_its_own_numbers(locale: str) -> None:
    grammar = _grammar(locale)  # the table the reader uses is built by it, at import
    assert grammar.pattern == _GRAMMARS[locale].pattern
    groups, decimal = LOCALES[locale]
    assert grammar.fullmatch(LOCALE_EXAMPLES[locale])
    assert grammar.fullmatch("1234") and grammar.fullmatch(f"12{decimal}5")
    assert grammar.fullmatch(f"{decimal}5")  # a leading decimal mark
    assert not grammar.fullmatch(f"1{decimal}")  # a mark with no digit after it
    assert not grammar.fullmatch("XXXX") and not grammar.fullmatch("")
    other = "," if decimal == "." else "."
    assert not grammar.fullmatch(f"12{other}5") or other in groups
    if groups:
        assert grammar.fullmatch(f"1{groups[0]}234{groups[0]}567{decimal}25")
        assert not grammar.fullmatch(f"1{groups[0]}23")  # a group of two digits
        assert not grammar.fullmatch(f"1234{groups[0]}567")  # a first group of four
    else:
        assert not grammar.fullmatch("1,234")


@pytest.mark.parametrize(
    ("text", "base", "values"),
    [
        ("0x1A and 0X1a", 16, [26, 26]),
        ("0x5", 16, [5]),  # the shortest prefixed number
        ("1b01", 16, [0x1B01]),  # a b inside a hex number is a digit, not a prefix
        ("face 1a", 16, [26]),  # a word without a digit is skipped, the reading goes on
        ("0x", 16, []),  # a prefix alone is no number
        ("-0x1a, \u22121a, +1a", 16, [-26, -26, 26]),
        ("0o17 and -17", 8, [15, -15]),
        ("0b101 \u2212110", 2, [5, -6]),
        ("hello 17 world", 8, [15]),  # a word is not a digit outside the base
    ],
)
def test_numbers_in_another_base(text: str, base: int, values: list[int]) -> None:
    assert numbers_in(text, base=base) == [Decimal(v) for v in values]


@pytest.mark.parametrize(
    ("text", "base", "message"),
    [
        ("129", 8, "'129' is not a base-8 number"),
        ("-0b102", 2, "'-0b102' is not a base-2 number"),
        ("2", 2, "'2' is not a base-2 number"),
        ("0b101", 16, "'0b101' is written in base 2; this verifier reads base 16"),
        ("-0x1f", 8, "'-0x1f' is written in base 16; this verifier reads base 8"),
    ],
)
def test_a_number_outside_the_base_is_named(text: str, base: int, message: str) -> None:
    with pytest.raises(Unreadable) as caught:
        numbers_in(text, base=base)
    assert str(caught.value) == message
