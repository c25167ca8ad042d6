"""The base stores every static fault starts from, and one static fault run.

A base is written once per session by a real broker (sync flush, the suite's small geometry):

* ``faults-rest``: 4 queues, 2,000 messages sent over REST in batches of 50;
* ``faults.kafka`` (``faults|kafka`` in Cairn): 3 partitions, 900 records produced by an
  idempotent confluent-kafka producer;
* groups ``g-rest`` and ``g-kafka`` with committed offsets (``subscriptionGroup.json``,
  ``consumerOffset.json``); 4 delayed messages, delivered before the stop
  (``delayOffset.json``); a ``consumerFilter.json`` written as an operator migrating from
  RocketMQ would bring it (the broker only reads that file), with its ``.bak``;
* ``faults-newest``: 2 queues, created last (so ``topics.json.bak`` lacks it), 96 messages.

About 3,000 messages, 1.1 MB of CommitLog in 5 segments of 256 KiB, 3 ConsumeQueue files per
queue, 7 IndexFiles. The **clean** base is stopped with SIGTERM; the **killed** base is a copy
of it that took 450 more messages and was killed with SIGKILL (``abort`` left behind).

Every run copies a base, so a fault never sees another run's damage, and the ledger of the
base (what its producers were told) is the ledger of the copy.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.faults.harness import (
    Broker,
    BrokerDied,
    Fault,
    HealthView,
    Ledger,
    Verdict,
    body_for,
    copy_tree,
    create_kafka_topic,
    digest,
    finish,
    key_for,
    manage_run,
    produce_kafka,
    quote_topic,
    read_queues,
    send_rest,
    verify,
)
from tests.support.manage import SHARED_SETTINGS, broker_env

REST_TOPIC, REST_QUEUES = "faults-rest", 4
KAFKA_TOPIC, KAFKA_PARTITIONS = "faults.kafka", 3
NEWEST_TOPIC, NEWEST_QUEUES = "faults-newest", 2
DELAY_TOPIC = REST_TOPIC
FILTERS = (("faults-rest", "g-filter-a"), ("faults-rest", "g-filter-b"))


@dataclass
class ConfigLedger:
    """What the config files must still say after a fault: topics (with their read queue
    counts), groups, committed offsets, delayed messages (delivered at least once), filters."""

    topics: dict[str, int] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    offsets: list[tuple[str, str, int, int]] = field(default_factory=list)
    delayed: list[tuple[str, str, str]] = field(default_factory=list)
    filters: list[tuple[str, str]] = field(default_factory=list)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> ConfigLedger:
        raw = json.loads(path.read_text())
        return cls(
            topics=raw["topics"],
            groups=raw["groups"],
            offsets=[tuple(x) for x in raw["offsets"]],  # type: ignore[misc]
            delayed=[tuple(x) for x in raw["delayed"]],  # type: ignore[misc]
            filters=[tuple(x) for x in raw["filters"]],  # type: ignore[misc]
        )


@dataclass
class BaseStore:
    """A stopped broker's data dir with its ledgers (see the module docstring)."""

    dir: Path
    token: str
    ledger: Ledger
    config: ConfigLedger
    killed: bool

    def copy(self, dest: Path) -> Path:
        return copy_tree(self.dir, dest)


def make_template(root: Path) -> tuple[Path, str]:
    """A data dir with Django's database migrated and an operator token: copied into every
    base, so that no run pays for migrations."""
    env = broker_env(root, 0, 0, drop=SHARED_SETTINGS)
    done = manage_run(env, "migrate", "--noinput", "-v", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    done = manage_run(env, "createtoken", "fault-bot", "--role", "operator")
    assert done.returncode == 0, done.stdout + done.stderr
    return root, done.stdout.strip().splitlines()[-1]


def _write_filters(store: Path) -> list[tuple[str, str]]:
    """``consumerFilter.json`` as a migrated RocketMQ broker leaves it: two filters, the file
    written twice so that its ``.bak`` holds the first."""
    from mqcore.clock import SystemClock
    from mqcore.metadata import ConsumerFilterData, ConsumerFilterManager

    manager = ConsumerFilterManager(store / "config", SystemClock())
    now = int(time.time() * 1000)
    for topic, group in FILTERS:
        manager.register(
            ConsumerFilterData(
                consumer_group=group,
                topic=topic,
                expression="TagA || TagB",
                expression_type="TAG",
                born_time=now,
            )
        )
        manager.persist()
    return list(FILTERS)


def build_clean_base(root: Path, template: Path, token: str) -> BaseStore:
    copy_tree(template, root)
    (root / "store" / "config").mkdir(parents=True)
    config = ConfigLedger(filters=_write_filters(root / "store"))
    ledger = Ledger()
    broker = Broker(root, token).start()
    try:
        http = broker.http
        reply = http.api(
            "POST",
            "/topics",
            {"name": REST_TOPIC, "read_queue_nums": REST_QUEUES, "write_queue_nums": REST_QUEUES},
        )
        assert reply.status == 201, reply.text
        config.topics[REST_TOPIC] = REST_QUEUES
        create_kafka_topic(broker.bootstrap, KAFKA_TOPIC, KAFKA_PARTITIONS)
        config.topics[KAFKA_TOPIC.replace(".", "|")] = KAFKA_PARTITIONS
        send_rest(http, ledger, REST_TOPIC, "rest", 0, 2000, queues=REST_QUEUES)
        produce_kafka(
            broker.bootstrap, ledger, KAFKA_TOPIC, "kafka", 0, 900, partitions=KAFKA_PARTITIONS
        )
        for group, topic in (("g-rest", REST_TOPIC), ("g-kafka", KAFKA_TOPIC.replace(".", "|"))):
            reply = http.api("POST", "/groups", {"name": group})
            assert reply.status == 201, reply.text
            config.groups.append(group)
            queues = config.topics[topic]
            offsets = [
                {"topic": topic, "queue_id": q, "offset": 100 + 37 * q} for q in range(queues)
            ]
            reply = http.api("PUT", f"/groups/{group}/offsets", {"offsets": offsets})
            assert reply.status == 200, reply.text
            config.offsets += [(group, topic, o["queue_id"], o["offset"]) for o in offsets]
        _send_delayed(broker, config)
        # Under CAIRN_FLUSH=sync a delivered delayed message is flushed (and dispatched) only
        # by the next client put's group commit: let them come due before the last topic.
        time.sleep(1.5)
        reply = http.api(
            "POST",
            "/topics",
            {
                "name": NEWEST_TOPIC,
                "read_queue_nums": NEWEST_QUEUES,
                "write_queue_nums": NEWEST_QUEUES,
            },
        )
        assert reply.status == 201, reply.text
        config.topics[NEWEST_TOPIC] = NEWEST_QUEUES
        send_rest(http, ledger, NEWEST_TOPIC, "newest", 0, 96, queues=NEWEST_QUEUES)
        _wait_delivered(broker, config)
        ledger = _placed(broker, ledger)
        baseline = verify(broker, ledger, Fault("baseline", 0))
        finish(broker, baseline, check=False)
        assert baseline.passed, baseline.message(broker.log_tail())
    finally:
        broker.kill()
    ledger.save(root / "ledger.jsonl")
    config.save(root / "config-ledger.json")
    return BaseStore(root, token, ledger, config, killed=False)


def build_killed_base(root: Path, clean: BaseStore) -> BaseStore:
    """The clean base, started again, 450 more messages (300 REST, 150 Kafka), then SIGKILL."""
    clean.copy(root)
    ledger = clean.ledger.copy()
    broker = Broker(root, clean.token).start()
    try:
        more = Ledger()
        send_rest(broker.http, more, REST_TOPIC, "late", 0, 300, queues=REST_QUEUES)
        produce_kafka(
            broker.bootstrap, more, KAFKA_TOPIC, "latek", 0, 150, partitions=KAFKA_PARTITIONS
        )
        for a in _placed(broker, more).acks:
            ledger.add(a)
    finally:
        broker.kill()
    assert (root / "store" / "abort").exists()
    ledger.save(root / "ledger.jsonl")
    return BaseStore(root, clean.token, ledger, clean.config, killed=True)


def _placed(broker: Broker, ledger: Ledger) -> Ledger:
    served, errors = read_queues(broker.http, ledger)
    assert not errors, errors
    return ledger.place(served)


def _send_delayed(broker: Broker, config: ConfigLedger) -> None:
    messages = []
    for n in range(4):
        body = body_for("delay", n)
        messages.append({"body": body.decode(), "keys": [key_for("delay", n)], "delay_level": 1})
        config.delayed.append((DELAY_TOPIC, key_for("delay", n), digest(body)))
    reply = broker.http.api("POST", f"/topics/{DELAY_TOPIC}/messages", {"messages": messages})
    assert reply.status == 200 and all(r["delayed"] for r in reply.body["results"]), reply.text


def _wait_delivered(broker: Broker, config: ConfigLedger, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while missing_delayed(broker, config):
        assert time.monotonic() < deadline, "delayed messages not delivered"
        time.sleep(0.2)


def missing_delayed(broker: Broker, config: ConfigLedger) -> list[str]:
    """Delayed messages not (yet) in their real topic."""
    missing = []
    for topic, key, want in config.delayed:
        reply = broker.http.api(
            "GET", f"/topics/{quote_topic(topic)}/messages", key=key, body_encoding="base64"
        )
        bodies = []
        if reply.status == 200:
            import base64

            bodies = [digest(base64.b64decode(m["body"])) for m in reply.body["messages"]]
        if want not in bodies:
            missing.append(f"delayed message {topic} key {key}")
    return missing


# --- the config ledger after a fault --------------------------------------------------------


def verify_config(broker: Broker, config: ConfigLedger, verdict: Verdict, fault: Fault) -> None:
    """Topics and groups still there, committed offsets not silently changed, delayed
    messages delivered (the broker is running)."""
    http = broker.http
    health = verdict.health or HealthView.read(broker, broker.store)
    damaged = [Path(f).name for f in fault.files if f.startswith("config/")]
    reported = any(health.mentions(name) for name in damaged) or any(
        "config" in str(p.get("kind", "")) for p in health.problems()
    )
    silent_value_flip = "effect: value" in fault.notes
    for topic, queues in config.topics.items():
        reply = http.api("GET", f"/topics/{quote_topic(topic)}")
        if reply.status != 200:
            verdict.fail(f"topic {topic} is gone after the fault (HTTP {reply.status})")
        elif reply.body["read_queue_nums"] < queues:
            verdict.fail(
                f"topic {topic} has {reply.body['read_queue_nums']} read queues, had {queues}"
            )
    for group in config.groups:
        reply = http.api("GET", f"/groups/{group}")
        if reply.status != 200:
            verdict.fail(f"group {group} (with committed offsets) is gone (HTTP {reply.status})")
    committed: dict[tuple[str, str, int], int] = {}
    for group in config.groups:
        reply = http.api("GET", f"/groups/{group}/offsets")
        if reply.status == 200:
            for o in reply.body["offsets"]:
                committed[(group, o["topic"], o["queue_id"])] = o["offset"]
    for group, topic, queue_id, offset in config.offsets:
        now = committed.get((group, topic, queue_id))
        if now == offset:
            continue
        what = f"offset of {group} on {topic}/{queue_id} is {now}, was committed as {offset}"
        if silent_value_flip and "consumerOffset.json" in damaged:
            verdict.notes.append(what + " (the flip left the file valid: undetectable)")
        elif reported:
            verdict.notes.append(what + " (reported)")
        else:
            verdict.fail(what + ", and nothing reports it")
    for missing in missing_delayed(broker, config):
        verdict.fail(f"{missing} never delivered")


def check_filters_on_disk(
    store: Path, config: ConfigLedger, verdict: Verdict, fault: Fault
) -> None:
    """After the stop: ``consumerFilter.json`` still holds every filter, unless the broker
    reported that it could not (the broker only reads this file)."""
    from tests.faults.inject import parse_config

    parsed = (
        parse_config((store / "config" / "consumerFilter.json").read_bytes())
        if (store / "config" / "consumerFilter.json").exists()
        else None
    )
    text = json.dumps(parsed) if parsed is not None else ""
    missing = [f"{t}/{g}" for t, g in config.filters if g not in text]
    if not missing:
        return
    health = HealthView.read(None, store)
    if "effect: value" in fault.notes:
        verdict.notes.append(f"consumer filters {missing} changed by an undetectable flip")
    elif health.mentions("consumerFilter"):
        verdict.notes.append(f"consumer filters {missing} lost (reported)")
    else:
        verdict.fail(f"consumer filters {missing} silently lost from consumerFilter.json")


# --- one static fault run ---------------------------------------------------------------------

Injector = Callable[[Path, Ledger, random.Random, int], Fault]


def run_static_fault(
    base: BaseStore,
    run_dir: Path,
    seed: int,
    inject: Injector,
    *,
    config_checks: bool = False,
) -> Verdict:
    """Copy ``base``, inject a fault into the stopped copy with ``random.Random(seed)``,
    start a broker on it, verify the ledger (and the config ledger), stop it, run check."""
    started = time.monotonic()
    base.copy(run_dir)
    store = run_dir / "store"
    fault = inject(store, base.ledger, random.Random(seed), seed)
    fault.notes.append(f"base: {'killed' if base.killed else 'clean'}")
    broker = Broker(run_dir, base.token)
    try:
        try:
            broker.start()
        except BrokerDied as died:
            verdict = verify(broker, base.ledger, fault)
            verdict.failures.insert(0, f"the broker did not start after the fault: {died.what}")
            verdict.check_store(store)
            verdict.notes.append("log: " + died.log_tail[-1500:])
            verdict.started = started
            verdict.seconds = round(time.monotonic() - started, 2)
            return verdict
        verdict = verify(broker, base.ledger, fault)
        verdict.started = started
        if config_checks:
            verify_config(broker, base.config, verdict, fault)
        finish(broker, verdict)
        if config_checks:
            check_filters_on_disk(store, base.config, verdict, fault)
        return verdict
    finally:
        broker.kill()
