"""``dataVersion``: the change counter every RocketMQ config file carries (spec 8.1).

On disk it is a bean ``{"counter": long, "stateVersion": long, "timestamp": epoch ms}``.
``stateVersion`` arrived in 5.x (older files lack it: read as 0) and 3.x files spelled the
timestamp ``timestatmp``; both spellings are read, only ``timestamp`` is written.

A change sets ``timestamp`` to now, adds one to ``counter`` and sets ``stateVersion`` to the
store's state-machine version, which is 0 unless RocketMQ runs in controller mode (Cairn never
does). Brokers and name servers compare versions to decide whether a peer's copy is stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqcore.clock import Clock
from mqcore.metadata.jsonfile import Bean
from mqcore.metadata.validation import JsonObject


@dataclass(frozen=True, slots=True)
class DataVersion:
    """An immutable version stamp; :meth:`next_version` returns the next one."""

    counter: int = 0
    state_version: int = 0
    timestamp: int = 0

    @classmethod
    def initial(cls, clock: Clock) -> DataVersion:
        """What ``new DataVersion()`` holds: counter 0, stamped now."""
        return cls(0, 0, clock.now_ms())

    def next_version(self, clock: Clock, state_version: int = 0) -> DataVersion:
        """The version after one change: counter + 1, timestamp now."""
        return DataVersion(self.counter + 1, state_version, clock.now_ms())

    def to_json(self) -> Bean:
        return Bean(counter=self.counter, stateVersion=self.state_version, timestamp=self.timestamp)

    @classmethod
    def from_json(cls, raw: object, path: str = "dataVersion") -> DataVersion:
        """Read the bean, accepting legacy files (no ``stateVersion``, ``timestatmp``).

        Raises:
            ValidationError: a field has the wrong type.
        """
        obj = JsonObject(raw, path)
        if obj.raw.get("timestamp") is not None:
            timestamp = obj.get_int("timestamp")
        else:
            timestamp = obj.get_int("timestatmp", 0)
        return cls(
            counter=obj.get_int("counter", 0),
            state_version=obj.get_int("stateVersion", 0),
            timestamp=timestamp,
        )
