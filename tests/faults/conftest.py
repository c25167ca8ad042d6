"""Fixtures of the fault-injection suite, and its results table.

* ``clean_base`` / ``killed_base``: the session's base stores (:mod:`tests.faults.base`),
  written once by a real broker and copied by every run.
* ``conclude``: records a run's row in ``test-output/faults/results.jsonl`` and fails the
  test with the verdict's message (fault, seed, counts, every broken rule) if it failed.
* ``pytest_terminal_summary``: the table of faults x runs x acked x lost x repaired of this
  session, printed and written to ``test-output/faults/table.md``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.faults.base import BaseStore, build_clean_base, build_killed_base, make_template
from tests.faults.harness import RESULTS_DIR, RESULTS_FILE, SESSION, Verdict, record_row

Conclude = Callable[..., None]


@pytest.fixture(scope="session")
def fault_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return make_template(tmp_path_factory.mktemp("fault-template"))


@pytest.fixture(scope="session")
def clean_base(
    tmp_path_factory: pytest.TempPathFactory, fault_template: tuple[Path, str]
) -> BaseStore:
    template, token = fault_template
    return build_clean_base(tmp_path_factory.mktemp("base") / "clean", template, token)


@pytest.fixture(scope="session")
def killed_base(tmp_path_factory: pytest.TempPathFactory, clean_base: BaseStore) -> BaseStore:
    return build_killed_base(tmp_path_factory.mktemp("base") / "killed", clean_base)


@pytest.fixture
def conclude(request: pytest.FixtureRequest) -> Conclude:
    """``conclude(verdict, log_tail="")``: record the row, then fail if the verdict failed."""

    def _conclude(verdict: Verdict, log_tail: str = "") -> None:
        record_row(verdict.row(request.node.nodeid))
        if not verdict.passed:
            pytest.fail(
                verdict.message(log_tail) + f"\nrerun: pytest '{request.node.nodeid}'",
                pytrace=False,
            )

    return _conclude


# --- the table ------------------------------------------------------------------------------


def session_rows() -> list[dict[str, Any]]:
    if not RESULTS_FILE.exists():
        return []
    rows = []
    for line in RESULTS_FILE.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("session") == SESSION:
            rows.append(row)
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per fault (runs, passed, acked, lost, corrupted-served,
    repaired/quarantined, seconds), then one line per run."""
    by_fault: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_fault[row["fault"]].append(row)
    lines = [
        "| fault | runs | passed | acked | lost | corrupted-served | not found by key "
        "| repaired/quarantined | seconds |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    total = defaultdict(float)
    for fault, runs in by_fault.items():
        sums = {
            k: sum(r.get(k, 0) for r in runs)
            for k in ("acked", "lost", "corrupted_served", "key_missing", "repaired", "seconds")
        }
        passed = sum(1 for r in runs if r["passed"])
        lines.append(
            f"| {fault} | {len(runs)} | {passed} | {sums['acked']} | {sums['lost']} | "
            f"{sums['corrupted_served']} | {sums['key_missing']} | {sums['repaired']} | "
            f"{sums['seconds']:.1f} |"
        )
        total["runs"] += len(runs)
        total["passed"] += passed
        for k, v in sums.items():
            total[k] += v
    lines.append(
        f"| **all** | {total['runs']:.0f} | {total['passed']:.0f} | {total['acked']:.0f} | "
        f"{total['lost']:.0f} | {total['corrupted_served']:.0f} | {total['key_missing']:.0f} | "
        f"{total['repaired']:.0f} | {total['seconds']:.1f} |"
    )
    lines += [
        "",
        "| fault | seed | acked | lost | corrupted-served | not found by key "
        "| repaired/quarantined | seconds | result |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        result = "pass" if r["passed"] else "FAIL: " + "; ".join(r["failures"][:2])
        lines.append(
            f"| {r['fault']} | {r['seed']} | {r['acked']} | {r['lost']} | "
            f"{r['corrupted_served']} | {r.get('key_missing', 0)} | {r['repaired']} | "
            f"{r['seconds']:.1f} | "
            f"{result.replace('|', '/')[:160]} |"
        )
    return "\n".join(lines) + "\n"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = session_rows()
    if not rows:
        return
    table = render_table(rows)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "table.md").write_text(table)
    terminalreporter.section("fault injection: faults x runs x acked x lost x repaired")
    summary = table.split("\n\n")[0]
    terminalreporter.write_line(summary)
    terminalreporter.write_line(f"(every run: {RESULTS_DIR / 'table.md'})")
