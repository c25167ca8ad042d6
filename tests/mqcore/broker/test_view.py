"""Message detail: consume state per group (consumed / pending / retrying / DLQ)."""

from __future__ import annotations

from mqcore.broker import Broker, ConsumeState, OutgoingMessage, delay_delivery
from mqcore.clock import FakeClock


def _states(broker: Broker, msg_id: str) -> dict[str, ConsumeState]:
    view = broker.view_message(msg_id)
    assert view is not None
    return {s.group: s.state for s in view.statuses}


def test_consume_states(broker: Broker, clock: FakeClock) -> None:
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m", queue_id=0)])
    for group in ("Done", "Todo", "Failing", "Dead"):
        broker.commit_offset(group, "Orders", 0, 0)
    broker.commit_offset("Done", "Orders", 0, 1)
    broker.commit_offset("Failing", "Orders", 0, 1)
    broker.commit_offset("Dead", "Orders", 0, 1)
    broker.send_back("Failing", sent.offset_msg_id)
    broker.send_back("Dead", sent.offset_msg_id, delay_level=-1)

    expected = {
        "Done": ConsumeState.CONSUMED,
        "Todo": ConsumeState.PENDING,
        "Failing": ConsumeState.RETRYING,
        "Dead": ConsumeState.DLQ,
    }
    assert _states(broker, sent.msg_id) == expected
    assert _states(broker, sent.offset_msg_id) == expected

    view = broker.view_message(sent.msg_id)
    assert view is not None
    assert (view.topic, view.msg_id, view.offset_msg_id) == (
        "Orders",
        sent.msg_id,
        sent.offset_msg_id,
    )
    assert view.message.topic == "Orders" and view.broker_name == "broker-a"
    failing = next(s for s in view.statuses if s.group == "Failing")
    assert failing.reconsume_times == 1

    # The retry copy arrives in %RETRY%Failing: still retrying until consumed there.
    clock.advance(10_000)
    delay_delivery.step(broker)
    assert _states(broker, sent.msg_id)["Failing"] is ConsumeState.RETRYING
    broker.commit_offset("Failing", "%RETRY%Failing", 0, 1)
    assert _states(broker, sent.msg_id)["Failing"] is ConsumeState.CONSUMED

    # A dead letter resent to Orders is pending again for the group until it passes it.
    broker.resend_from_dlq("Dead", sent.msg_id)
    assert _states(broker, sent.msg_id)["Dead"] is ConsumeState.PENDING
    broker.commit_offset("Dead", "Orders", 0, 2)
    assert _states(broker, sent.msg_id)["Dead"] is ConsumeState.CONSUMED


def test_view_by_retry_copy_shows_the_home_message(broker: Broker, clock: FakeClock) -> None:
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m", queue_id=0)])
    back = broker.send_back("G", sent.offset_msg_id)
    assert back.send is not None
    view = broker.view_message(back.send.offset_msg_id)  # the parked retry record
    assert view is not None
    assert view.topic == "Orders" and view.offset_msg_id == sent.offset_msg_id


def test_delayed_message_is_pending_until_delivered(broker: Broker, clock: FakeClock) -> None:
    broker.commit_offset("G", "Orders", 0, 0)
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m", queue_id=0, delay_level=1)])
    view = broker.view_message(sent.msg_id)
    assert view is not None and view.message.topic == "SCHEDULE_TOPIC_XXXX"
    assert _states(broker, sent.msg_id) == {"G": ConsumeState.PENDING}
    clock.advance(1_000)
    delay_delivery.step(broker)
    view = broker.view_message(sent.msg_id)
    assert view is not None and view.message.topic == "Orders"
    broker.commit_offset("G", "Orders", 0, 1)
    assert _states(broker, sent.msg_id) == {"G": ConsumeState.CONSUMED}


def test_subscribed_groups_without_offsets_are_listed(broker: Broker) -> None:
    broker.admin.create_group(
        "Sub",
        subscription_data_set=({"topic": "Orders", "expressionType": "TAG", "expression": "*"},),
    )
    (sent,) = broker.send("Orders", [OutgoingMessage(b"m")])
    assert _states(broker, sent.msg_id) == {"Sub": ConsumeState.PENDING}


def test_unknown_message(broker: Broker) -> None:
    assert broker.view_message("F" * 32) is None
    assert broker.get_message("nonsense") is None
