"""``GET /metrics`` over a real broker runtime, a real Kafka listener and real clients: the
scrape is parsed with Prometheus' own parser and its figures are checked against what the
test really sent, consumed and committed (REST through Django's test client, Kafka through
kafka-python against the listener on a loopback port)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from accounts.roles import set_role
from cairn import env, runtime
from cairn.runtime import BrokerRuntime
from kafka_listener.handlers import ListenerConfig
from kafka_listener.server import KafkaListener
from mqcore.broker import Broker
from server.metrics.requests import CountWebsockets, Timings, watch_kafka
from tests.api.conftest import assert_problem, make_runtime, wait_dispatched
from tests.support.tokens import make_token
from webui.routing import websocket_application

with warnings.catch_warnings():  # kafka-python loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "cairn.json"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[BrokerRuntime]:
    made = make_runtime(tmp_path / "store")
    made.start()
    runtime.install(made)
    try:
        yield made
    finally:
        made.stop()
        runtime.reset()


@pytest.fixture
def broker(rt: BrokerRuntime) -> Broker:
    assert rt.broker is not None
    return rt.broker


def user_client(name: str, role: str | None) -> APIClient:
    user = get_user_model().objects.create_user(name, password="pw-" + name)
    if role is not None:
        set_role(user, role)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {make_token(user)}")
    return client


@pytest.fixture
def operator(db: None, rt: BrokerRuntime) -> APIClient:
    return user_client("otto", "operator")


class Listener:
    """A KafkaListener over the runtime's broker on a loopback port, on its own event loop
    thread, instrumented as ``runbroker`` instruments its listener (:func:`watch_kafka`)."""

    def __init__(self, broker: Broker) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.listener = KafkaListener(broker, ListenerConfig(port=0, initial_rebalance_delay_ms=0))
        watch_kafka(self.listener)
        self.call(self.listener.start())

    def call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener.port}"

    def close(self) -> None:
        self.call(self.listener.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def kafka(broker: Broker) -> Iterator[Listener]:
    listener = Listener(broker)
    try:
        yield listener
    finally:
        listener.close()


# -- scraping ---------------------------------------------------------------------------------


def parse(text: str) -> Samples:
    """Every sample of a scrape, by (sample name, sorted labels), through Prometheus' parser."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def scrape(client: APIClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return parse(response.content.decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def eventually(check: Callable[[], object], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)


# -- who may scrape ---------------------------------------------------------------------------


def test_scrapes_need_a_token_of_a_user_with_a_role(db: None, rt: BrokerRuntime) -> None:
    anonymous = APIClient().get("/metrics")
    assert_problem(anonymous, 401)
    assert anonymous["WWW-Authenticate"] == "Token"
    assert "cairn_" not in anonymous.content.decode()
    assert_problem(APIClient(HTTP_AUTHORIZATION="Token not-a-token").get("/metrics"), 401)
    no_role = user_client("nobody", None).get("/metrics")
    assert "needs the viewer role" in assert_problem(no_role, 403)["detail"]
    samples = scrape(user_client("vera", "viewer"))
    assert value(samples, "cairn_up") == 1


def test_allowed_addresses_scrape_without_a_token(
    db: None, rt: BrokerRuntime, settings: Any
) -> None:
    settings.CAIRN_METRICS_ALLOW = (
        ipaddress.ip_network("10.1.0.0/16"),
        ipaddress.ip_network("fd00::/8"),
    )
    for address in ("10.1.2.3", "::ffff:10.1.200.7", "fd00::5"):
        response = APIClient(REMOTE_ADDR=address).get("/metrics")
        assert response.status_code == 200, address
        assert value(parse(response.content.decode()), "cairn_up") == 1
    for address in ("10.2.0.1", "127.0.0.1", "fe80::1"):
        assert_problem(APIClient(REMOTE_ADDR=address).get("/metrics"), 401)
    # Credentials that are sent are checked, even from an allowed address.
    bad_token = APIClient(REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Token nope")
    assert_problem(bad_token.get("/metrics"), 401)
    # Only GET: the endpoint changes nothing.
    assert_problem(APIClient(REMOTE_ADDR="10.1.2.3").post("/metrics"), 405)


def test_no_address_is_allowed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_METRICS_ALLOW", raising=False)
    assert env.metrics_allow() == ()
    monkeypatch.setenv("CAIRN_METRICS_ALLOW", " 10.0.0.0/8, ::1 ,192.168.1.7")
    assert [str(n) for n in env.metrics_allow()] == ["10.0.0.0/8", "::1/128", "192.168.1.7/32"]
    for bad in ("10.0.0.1/8", "example.com", "10.0.0.0/33"):
        monkeypatch.setenv("CAIRN_METRICS_ALLOW", bad)
        with pytest.raises(SystemExit, match=f"CAIRN_METRICS_ALLOW: '{re.escape(bad)}' is not"):
            env.metrics_allow()


def test_openmetrics_when_asked(db: None, rt: BrokerRuntime) -> None:
    client = user_client("vera", "viewer")
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().endswith("# EOF\n")
    # A bare text/plain (curl -H, some agents) is not a 406.
    assert client.get("/metrics", HTTP_ACCEPT="text/plain").status_code == 200


# -- the figures against what was done --------------------------------------------------------


def send_rest(client: APIClient, topic: str, bodies: list[str]) -> None:
    response = client.post(
        f"/api/v1/topics/{topic}/messages",
        {"messages": [{"body": b, "queue_id": 0} for b in bodies]},
        format="json",
    )
    assert response.status_code == 200, response.content


def test_rest_and_kafka_traffic_moves_the_counters_by_what_was_sent(
    operator: APIClient, broker: Broker, kafka: Listener
) -> None:
    topic, group = "metrics-orders", "metrics-billing"
    broker.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    before = scrape(operator)

    # 7 messages over REST in 3 requests, 4 over Kafka in 4 Produce requests.
    for bodies in (["r0", "r1", "r2"], ["r3", "r4"], ["r5", "r6"]):
        send_rest(operator, topic, bodies)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=0)
    for i in range(4):
        producer.send(topic, value=f"k{i}".encode(), partition=0).get(10)
    producer.close()
    wait_dispatched(broker)

    # A Kafka consumer group reads all 11 and commits 8: a lag of 3.
    consumer = KafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=group, enable_auto_commit=False
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < 11 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += records
    assert [r.value for r in got] == [f"r{i}".encode() for i in range(7)] + [
        f"k{i}".encode() for i in range(4)
    ]
    consumer.commit({tp: OffsetAndMetadata(8, None, -1)})
    after = scrape(operator)
    assert value(after, "cairn_kafka_connections") >= 1  # the consumer's, still open
    consumer.close()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert value(after, "cairn_topic_messages_in_total", topic=topic) == 11
    assert delta("cairn_topic_messages_out_total", topic=topic) == 11
    assert delta("cairn_messages_in_total") == 11
    assert delta("cairn_messages_out_total") == 11
    assert value(after, "cairn_group_lag_messages", group=group, topic=topic) == 3
    lag_s = value(after, "cairn_group_lag_seconds", group=group, topic=topic)
    oldest_unconsumed = broker.admin.group_lag(group).queues[0]
    assert oldest_unconsumed.lag == 3
    assert 0 < lag_s <= (time.time() * 1000 - oldest_unconsumed.oldest_unconsumed_timestamp) / 1000
    # The same lag the REST API reports (asked later: its age is no younger).
    (rest_lag,) = operator.get(f"/api/v1/groups/{group}/lag").json()["topics"]
    assert (rest_lag["topic"], rest_lag["lag"]) == (topic, 3)
    assert lag_s <= rest_lag["max_lag_ms"] / 1000

    # Requests: 3 sends (and the scrape before) over REST, 4 Produce requests over Kafka.
    sends = {"handler": "api:topic-messages", "method": "POST"}
    assert delta("cairn_http_requests_total", **sends, code="200") == 3
    assert delta("cairn_http_request_duration_seconds_count", **sends) == 3
    assert delta("cairn_http_request_duration_seconds_bucket", **sends, le="+Inf") == 3
    assert delta("cairn_http_request_duration_seconds_sum", **sends) > 0
    assert delta("cairn_http_requests_total", handler="metrics", method="GET", code="200") >= 1
    assert delta("cairn_kafka_request_duration_seconds_count", api="Produce") == 4
    assert delta("cairn_kafka_request_duration_seconds_count", api="Fetch") >= 1
    assert delta("cairn_kafka_request_duration_seconds_count", api="OffsetCommit") == 1
    eventually(
        lambda: value(scrape(operator), "cairn_kafka_connections") == 0,
        "the closed clients' connections are no longer counted",
    )


def test_fetches_served_from_produced_batches_are_counted(
    operator: APIClient, broker: Broker, kafka: Listener
) -> None:
    """Kafka-produced batches are fetched from the listener's cache of them, not the store
    (``kafka_listener/batch_cache.py``): those messages count as delivered all the same."""
    topic = "metrics-cached"
    broker.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, linger_ms=50)
    for batch in range(3):
        for i in range(5):
            producer.send(topic, value=f"{batch}-{i}".encode(), partition=0)
        producer.flush()
    producer.close()
    wait_dispatched(broker)
    before = scrape(operator)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[Any] = []
    deadline = time.monotonic() + 20
    while len(got) < 15 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += records
    consumer.close()
    assert len(got) == 15
    after = scrape(operator)
    assert value(after, "cairn_topic_messages_in_total", topic=topic) == 15
    delivered = value(after, "cairn_topic_messages_out_total", topic=topic) - value(
        before, "cairn_topic_messages_out_total", topic=topic
    )
    assert delivered == 15


def test_timings_add_up_every_threads_observations() -> None:
    """Observations from many threads at once, none lost; a bound is in its own bucket
    (``le`` is "less or equal"); the figures of threads that ended stay counted."""
    timings = Timings(bounds=(0.001, 0.01))
    per_thread, threads = 5000, 8

    def work() -> None:
        for i in range(per_thread):
            timings.observe(("Produce",), (0.0005, 0.001, 0.005, 0.5)[i % 4], ("Produce", 0))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for _ in range(2):  # the second scrape reads the folded-in shards of the ended threads
        family = timings.histogram("h", "h", ("api",))
        buckets = {s.labels["le"]: s.value for s in family.samples if s.name == "h_bucket"}
        total = threads * per_thread
        assert buckets == {"0.001": total / 2, "0.01": total * 3 / 4, "+Inf": total}
        (sum_sample,) = [s for s in family.samples if s.name == "h_sum"]
        assert sum_sample.value == pytest.approx(total / 4 * (0.0005 + 0.001 + 0.005 + 0.5))
        (count,) = timings.counter("c", "c", ("api", "code")).samples
        assert (count.labels, count.value) == ({"api": "Produce", "code": "0"}, total)
    assert timings._shards == []


def test_a_refused_request_is_counted_under_its_code(operator: APIClient, broker: Broker) -> None:
    labels = {"handler": "api:topic-messages", "method": "POST", "code": "404"}
    before = value(scrape(operator), "cairn_http_requests_total", **labels)
    send = operator.post(
        "/api/v1/topics/nope/messages", {"messages": [{"body": "x"}]}, format="json"
    )
    assert send.status_code == 404
    assert value(scrape(operator), "cairn_http_requests_total", **labels) == before + 1
    # Paths no pattern knows share one series (the label set stays bounded).
    APIClient().get("/no/such/page/123")
    APIClient().get("/no/such/page/456")
    names = {labels for (name, labels) in scrape(operator) if name == "cairn_http_requests_total"}
    assert not any(dict(labels)["handler"].startswith("/") for labels in names)


def test_store_disk_services_and_health_are_the_status_endpoints(
    operator: APIClient, broker: Broker
) -> None:
    broker.admin.create_topic("metrics-size", read_queue_nums=1, write_queue_nums=1)
    send_rest(operator, "metrics-size", ["x" * 1000] * 20)
    wait_dispatched(broker)
    status = operator.get("/api/v1/status").json()  # first: services only run more since
    samples = scrape(operator)
    assert value(samples, "cairn_disk_total_bytes") == status["disk_total_bytes"]
    # The disk guard's ratio (as df has it: blocks reserved for root count as used), not
    # used / total, which reads lower on a partition with reserved blocks.
    used, free = status["disk_used_bytes"], status["disk_free_bytes"]
    assert value(samples, "cairn_disk_used_ratio") == pytest.approx(used / (used + free), abs=0.011)
    assert value(samples, "cairn_store_size_bytes") >= 20_000
    assert value(samples, "cairn_commitlog_max_offset_bytes") == status["commitlog_max_offset"]
    assert value(samples, "cairn_topics") == status["topic_count"]
    assert value(samples, "cairn_store_health_ok") == 1
    assert value(samples, "cairn_store_writable") == 1
    assert value(samples, "cairn_store_problems") == 0
    for service, state in status["services"].items():
        assert value(samples, "cairn_service_up", service=service) == 1, service
        assert value(samples, "cairn_service_runs_total", service=service) >= state["runs"]
        assert value(samples, "cairn_service_errors_total", service=service) == 0
    assert value(samples, "cairn_service_runs_total", service="reput") > 0
    assert ("cairn_service_lag_bytes", (("service", "reput"),)) in samples
    assert ("cairn_service_lag_bytes", (("service", "flush"),)) in samples
    # Replication does not exist yet: nothing pretends it does. Tiered storage is off.
    assert not any("replica" in name or name.startswith("cairn_tier_") for name, _ in samples)
    assert value(samples, "process_resident_memory_bytes") > 0


def test_without_a_broker_the_scrape_says_down(db: None, tmp_path: Path) -> None:
    runtime.install(make_runtime(tmp_path / "never-started"))
    try:
        samples = scrape(user_client("vera", "viewer"))
    finally:
        runtime.reset()
    assert value(samples, "cairn_up") == 0
    assert not any(name.startswith("cairn_store_") for name, _ in samples)


@pytest.mark.django_db(transaction=True)
def test_console_websockets_are_counted(rt: BrokerRuntime) -> None:
    user = get_user_model().objects.create_user("vera", password="pw")
    set_role(user, "viewer")
    token = make_token(user)
    client = user_client("scraper", "viewer")
    app = CountWebsockets(websocket_application())
    base = value(scrape(client), "cairn_websocket_connections")

    async def scenario() -> None:
        first = WebsocketCommunicator(app, f"/ws/trace/?token={token}")
        second = WebsocketCommunicator(app, f"/ws/trace/?token={token}")
        assert (await first.connect())[0] and (await second.connect())[0]
        counted = await asyncio.to_thread(scrape, client)
        assert value(counted, "cairn_websocket_connections") == base + 2
        await first.disconnect()
        refused = WebsocketCommunicator(app, "/ws/trace/")  # no token: closed, never accepted
        assert not (await refused.connect())[0]
        counted = await asyncio.to_thread(scrape, client)
        assert value(counted, "cairn_websocket_connections") == base + 1
        await second.disconnect()

    asyncio.run(scenario())
    assert value(scrape(client), "cairn_websocket_connections") == base


# -- the Grafana dashboard ----------------------------------------------------------------------


def dashboard_metric_names() -> set[str]:
    text = DASHBOARD.read_text()
    board = json.loads(text)
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                if key in ("expr", "query", "definition") and isinstance(item, str):
                    exprs.append(item)
                else:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(board)
    names: set[str] = set()
    for expr in exprs:
        names |= set(re.findall(r"\b((?:cairn|process)_[a-z0-9_]+)\b", expr))
    return names


def test_the_dashboard_is_a_grafana_dashboard_with_a_prometheus_datasource_variable() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]


def test_the_dashboard_uses_only_metrics_the_endpoint_exposes(
    operator: APIClient, broker: Broker, kafka: Listener
) -> None:
    """Traffic of every kind first (histogram series exist once observed), then every metric
    name the dashboard's queries name must be in the scrape."""
    broker.admin.create_topic("metrics-board", read_queue_nums=1, write_queue_nums=1)
    broker.admin.create_group("metrics-board-group")
    send_rest(operator, "metrics-board", ["a", "b"])
    broker.commit_offset("metrics-board-group", "metrics-board", 0, 1)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap)
    producer.send("metrics-board", b"c", partition=0).get(10)
    producer.close()
    wait_dispatched(broker)
    pulled = operator.get("/api/v1/topics/metrics-board/messages", {"queue_id": 0})
    assert len(pulled.json()["messages"]) == 3
    exposed = {name for name, _ in scrape(operator)}
    used = dashboard_metric_names()
    assert len(used) >= 15
    assert sorted(used - exposed) == []
