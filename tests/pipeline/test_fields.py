"""The vectorised property parser against mqcore's one-record decoder, on random texts.

``parse_properties`` splits every record at once (separator positions, segment bounds, the
first ``\\x01`` of each segment) and finds names by integer keys; each of those steps has edge
cases (empty segments, a ``\\x02`` at a record's end, ``\\x01`` in values, NULs, repeated or
long names) that a generated store rarely holds, so they are generated here directly.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from mqcore.format.properties import decode_properties_text
from pipeline.fields import (
    Properties,
    hex_ids,
    host_texts,
    parse_properties,
    repeat_text,
    split_keys,
)

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


def _check_against_mqcore(texts: list[str]) -> Properties:
    array = pa.array(texts, pa.string())
    expected = [decode_properties_text(t) for t in texts]
    props = parse_properties(array)
    assert [dict(m) for m in props.map.to_pylist()] == expected
    names = {name for m in expected for name in m} | {"TAGS", "absent", "CONSUME_START_TIME"}
    for name in names:
        assert props.lookup(name).to_pylist() == [m.get(name) for m in expected]
    return props


def test_same_names_in_every_record_use_the_template() -> None:
    rng = random.Random(5)
    texts = [
        f"TAGS\x01t{i}\x02KEYS\x01{rng.choice(['a', 'b c', 'ü' * 9])}\x02"
        f"CONSUME_START_TIME\x01{i}\x02"
        for i in range(300)
    ]
    props = _check_against_mqcore(texts)
    assert props.template == {"TAGS": 0, "KEYS": 1, "CONSUME_START_TIME": 2}
    assert not props.duplicates
    # A name given twice in every record: still a template, the later value wins.
    props = _check_against_mqcore([f"A\x01{i}\x02B\x01b\x02A\x01last{i}\x02" for i in range(50)])
    assert props.template == {"A": 2, "B": 1} and props.duplicates
    # No properties at all.
    assert _check_against_mqcore(["", ""]).template == {}


@pytest.mark.parametrize(
    "odd",
    [
        "TAGX\x01t\x02KEYS\x01k\x02",  # same lengths, other bytes
        "KEYS\x01k\x02TAGS\x01t\x02",  # other order
        "TAGS\x01t\x02",  # fewer entries
        "TAGS\x01t\x02KEYS\x01k\x02WAIT\x01true\x02",  # more entries
        "",  # none
    ],
)
def test_one_odd_record_is_not_a_template(odd: str) -> None:
    # As many entries in all as the first record times the records, but spread otherwise.
    _check_against_mqcore(["A\x01a\x02B\x01b\x02", "", "A\x01a\x02B\x01b\x02C\x01c\x02D\x01d\x02"])
    texts = ["TAGS\x01tag\x02KEYS\x01a b\x02"] * 40
    for where in (0, 17, 39):
        props = _check_against_mqcore([*texts[:where], odd, *texts[where + 1 :]])
        assert props.template is None


@pytest.mark.parametrize(
    "odd",
    [
        "TAGS\x01t\x02KEYS\x01k",  # no final \x02
        "TAGS\x01t\x01u\x02",  # \x01 inside a value
        "\x01t\x02KEYS\x01k\x02",  # empty name
        "TAGS\x01\x02KEYS\x01k\x02",  # empty value
        "TAGS\x02KEYS\x01k\x02",  # no \x01
        "TA\x00GS\x01t\x02",  # NUL
        "\x02",
    ],
)
def test_irregular_records_are_split_by_the_general_rule(odd: str) -> None:
    texts = ["TAGS\x01tag\x02KEYS\x01a b\x02"] * 30
    for where in (0, 29):
        _check_against_mqcore([*texts[:where], odd, *texts[where + 1 :]])


_KEYS_TYPE = pa.list_(pa.field("element", pa.string()))


@pytest.mark.parametrize("seed", range(4))
def test_split_keys_equals_python(seed: int) -> None:
    rng = random.Random(seed)
    even = [" ".join(rng.choice(["k", "order-1", "ü"]) for _ in range(3)) for _ in range(200)]
    pieces = ["", " ", "  ", "a", "bb", "ü"]
    anyhow = ["".join(rng.choice(pieces) for _ in range(rng.randrange(6))) for _ in range(200)]
    # Same space count everywhere, but an empty key somewhere: the general split.
    shaped = [["a  b", "c  d"], [" a", " b"], ["a ", "b "], ["a b", "c d", "ef"], ["a b", "", "c"]]
    for values in (even, anyhow, ["x"] * 5, [*even[:9], None], *shaped):
        array = pa.array(["skipped", *values], pa.string()).slice(1)
        expected = [[k for k in (v or "").split(" ") if k] for v in values]
        assert split_keys(array, _KEYS_TYPE).to_pylist() == expected
    assert split_keys(pa.array([], pa.string()), _KEYS_TYPE).to_pylist() == []


def test_hex_ids_and_host_texts() -> None:
    rng = random.Random(1)
    raw = bytes(rng.randrange(256) for _ in range(16 * 20))
    matrix = np.frombuffer(raw, np.uint8).reshape(20, 16)
    expected = [raw[i : i + 16].hex().upper() for i in range(0, 320, 16)]
    assert hex_ids(matrix).to_pylist() == expected
    one = int.from_bytes(bytes([10, 0, 0, 5, 0, 0, 0x2A, 0x9F]), "big", signed=True)
    other = int.from_bytes(bytes([192, 168, 1, 2, 0, 0, 0, 80]), "big", signed=True)
    assert host_texts(np.array([one] * 3, np.int64)).to_pylist() == ["10.0.0.5:10911"] * 3
    mixed = host_texts(np.array([one, other, one], np.int64)).to_pylist()
    assert mixed == ["10.0.0.5:10911", "192.168.1.2:80", "10.0.0.5:10911"]
    assert repeat_text("", 2).to_pylist() == ["", ""]
