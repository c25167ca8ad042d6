"""What a destructive change would strand or lose, measured before it is made.

Deleting a topic, cutting its read queues, deleting a group and importing a config document
can all leave messages no consumer will read. These functions measure that on the running
broker and answer plain JSON, which the REST API returns (``?dry_run=true``, or the 409 of
:mod:`api.confirm`) and the console renders in its confirmation panels:

* **messages per queue**: the messages a queue still stores (``max - min``), for the queues
  the change removes or hides;
* **groups with lag**: the groups consuming the topic (offsets or subscription) and how far
  behind they are on those queues (messages, and the age of the oldest one);
* ``at_risk``: something would be lost or stranded. Only then is a confirmation required,
  so a change that loses nothing (an empty topic's delete) goes through as before.
"""

from __future__ import annotations

import json
from typing import Any

from mqcore.broker import Broker
from mqcore.broker import lag as lag_of
from mqcore.broker.view import subscribed_groups
from mqcore.metadata.jsonfile import loads_fastjson

#: A config document's table, by document name.
TABLES = {
    "topics.json": "topicConfigTable",
    "subscriptionGroup.json": "subscriptionGroupTable",
    "consumerOffset.json": "offsetTable",
}


def _queues(broker: Broker, topic: str, queue_ids: set[int] | None) -> list[dict[str, int]]:
    """``[{queue_id, min_offset, max_offset, messages}]`` of the topic's queues (those in
    ``queue_ids`` when given) that exist in metadata or on disk."""
    reader = broker.reader
    config = broker.metadata.topics.get(topic)
    rows = []
    for queue_id in lag_of.queue_ids(reader, config, topic):
        if queue_ids is not None and queue_id not in queue_ids:
            continue
        low, high = reader.min_offset(topic, queue_id), reader.max_offset(topic, queue_id)
        rows.append(
            {"queue_id": queue_id, "min_offset": low, "max_offset": high, "messages": high - low}
        )
    return rows


def _group_lags(
    broker: Broker, topic: str, queues: list[dict[str, int]], only: list[str] | None = None
) -> list[dict[str, Any]]:
    """The groups consuming ``topic`` with lag on ``queues``: ``[{group, lag, lag_ms,
    committed, queues: [{queue_id, lag, committed}]}]``, most behind first."""
    offsets = broker.metadata.offsets
    found = []
    for group in only if only is not None else subscribed_groups(broker.metadata, topic):
        rows = []
        for queue in queues:
            committed = offsets.query(group, topic, queue["queue_id"])
            lagged = lag_of.queue_lag(
                broker.reader, broker.clock, "", topic, queue["queue_id"], committed
            )
            if lagged.lag:
                rows.append(
                    {
                        "queue_id": queue["queue_id"],
                        "lag": lagged.lag,
                        "lag_ms": lagged.lag_ms,
                        "committed_offset": committed,
                    }
                )
        if rows:
            found.append(
                {
                    "group": group,
                    "lag": sum(r["lag"] for r in rows),
                    "lag_ms": max(r["lag_ms"] for r in rows),
                    "queues": rows,
                }
            )
    return sorted(found, key=lambda g: (-g["lag"], g["group"]))


def topic_delete(broker: Broker, topic: str) -> dict[str, Any]:
    """What deleting ``topic`` loses: every message it stores becomes unreachable, and the
    groups consuming it lose their offsets (and whatever they had not read yet)."""
    queues = _queues(broker, topic, None)
    messages = sum(q["messages"] for q in queues)
    groups = _group_lags(broker, topic, queues)
    return {
        "change": "topic.delete",
        "topic": topic,
        "messages": messages,
        "queues": [q for q in queues if q["messages"]],
        "groups": groups,
        "at_risk": messages > 0,
        "summary": _summary(messages, groups, "lost"),
    }


def queue_shrink(
    broker: Broker, topic: str, read_queue_nums: int | None, write_queue_nums: int | None
) -> dict[str, Any]:
    """What changing the topic's queue counts strands: consumers read queues
    ``0..read_queue_nums-1`` only, so the messages of the queues at or above a lower read
    count are no longer delivered (a lower write count strands nothing: producers stop
    writing there, consumers still read the rest). ``None``: that count does not change."""
    config = broker.metadata.topics.require(topic)
    old_read, old_write = config.read_queue_nums, config.write_queue_nums
    new_read = old_read if read_queue_nums is None else read_queue_nums
    new_write = old_write if write_queue_nums is None else write_queue_nums
    queues: list[dict[str, int]] = []
    if new_read < old_read:
        queues = [q for q in _queues(broker, topic, None) if q["queue_id"] >= new_read]
    messages = sum(q["messages"] for q in queues)
    groups = _group_lags(broker, topic, queues)
    return {
        "change": "topic.update",
        "topic": topic,
        "read_queue_nums": {"old": old_read, "new": new_read},
        "write_queue_nums": {"old": old_write, "new": new_write},
        "messages": messages,
        "queues": [q for q in queues if q["messages"]],
        "groups": groups,
        "at_risk": messages > 0,
        "summary": _summary(messages, groups, "stranded"),
    }


def group_delete(broker: Broker, group: str, *, remove_offsets: bool = True) -> dict[str, Any]:
    """What deleting ``group`` loses: its committed offsets (with ``remove_offsets``), so
    the messages it has not consumed yet (its lag where it committed) would be skipped or
    read again by a group of that name created later."""
    topics = []
    offsets = broker.metadata.offsets
    for lagged in broker.admin.group_lag(group).queues:
        if not lagged.lag:
            continue
        committed = offsets.query(group, lagged.topic, lagged.queue_id)
        row = {
            "queue_id": lagged.queue_id,
            "lag": lagged.lag,
            "lag_ms": lagged.lag_ms,
            "committed_offset": committed,
        }
        if topics and topics[-1]["topic"] == lagged.topic:
            topics[-1]["queues"].append(row)
        else:
            topics.append({"topic": lagged.topic, "queues": [row]})
    for entry in topics:
        entry["lag"] = sum(q["lag"] for q in entry["queues"])
        entry["lag_ms"] = max(q["lag_ms"] for q in entry["queues"])
    committed_lag = sum(
        q["lag"] for t in topics for q in t["queues"] if q["committed_offset"] is not None
    )
    lag = sum(t["lag"] for t in topics)
    at_risk = remove_offsets and committed_lag > 0
    summary = (
        f"{group} is {lag} message{'s' if lag != 1 else ''} behind on "
        + ", ".join(f"{t['topic']} ({t['lag']})" for t in topics)
        + (
            "; its committed offsets are removed with it."
            if remove_offsets and committed_lag
            else "."
        )
        if topics
        else f"{group} has no unconsumed messages."
    )
    return {
        "change": "group.delete",
        "group": group,
        "lag": lag,
        "topics": topics,
        "offsets_removed": remove_offsets,
        "at_risk": at_risk,
        "summary": summary,
    }


def _summary(messages: int, groups: list[dict[str, Any]], fate: str) -> str:
    if not messages:
        return "No message is stored there: nothing is " + fate + "."
    text = f"{messages} message{'s' if messages != 1 else ''} {fate}"
    if groups:
        text += "; groups with lag: " + ", ".join(f"{g['group']} ({g['lag']})" for g in groups)
    return text + "."


# -- config documents ---------------------------------------------------------------------------


def _table(document: str, text: str) -> dict[str, Any]:
    """The document's table as plain JSON (consumerOffset's integer keys become strings)."""
    data = json.loads(json.dumps(loads_fastjson(text)))
    table = data.get(TABLES[document]) if isinstance(data, dict) else None
    return table if isinstance(table, dict) else {}


def _fields(old: Any, new: Any) -> dict[str, dict[str, Any]]:
    """The fields that differ between two entries, ``{field: {old, new}}``."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return {"": {"old": old, "new": new}}
    return {
        key: {"old": old.get(key), "new": new.get(key)}
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    }


def config_diff(broker: Broker, document: str, old_text: str, new_text: str) -> dict[str, Any]:
    """The entries an import of ``new_text`` adds, removes and changes in ``document``
    (both texts as the broker writes the file), and what the removed or cut entries strand:
    a removed topic's messages per queue and its groups with lag; a topic whose read queues
    shrink, the messages of the cut queues; a removed group's lag; a removed or moved
    committed offset, the group's lag on that topic now."""
    old, new = _table(document, old_text), _table(document, new_text)
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = [
        {"name": name, "fields": _fields(old[name], new[name])}
        for name in sorted(set(old) & set(new))
        if old[name] != new[name]
    ]
    impact: list[dict[str, Any]] = []
    if document == "topics.json":
        impact += [topic_delete(broker, name) for name in removed if _known_topic(broker, name)]
        for entry in changed:
            read = entry["fields"].get("readQueueNums")
            if read and _known_topic(broker, entry["name"]) and isinstance(read["new"], int):
                shrink = queue_shrink(broker, entry["name"], read["new"], None)
                if shrink["read_queue_nums"]["new"] < shrink["read_queue_nums"]["old"]:
                    impact.append(shrink)
    elif document == "subscriptionGroup.json":
        for name in removed:
            if broker.metadata.groups.get(name) is not None:
                found = group_delete(broker, name, remove_offsets=False)
                # The import keeps consumerOffset.json: the group's unconsumed messages
                # wait for a group of that name that no longer exists.
                found["at_risk"] = found["lag"] > 0
                found["change"] = "group.remove"
                impact.append(found)
    else:
        for name in removed + [c["name"] for c in changed]:
            topic, _, group = name.partition("@")
            if not _known_topic(broker, topic):
                continue
            queues = _queues(broker, topic, None)
            lags = _group_lags(broker, topic, queues, only=[group])
            impact.append(
                {
                    "change": "offsets.remove" if name in removed else "offsets.change",
                    "topic": topic,
                    "group": group,
                    "lag": lags[0]["lag"] if lags else 0,
                    "at_risk": False,  # offsets move as a reset moves them; nothing is deleted
                    "summary": f"{group} is {lags[0]['lag'] if lags else 0} behind on {topic} now",
                }
            )
    at_risk = any(i["at_risk"] for i in impact)
    return {
        "document": document,
        "table": TABLES[document],
        "entries": {"before": len(old), "after": len(new)},
        "added": added,
        "removed": removed,
        "changed": changed,
        "unchanged": len(set(old) & set(new)) - len(changed),
        "impact": impact,
        "at_risk": at_risk,
        "summary": diff_summary(len(added), len(removed), len(changed), impact),
    }


def _known_topic(broker: Broker, name: str) -> bool:
    return broker.metadata.topics.get(name) is not None


def diff_summary(added: int, removed: int, changed: int, impact: list[dict[str, Any]]) -> str:
    """``"1 added, 2 removed, 0 changed; 3 messages lost"``: what the answer and the
    console's message say instead of "nothing else changed"."""
    text = f"{added} added, {removed} removed, {changed} changed"
    lost = sum(i.get("messages", 0) for i in impact if i["change"] == "topic.delete")
    stranded = sum(i.get("messages", 0) for i in impact if i["change"] == "topic.update")
    behind = sum(i.get("lag", 0) for i in impact if i["change"] == "group.remove")
    if lost:
        text += f"; {lost} message{'s' if lost != 1 else ''} in removed topics"
    if stranded:
        text += f"; {stranded} message{'s' if stranded != 1 else ''} in cut queues"
    if behind:
        text += f"; removed groups {behind} message{'s' if behind != 1 else ''} behind"
    return text
