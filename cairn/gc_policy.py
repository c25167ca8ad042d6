"""The broker process's garbage-collector settings, applied once it has loaded.

Everything loaded by then (Django, the URL and view modules, a running broker's state) lives
as long as the process. Moved out of the collector's generations (``gc.freeze``), it is no
longer walked by each full collection, which the allocations of a 1000-message send trigger:
that cost a batch ~1.7 ms of garbage collection in parsing and validation alone, ~0.4 ms
once frozen.

A young-generation collection walks every container allocated since the last one that is
still alive. At CPython's default threshold (700 net allocations) a 1000-message send (~8
containers a message: the parsed JSON, then each layer's message object) ran ~11 of them and
a middle-generation one per request, each walking the send's live messages again: ~1 ms a
batch; a Kafka produce of 10,000 records, as many store messages. At 10,000 a batch triggers
at most one. What a request leaves behind is mostly freed by reference counting
(``api.views.base`` breaks the view's reference cycles), so the rarer collections find
little garbage and promote few survivors.

Plain Python (no Django import): ``server.asgi`` applies it in ``runbroker``, and
``bench/kafka.py`` in its stand-alone broker process, so the benchmark measures the
broker's own settings.
"""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 10_000


def settle_long_lived() -> None:
    """Collect once, freeze what survives, raise the young-generation threshold."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
