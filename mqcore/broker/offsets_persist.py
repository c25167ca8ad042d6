"""Service step: write ``consumerOffset.json`` and ``delayOffset.json`` (spec 8.1).

Commits and delay progress change memory only; this step makes them durable. RocketMQ
persists consumer offsets every 5 s and delay offsets every 10 s; run this step every 5 s
(``ServiceLoop("offsets_persist", lambda: step(broker), 5.0)``). ``Broker.stop`` persists once
more. A crash loses at most one interval of commits: consumers then re-read those messages
(at-least-once), never skip any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mqcore.services.result import StepResult

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker

DEFAULT_INTERVAL_S = 5.0


def step(broker: Broker) -> StepResult:
    """Persist both files (atomically, keeping ``.bak``). Thread-safe.

    Raises:
        OSError: a write failed (the runner logs it and retries with backoff).
    """
    metadata = broker.metadata
    metadata.offsets.persist()
    metadata.delay_offsets.persist()
    return StepResult(
        "offsets_persist",
        progressed=False,
        detail={
            "consumer_offsets_version": metadata.offsets.data_version.counter,
            "delay_offsets": {str(k): v for k, v in metadata.delay_offsets.offsets().items()},
        },
    )
