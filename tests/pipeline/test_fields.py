"""The vectorised property parser against mqcore's one-record decoder, on random texts.

``parse_properties`` splits every record at once (separator positions, segment bounds, the
first ``\\x01`` of each segment) and finds names by integer keys; each of those steps has edge
cases (empty segments, a ``\\x02`` at a record's end, ``\\x01`` in values, NULs, repeated or
long names) that a generated store rarely holds, so they are generated here directly.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from mqcore.store.properties import decode_properties_text
from pipeline.fields import parse_properties

# Few distinct pieces, so that names repeat, share prefixes and cross the 8/16-byte key words.
_PIECES = [
    "",
    "\x01",
    "\x02",
    "\x00",
    "A",
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "UNIQ_KEYS",
    "CONSUME_START_TIME",
    "CONSUME_START_TIMX",
    "ü",
    "v 1",
]


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randrange(0, 12)))


def _rocketmq_text(rng: random.Random) -> str:
    """Distinct names per record (no duplicates anywhere: the integer-key lookup is used)."""
    pool = ["TAGS", "KEYS", "UNIQ_KEY", "UNIQ_KEYS", "CONSUME_START_TIME", "CONSUME_START_TIMX"]
    names = rng.sample([*pool, "A", "ü"], rng.randrange(6))
    return "".join(f"{n}\x01{rng.choice(['a', 'b c', 'x' * 20])}\x02" for n in names)


def _repeated_text(rng: random.Random) -> str:
    """A name given twice in one record: the later value wins (the slower exact path)."""
    return _rocketmq_text(rng) + "UNIQ_KEY\x01first\x02" + _rocketmq_text(rng)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["random", "rocketmq", "repeated"])
def test_parse_properties_equals_mqcore(seed: int, kind: str) -> None:
    rng = random.Random(seed)
    make = {"random": _random_text, "rocketmq": _rocketmq_text, "repeated": _repeated_text}[kind]
    texts = [make(rng) for _ in range(400)]
    array = pa.array(texts, pa.string())
    for sliced in (array, array.slice(7)):  # a non-zero offset is copied first
        expected = [decode_properties_text(t) for t in sliced.to_pylist()]
        props = parse_properties(sliced)
        if kind != "random":
            assert props.duplicates == (kind == "repeated")
        assert [dict(m) for m in props.map.to_pylist()] == expected
        for name in ("TAGS", "KEYS", "UNIQ_KEY", "UNIQ_KEYS", "CONSUME_START_TIME", "A", "ü"):
            assert props.lookup(name).to_pylist() == [m.get(name) for m in expected]


def test_no_records_and_no_properties() -> None:
    assert parse_properties(pa.array([], pa.string())).map.to_pylist() == []
    props = parse_properties(pa.array(["", "\x02\x02", "x\x01"], pa.string()))
    assert props.map.to_pylist() == [[], [], []]
    assert props.lookup("x").to_pylist() == [None, None, None]
