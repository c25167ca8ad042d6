"""Pure helpers of the console: body views, form parsing, search parameters, the chart series."""

from __future__ import annotations

import pytest

from webui import format as fmt
from webui.metrics import Sample, ThroughputSampler
from webui.search import SearchQuery, parse_query
from webui.trace import TraceRequest, parse_request


def test_body_preview_text_binary_and_cut_characters() -> None:
    assert fmt.body_preview(b'{"a":  1,\n "b": 2}') == ('{"a": 1, "b": 2}', "text")
    text, kind = fmt.body_preview("é".encode() * 400)
    assert kind == "text" and text.endswith("…") and len(text) == 161
    assert fmt.body_preview(b"\xff\xfe\x00") == ("ff fe 00", "hex")


def test_body_views() -> None:
    views = fmt.body_views(b'{"b": [1, 2]}')
    assert views["is_text"] and views["json"] == '{\n  "b": [\n    1,\n    2\n  ]\n}'
    assert views["hex"].startswith("00000000  7b 22 62 22")
    assert fmt.body_views(b"plain words")["json"] is None
    binary = fmt.body_views(bytes(range(256)))
    assert not binary["is_text"] and binary["text"] is None
    assert len(binary["hex"].splitlines()) == 16


def test_pairs_round_trip_and_errors() -> None:
    assert fmt.parse_pairs("a=1\n\n# note\n b = two words \n") == {"a": "1", "b": "two words"}
    assert fmt.format_pairs({"b": "2", "a": "1"}) == "a=1\nb=2"
    with pytest.raises(ValueError, match="line 2"):
        fmt.parse_pairs("a=1\nnot a pair")
    with pytest.raises(ValueError):
        fmt.parse_pairs("=value")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (950, "950 ms"),
        (12_400, "12.4 s"),
        (200_000, "3 min 20 s"),
        (7_500_000, "2 h 5 min"),
        (3 * 86_400_000, "3 d 0 h"),
    ],
)
def test_durations(ms: int, text: str) -> None:
    assert fmt.human_duration_ms(ms) == text


def test_sizes_and_perm() -> None:
    assert fmt.human_bytes(512) == "512 B" and fmt.human_bytes(1536) == "1.5 KiB"
    assert [fmt.perm_text(p) for p in (6, 4, 2, 0, 7)] == ["RW", "R-", "-W", "--", "RWI"]
    assert fmt.utc_text(1_767_225_600_123) == "2026-01-01 00:00:00.123 UTC"


def test_search_parameters() -> None:
    now = 1_767_225_600_000
    assert parse_query({}, now) == (None, {})
    query, errors = parse_query({"mode": "key", "key": "order-1"}, now)
    assert errors == {} and query == SearchQuery(
        "key", key="order-1", begin=now - 3_600_000, end=now
    )
    query, _ = parse_query(
        {"mode": "time", "topic": "Orders", "begin": "2026-01-01T00:00:00", "end_ms": str(now + 5)},
        now,
    )
    assert query is not None and (query.begin, query.end) == (now, now + 5)
    _, errors = parse_query({"mode": "key", "key": "a b", "limit": "5000"}, now)
    assert set(errors) == {"key", "limit"}
    _, errors = parse_query({"mode": "time", "begin_ms": "10", "end_ms": "5"}, now)
    assert set(errors) == {"topic", "end"}
    _, errors = parse_query({"mode": "queue", "topic": "bad topic", "offset": "-1"}, now)
    assert set(errors) == {"topic", "offset"}
    _, errors = parse_query({"mode": "id", "msg_id": "zz"}, now)
    assert set(errors) == {"msg_id"}
    query, _ = parse_query(
        {"mode": "queue", "topic": "T", "queue_id": "2", "offset": "9", "tag": "x"}, now
    )
    assert query is not None
    assert query.params() == {
        "mode": "queue",
        "limit": "50",
        "topic": "T",
        "queue_id": "2",
        "offset": "9",
        "tag": "x",
    }


def test_trace_request_matching() -> None:
    request = TraceRequest("Orders", "k", 100, 200)
    event = {"topic": "Orders", "store_timestamp": 150, "keys": "a k", "uniq_key": "U"}
    assert request.matches(event)
    assert not request.matches(event | {"topic": "Other"})
    assert not request.matches(event | {"store_timestamp": 201})
    assert not request.matches(event | {"keys": "ka"})
    assert TraceRequest(None, "U", 0, None).matches(event | {"topic": "Other", "keys": None})


def test_throughput_series_rates_and_restarts() -> None:
    sampler = ThroughputSampler(interval_s=5)
    sampler._samples.extend(
        [
            Sample(0, 100, 10, 1),
            Sample(5_000, 150, 20, 1),
            Sample(10_000, 5, 0, 2),  # the broker was replaced: no negative rate
            Sample(15_000, 30, 5, 2),
        ]
    )
    series = sampler.series()
    assert series["points"] == [[5_000, 10.0, 2.0], [15_000, 5.0, 1.0]]
    assert series["interval_s"] == 5


def test_kafka_names_are_the_stores_with_bar_for_dot() -> None:
    from webui.names import NameConverter, kafka_name, store_name

    assert store_name("shop.orders") == "shop|orders" and store_name("plain-1") == "plain-1"
    assert kafka_name("shop|orders") == "shop.orders"
    assert kafka_name("%DLQ%a|b") == "%DLQ%a|b"  # retry and DLQ names are not Kafka's
    converter = NameConverter()
    assert converter.to_python(converter.to_url("shop|orders")) == "shop|orders"
    query, errors = parse_query({"mode": "queue", "topic": "shop.orders"}, 10**12)
    assert errors == {} and query is not None and query.topic == "shop|orders"
    frame = '{"topic": "shop.orders", "key": "k", "begin": 0}'
    assert parse_request(frame).topic == "shop|orders"
