"""Tag filter expressions: ``*`` or ``A || B || C`` (spec 3.1, RocketMQ ``FilterAPI``).

A pull filters twice, as RocketMQ does:

1. the store compares each ConsumeQueue unit's tag code (``String.hashCode`` of TAGS) with the
   codes of the expression's tags, without reading the CommitLog;
2. :meth:`TagFilter.matches` re-checks the real ``TAGS`` string of what the store returned,
   because two different tags can share a hash code (``"Aa"`` and ``"BB"`` do).

Parsing follows ``FilterAPI.buildSubscriptionData``: blank or ``*`` means every message;
otherwise the expression is split on ``||``, each part trimmed, empty parts dropped. An
expression with no tag left (``"||"``) is refused rather than silently matching nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqcore.errors import ValidationError
from mqcore.format.hashing import java_string_hash

SUB_ALL = "*"
_SEPARATOR = "||"


@dataclass(frozen=True, slots=True)
class TagFilter:
    """A parsed expression. ``tags`` and ``codes`` are None for ``*`` (match everything)."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int] | None

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def matches(self, tags: str | None) -> bool:
        """The client-side re-check: the message's real tag is one of the expression's."""
        return self.tags is None or (tags is not None and tags in self.tags)


MATCH_ALL = TagFilter(SUB_ALL, None, None)


def parse_tag_expression(expression: str | None, field: str = "tag_expression") -> TagFilter:
    """Parse ``*`` / ``A || B``.

    Raises:
        ValidationError: rule ``no_tags`` when the expression holds separators only.
    """
    if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
        return MATCH_ALL
    tags = frozenset(part.strip() for part in expression.split(_SEPARATOR) if part.strip())
    if not tags:
        raise ValidationError(
            field,
            "no_tags",
            f"{field}: {expression!r} names no tag; use '*' for all messages or 'A || B'",
        )
    return TagFilter(expression, tags, frozenset(java_string_hash(tag) for tag in tags))
