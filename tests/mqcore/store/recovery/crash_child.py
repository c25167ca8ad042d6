"""The writer that test_crash.py kills: puts messages forever, reporting each acknowledged one.

    python -m tests.mqcore.store.recovery.crash_child ROOT FLUSH SEED RUN

Opens the store at ROOT (recovering whatever the previous, killed run left), then puts single
messages and small batches of 2-3 topics x 3 queues with keys ``RUN-i``. After each put that
returned PUT_OK it writes one line per message and flushes stdout::

    ack i topic queue_id queue_offset phys_offset size msg_id offset_msg_id

so every line the parent reads is a message the store acknowledged. It runs reput now and then
(the broker's reput thread would) and never exits by itself.
"""

from __future__ import annotations

import hashlib
import random
import sys

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig

TOPICS = ("orders", "payments", "audit")


def config(flush: str) -> StoreConfig:
    return StoreConfig(
        commitlog_file_size=64 * 1024,
        consume_queue_file_entries=100,
        index_hash_slots=7,
        index_max_entries=150,
        flush=flush,  # type: ignore[arg-type]
    )


def body_for(run: int, i: int) -> bytes:
    """Deterministic body of message ``i`` of run ``run``, 33 to ~3 KB."""
    digest = hashlib.sha256(b"%d/%d" % (run, i)).digest()
    return b"%d:" % i + digest * (1 + (i * 7919) % 90)


def main() -> None:
    root, flush, seed, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    store = MessageStore(root, config(flush)).open()
    out = sys.stdout
    report = store.recovery
    out.write(f"open {report.end_offset if report else 0}\n")
    out.flush()
    i = 0
    while True:
        topic, queue_id = rng.choice(TOPICS), rng.randrange(3)
        n = rng.choice((1, 1, 1, 2, 3))
        msgs = [
            Message(topic, body_for(run, i + k), tags=f"T{(i + k) % 4}", keys=[f"{run}-{i + k}"])
            for k in range(n)
        ]
        results = store.put_messages(msgs, queue_id)
        for k, r in enumerate(results):
            if r.ok:
                out.write(
                    f"ack {i + k} {r.topic} {r.queue_id} {r.queue_offset} {r.phys_offset} "
                    f"{r.wrote_bytes} {r.msg_id} {r.offset_msg_id}\n"
                )
        out.flush()
        i += n
        if rng.random() < 0.3:
            store.reput_once()


if __name__ == "__main__":
    main()
