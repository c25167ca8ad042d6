"""Tag expressions: parsing into tag codes and the real-tag re-check."""

from __future__ import annotations

import pytest

from mqcore.broker.tags import MATCH_ALL, parse_tag_expression
from mqcore.errors import ValidationError
from mqcore.format.hashing import java_string_hash


@pytest.mark.parametrize("expression", [None, "", "  ", "*", " * "])
def test_match_all(expression: str | None) -> None:
    parsed = parse_tag_expression(expression)
    assert parsed is MATCH_ALL and parsed.matches_all
    assert parsed.matches(None) and parsed.matches("anything")


def test_or_list() -> None:
    parsed = parse_tag_expression(" A ||B|| ||C ")
    assert parsed.tags == frozenset({"A", "B", "C"})
    assert parsed.codes == frozenset(java_string_hash(t) for t in "ABC")
    assert parsed.matches("B") and not parsed.matches("D") and not parsed.matches(None)


def test_collision_shares_a_code_but_not_a_match() -> None:
    parsed = parse_tag_expression("Aa")
    assert parsed.codes == frozenset({java_string_hash("BB")})
    assert parsed.matches("Aa") and not parsed.matches("BB")


def test_separators_only() -> None:
    with pytest.raises(ValidationError) as info:
        parse_tag_expression(" || ")
    assert (info.value.field, info.value.rule) == ("tag_expression", "no_tags")
