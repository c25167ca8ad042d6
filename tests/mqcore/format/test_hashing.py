"""Java String.hashCode: the scalar and vectorised forms, index key hashes and tag codes
(spec 0, 3.1, 4.4)."""

from __future__ import annotations

import random
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.format.hashing import (
    _ascii_u32,
    index_hash_array,
    index_hash_with_prefix,
    index_hashes_of_ragged,
    index_hashes_with_prefix,
    index_key_hash,
    java_hash_u32,
    java_string_hash,
    tag_code,
    tag_codes,
)


def reference_hash(s: str) -> int:
    """The spec's own formula, verbatim (section 0)."""
    b = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(b), 2):
        h = (31 * h + (b[i] << 8 | b[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("", 0),
        ("polygenelubricants", -2147483648),
        ("TopicTest#OrderID188", -1231271670),
        ("标签", 857175),
        ("😀", 1772899),
    ],
)
def test_spec_vectors(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_index_key_hash_vectors() -> None:
    assert index_key_hash("TopicTest#OrderID188") == 1231271670
    assert index_key_hash("TopicTest#OrderID188") % 5_000_000 == 1271670
    assert index_key_hash("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) -> 0
    assert index_key_hash("TagA") == 2598919


def test_long_strings_use_the_same_polynomial() -> None:
    for length in (19, 20, 21, 64, 255, 256, 257, 5000):
        text = "k" * (length - 3) + "标签😀"[: min(3, length)]
        assert java_string_hash(text) == reference_hash(text)


def test_lone_surrogate_counts_as_one_unit() -> None:
    assert java_string_hash("\ud83d") == 0xD83D
    assert java_string_hash("a\udc00b") == reference_hash("a\udc00b")


@given(st.text(alphabet=st.characters(codec=None)))
def test_matches_reference(text: str) -> None:
    h = java_string_hash(text)
    assert h == reference_hash(text)
    assert -(2**31) <= h < 2**31


@given(st.text(min_size=21, max_size=300))
def test_matches_reference_long(text: str) -> None:
    assert java_string_hash(text) == reference_hash(text)


@given(st.text())
def test_index_key_hash_is_abs(text: str) -> None:
    h = java_string_hash(text)
    assert index_key_hash(text) == (0 if h == -(2**31) else abs(h))


def test_tag_code() -> None:
    assert tag_code(None) == 0
    assert tag_code("") == 0
    assert tag_code("TagA") == 2598919
    assert tag_code("标签") == 857175


def test_tag_codes_of_a_column() -> None:
    """The vectorised tag codes (reput's column) equal the scalar ones, cached or not."""
    tags = ["TagA", None, "", "标签", "TagA", *(f"fresh-{i}" for i in range(50)), None]
    expected = [reference_hash(t) if t else 0 for t in tags]
    assert tag_codes(tags) == expected
    assert [tag_code(t) for t in tags] == expected
    assert tag_codes(tags) == expected  # now all cached


# --- fast paths: ASCII base-31 conversion, batched index hashes ------------------------------


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=700))
def test_ascii_fast_path_matches_reference(text: str) -> None:
    assert java_string_hash(text) == reference_hash(text)
    assert _ascii_u32(text.encode("ascii")) == reference_hash(text) & 0xFFFFFFFF
    assert java_hash_u32(text) == reference_hash(text) & 0xFFFFFFFF


def test_ascii_lengths_around_loop_and_chunk_limits() -> None:
    rng = random.Random(7)
    for length in [*range(0, 20), 255, 256, 257, 511, 512, 513, 640, 641, 5000]:
        text = "".join(chr(rng.randrange(128)) for _ in range(length))
        assert java_string_hash(text) == reference_hash(text), length
    assert java_string_hash("\x7f" * 300) == reference_hash("\x7f" * 300)  # largest digits


def test_ascii_path_ignores_int_max_str_digits() -> None:
    text = "x" * 5000
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest limit CPython accepts
    try:
        assert java_string_hash(text) == reference_hash(text)
    finally:
        sys.set_int_max_str_digits(old)


def _min_value_key(prefix: str) -> str:
    """A 7-unit key with hash(prefix + key) == Integer.MIN_VALUE (index hash 0)."""
    rest = (2**31 - (reference_hash(prefix) & 0xFFFFFFFF) * 31**7) % 2**32
    units = []
    for power in range(6, -1, -1):
        unit, rest = divmod(rest, 31**power)
        units.append(unit)
    return "".join(map(chr, units))


def test_index_hashes_with_prefix_match_one_by_one() -> None:
    rng = random.Random(11)
    topics = ["TopicTest", "t", "Orders-%RETRY%", "标签"]
    alphabet = [chr(c) for c in range(128)] + ["é", "标", "😀", "\ud800"]
    for trial in range(60):
        count = rng.choice([0, 1, 5, 47, 48, 49, 200, 700])
        common = rng.choice([0, 1, 7, 16, 32, 100, 256, 257])
        prefixes: list[int] = []
        keys: list[str] = []
        full: list[str] = []
        for _ in range(count):
            topic = rng.choice(topics)
            if rng.random() < 0.75:
                key = "".join(chr(rng.randrange(128)) for _ in range(common))
            else:
                key = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
            prefixes.append(reference_hash(topic + "#") & 0xFFFFFFFF)
            keys.append(key)
            full.append(f"{topic}#{key}")
        expected = [index_key_hash(k) for k in full]
        assert index_hashes_with_prefix(prefixes, keys) == expected, trial
        assert [index_hash_with_prefix(p, k) for p, k in zip(prefixes, keys, strict=True)] == (
            expected
        )


def test_index_hashes_min_value_and_single_topic_group() -> None:
    key = _min_value_key("TopicTest#")
    assert reference_hash("TopicTest#" + key) == -(2**31)
    prefix = reference_hash("TopicTest#") & 0xFFFFFFFF
    keys = [key] * 60 + ["A" * 7] * 60  # two lane groups, one of them all Integer.MIN_VALUE
    hashes = index_hashes_with_prefix([prefix] * len(keys), keys)
    assert hashes[:60] == [0] * 60
    assert hashes[60:] == [index_key_hash("TopicTest#" + "A" * 7)] * 60
    assert index_hash_with_prefix(prefix, key) == 0


@given(
    st.lists(
        st.tuples(st.sampled_from(["T", "TopicTest", "x" * 40]), st.text(max_size=50)),
        max_size=120,
    )
)
def test_index_hashes_with_prefix_hypothesis(pairs: list[tuple[str, str]]) -> None:
    prefixes = [java_string_hash(t + "#") & 0xFFFFFFFF for t, _ in pairs]
    keys = [k for _, k in pairs]
    assert index_hashes_with_prefix(prefixes, keys) == [
        index_key_hash(f"{t}#{k}") for t, k in pairs
    ]


@pytest.mark.parametrize("mixed_topics", [False, True])
def test_index_hashes_of_keys_with_a_shared_stem(mixed_topics: bool) -> None:
    """Groups whose keys share a prefix (UNIQ_KEYs of one producer, numbered business keys,
    identical keys) hash that prefix once: same values as one by one."""
    rng = random.Random(5)
    head = "0A01020300002A9F" + "1234ABCD" + "0000"
    groups = [
        [f"{head}{i:04X}" for i in range(rng.randrange(48, 300))],
        [f"ORDER-{i:010d}" for i in range(rng.randrange(48, 300))],
        ["same-key"] * 60,
        [f"{rng.choice('ab')}{i:05d}" for i in range(100)],  # no shared prefix
    ]
    topics = ["TopicTest", "Orders", "t"] if mixed_topics else ["TopicTest"]
    for keys in groups:
        chosen = [rng.choice(topics) for _ in keys]
        prefixes = [reference_hash(t + "#") & 0xFFFFFFFF for t in chosen]
        expected = [index_key_hash(f"{t}#{k}") for t, k in zip(chosen, keys, strict=True)]
        assert index_hashes_with_prefix(prefixes, keys) == expected


def test_index_hash_array_matches_one_by_one() -> None:
    """One topic's keys as an int64 array: one length (the column scheme), mixed lengths,
    non-ASCII keys, short runs, Integer.MIN_VALUE."""
    prefix = reference_hash("TopicTest#") & 0xFFFFFFFF
    head = "0A01020300002A9F1234ABCD"
    groups = [
        [f"{head}{i:08X}" for i in range(300)],
        [f"{head}{i:08X}" for i in range(20)],
        [f"k{i}" for i in range(100)],
        [f"{head}{i:08X}" if i % 9 else "标签" for i in range(100)],
        [_min_value_key("TopicTest#")] * 50,
        [],
    ]
    for keys in groups:
        expected = [index_key_hash(f"TopicTest#{k}") for k in keys]
        hashes = index_hash_array(prefix, keys)
        assert hashes.dtype == np.int64
        assert hashes.tolist() == expected


def test_index_hashes_of_ragged_match_one_by_one() -> None:
    """Keys of several lengths right-aligned in one zero-padded grid (reput's keyed runs):
    the values of one by one, for keys of 1 to 300 bytes, a key that starts with \x00,
    Integer.MIN_VALUE, and an empty grid."""
    prefix = reference_hash("TopicTest#") & 0xFFFFFFFF
    rng = random.Random(9)
    keys = [f"order-{i}" for i in range(0, 100_000, 997)]
    keys += ["a", "\x00b", "z" * 300, _min_value_key("TopicTest#")]
    keys += ["".join(rng.choices("ab-_9", k=rng.randrange(1, 40))) for _ in range(100)]
    width = max(map(len, keys))
    grid = np.zeros((len(keys), width), np.uint8)
    for row, key in enumerate(keys):
        grid[row, width - len(key) :] = np.frombuffer(key.encode("ascii"), np.uint8)
    lengths = np.array(list(map(len, keys)), np.int64)
    hashes = index_hashes_of_ragged(prefix, grid, lengths)
    assert hashes.dtype == np.int64
    assert hashes.tolist() == [index_key_hash(f"TopicTest#{k}") for k in keys]
    assert index_hashes_of_ragged(prefix, grid[:0], lengths[:0]).tolist() == []
