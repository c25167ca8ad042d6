"""Schemathesis over the served OpenAPI document, in-process (WSGI), as an admin.

Every operation gets a few generated requests, valid ones and invalid ones: no response may
be a 500, and every response must match the document (status, content type, body schema).
"""

from __future__ import annotations

from typing import Any

import hypothesis
import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance
from schemathesis.generation import GenerationMode

from mqcore.broker import Broker, OutgoingMessage
from tests.api.conftest import wait_dispatched
from tests.support.tokens import make_token

MAX_EXAMPLES = 8


@pytest.fixture
def broker_options() -> dict[str, Any]:
    # Generated pulls may ask for long waits; keep them short so the run stays bounded.
    return {"max_pull_wait_ms": 20}


def _seed(broker: Broker) -> None:
    """What the document's examples name, so the explicit phase reaches real resources."""
    broker.admin.create_topic("TopicTest", read_queue_nums=4, write_queue_nums=4)
    broker.admin.create_group("group_a")
    broker.send("TopicTest", [OutgoingMessage(body=b"seed", keys=("k",), queue_id=0)])
    wait_dispatched(broker)


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_500_and_responses_match_the_schema(
    broker: Broker, make_user: Any, mode: GenerationMode
) -> None:
    _seed(broker)
    token = make_token(make_user("fuzzer", "admin"))
    headers = {"Authorization": f"Token {token}"}
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
    failures: list[str] = []
    statuses: list[int] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case: Any) -> None:
            response = case.call(headers=headers)
            statuses.append(response.status_code)
            case.validate_response(
                response, headers=headers, excluded_checks=[positive_data_acceptance]
            )

        try:
            run()
        except hypothesis.errors.Unsatisfiable:
            # Nothing invalid to generate (no parameters, or free-form strings only).
            assert mode is GenerationMode.NEGATIVE, operation.label
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001  (collect them all)
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
    if mode is GenerationMode.POSITIVE:  # it reached real resources, not only errors
        assert sum(200 <= status < 300 for status in statuses) >= 40, statuses
