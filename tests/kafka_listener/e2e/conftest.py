"""One real listener per test module, driven by the real client libraries.

Every test uses its own topics and groups (``names``), so tests of a module share the
listener without seeing each other's data.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..harness import RunningListener

_counter = itertools.count()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningListener]:
    with RunningListener(Path(tmp_path_factory.mktemp("kafka"))) as r:
        yield r


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``names("orders")`` → a name unique to this test, with a ``.`` in it."""
    test = request.node.name.split("[")[0].removeprefix("test_")[:40]
    n = next(_counter)
    return lambda base: f"{base}.{test}-{n}"


def eventually(check: Callable[[], object], timeout_s: float = 20, what: str = "") -> None:
    """Poll ``check()`` until truthy; fail with ``what`` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.02)
