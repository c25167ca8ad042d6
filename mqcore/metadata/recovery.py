"""After the config files are loaded: reconcile what was recovered with the store, rewrite it,
and describe it for the operator (:meth:`mqcore.metadata.Metadata.load` reports the result).

For each file whose load was not "``X`` intact" (:mod:`mqcore.metadata.checked_file`), or
whose ``X.bak`` was found damaged beside an intact ``X``:

1. ``topics.json`` and ``subscriptionGroup.json`` are reconciled with the store's data
   (:mod:`mqcore.metadata.reconcile`): what the data shows and the loaded copy lacks is
   re-created, in one write per file. This also runs when there was no copy at all (a store
   whose config directory was lost), so a broker never starts with its topics gone while
   their messages are on disk.
2. A recovered file is rewritten at once (a new generation), so ``X`` is intact again and the
   next start is clean; the damaged copy stays set aside as ``X.corrupt``. A file whose
   backup was damaged is rewritten too, so ``X.bak`` is again an intact copy.
3. A :class:`ConfigRecovery` says which file, what was damaged, which copy was loaded, how far
   behind it was, what was re-created and with what, and what may still be missing. Its
   ``problem_id`` is stable for the same damage (the same files found in the same state), so a
   start that fails before step 2 does not report it twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mqcore.metadata.checked_file import LoadOutcome, damage_phrase
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.groups import SubscriptionGroupManager
from mqcore.metadata.offsets import ConsumerOffsetManager
from mqcore.metadata.reconcile import GroupFix, StoreEvidence, TopicFix, plan_groups, plan_topics
from mqcore.metadata.topics import TopicConfigManager

PROBLEM_KIND = "config_recovered"
#: Names listed in a summary line; the detail lists them all.
SUMMARY_NAMES = 10

#: What loading an older copy of each file means for users.
_CONSEQUENCES = {
    "topics.json": "changes made after it to topics holding no messages (new empty topics, "
    "settings) are lost: check the topics",
    "subscriptionGroup.json": "changes made after it to group settings are lost: check the groups",
    "consumerOffset.json": "consumers receive again the messages they committed after it",
    "delayOffset.json": "delayed messages that came due after it may be delivered again",
    "consumerFilter.json": "SQL92 filter data registered after it returns when consumers reconnect",
}

#: What starting a file empty (no copy could be loaded) means for users.
_CONSEQUENCES_EMPTY = {
    "topics.json": "topics holding no messages, and every topic setting but the queue counts, "
    "are lost: check the topics",
    "subscriptionGroup.json": "groups with no offsets, and every group setting, are lost: check "
    "the groups",
    "consumerOffset.json": "consumers start again where their consume-from setting says and may "
    "receive messages again",
    "delayOffset.json": "delayed messages still in the delay queues may be delivered again",
    "consumerFilter.json": "SQL92 filter data returns when consumers reconnect",
}


@dataclass(frozen=True, slots=True)
class ConfigRecovery:
    """One recovered config file, as reported to the store's health and logged."""

    file_name: str
    problem_id: str
    summary: str
    detail: dict[str, Any]


class ConfigManagers(Protocol):
    """What recovery reads of :class:`mqcore.metadata.Metadata`, named here rather than
    imported: the package imports this module."""

    @property
    def topics(self) -> TopicConfigManager: ...

    @property
    def groups(self) -> SubscriptionGroupManager: ...

    @property
    def offsets(self) -> ConsumerOffsetManager: ...

    @property
    def managers(self) -> tuple[ConfigFileManager[Any], ...]: ...


def recover_after_load(
    metadata: ConfigManagers, outcomes: dict[str, LoadOutcome[Any]], store: StoreEvidence
) -> list[ConfigRecovery]:
    """Reconcile, rewrite and describe every file whose load was not intact (module
    docstring). Returns one record per recovered or rebuilt file, in file order."""
    topics, groups = metadata.topics, metadata.groups
    fixes: dict[str, Sequence[TopicFix | GroupFix]] = {}
    ignored: dict[str, list[str]] = {}
    errors: dict[str, str] = {}
    if outcomes[topics.FILE_NAME].status != "intact":
        topic_fixes, ignored[topics.FILE_NAME] = plan_topics(
            topics, metadata.offsets, groups, store
        )
        fixes[topics.FILE_NAME] = topic_fixes
        if topic_fixes:
            _attempt(errors, topics.FILE_NAME, topics.restore, [f.config for f in topic_fixes])
    if outcomes[groups.FILE_NAME].status != "intact":
        group_fixes, ignored[groups.FILE_NAME] = plan_groups(
            groups, metadata.offsets, topics, store
        )
        fixes[groups.FILE_NAME] = group_fixes
        if group_fixes:
            _attempt(errors, groups.FILE_NAME, groups.restore, [f.config for f in group_fixes])
    recoveries: list[ConfigRecovery] = []
    for manager in metadata.managers:
        name = manager.FILE_NAME
        outcome, made = outcomes[name], fixes.get(name, ())
        if not outcome.recovered and not made and not outcome.damage:
            continue
        if not made:  # a restore already wrote the file
            _attempt(errors, name, manager.persist)
        recoveries.append(
            _describe(manager, outcome, made, ignored.get(name, []), errors.get(name))
        )
    return recoveries


def _attempt(
    errors: dict[str, str], name: str, write: Callable[..., object], *args: object
) -> None:
    try:
        write(*args)
    except OSError as exc:
        errors[name] = str(exc)


def _describe(
    manager: ConfigFileManager[Any],
    outcome: LoadOutcome[Any],
    fixes: Sequence[TopicFix | GroupFix],
    ignored: list[str],
    write_error: str | None,
) -> ConfigRecovery:
    name = outcome.file_name
    if outcome.recovered:
        parts = [outcome.describe()]
    elif outcome.status == "intact":
        damaged = "; ".join(damage_phrase(label, state) for label, state in outcome.damage)
        parts = [
            f"{name}: {damaged}; {name} itself is intact and was loaded, and was rewritten so "
            f"that {name}.bak is an intact copy again"
        ]
        if outcome.set_aside:
            parts.append(f"set aside {', '.join(outcome.set_aside)}")
    else:
        parts = [f"{name}: no copy and no record"]
    recreated = [f for f in fixes if not (isinstance(f, TopicFix) and f.widened_from)]
    widened = [f for f in fixes if isinstance(f, TopicFix) and f.widened_from]
    if recreated:
        noun = "topic" if isinstance(recreated[0], TopicFix) else "group"
        parts.append(
            f"re-created from the store's data: {_count(len(recreated), noun)} "
            + _names([_fix_text(f) for f in recreated])
        )
    if widened:
        parts.append(
            "widened to the queues the data shows: " + _names([_fix_text(f) for f in widened])
        )
    behind = _behind(outcome)
    if behind and outcome.source is None:
        parts.append(_CONSEQUENCES_EMPTY.get(name, "its content is lost"))
    elif behind:
        parts.append(f"the copy loaded is older: {_CONSEQUENCES.get(name, 'check it')}")
    also = _also_named(manager, outcome, fixes)
    if also:
        parts.append(
            f"the damaged copy also names {_names(also)} (not re-created: the store holds no "
            "data for them; re-create them by hand if they are real)"
        )
    if write_error is not None:
        parts.append(
            f"could not rewrite {name} ({write_error}): it is rewritten at the next change"
        )
    detail: dict[str, Any] = {
        "file": name,
        "path": manager.path,
        "status": outcome.status,
        "copies": dict(outcome.copies),
        "loaded": outcome.source,
        "loaded_generation": outcome.generation,
        "newest_generation": outcome.newest_generation,
        "older_than_newest": behind,
        "set_aside": list(outcome.set_aside),
        "recreated": [_fix_detail(f) for f in recreated],
        "widened": [_fix_detail(f) for f in widened],
        "ignored": ignored,
        "damaged_copy_also_names": also,
        "write_error": write_error,
    }
    fingerprint = json.dumps(
        [name, outcome.copies, outcome.source, [_fix_text(f) for f in fixes]], sort_keys=True
    )
    digest = hashlib.sha256(fingerprint.encode()).hexdigest()[:12]
    return ConfigRecovery(name, f"config:{name}:{digest}", "; ".join(parts), detail)


def _behind(outcome: LoadOutcome[Any]) -> bool:
    """Whether the copy loaded may be older than the newest committed version (a "fresh"
    file is described only when the store's data showed it had content)."""
    if outcome.status == "fresh":
        return True
    if outcome.generation is not None and outcome.newest_generation is not None:
        return outcome.generation < outcome.newest_generation
    return outcome.source != outcome.file_name


def _also_named(
    manager: ConfigFileManager[Any],
    outcome: LoadOutcome[Any],
    fixes: Sequence[TopicFix | GroupFix],
) -> list[str]:
    if outcome.damaged_value is None:
        return []
    loaded = manager.names_in(outcome.value) if outcome.value is not None else frozenset()
    fixed = {_fix_name(f) for f in fixes}
    return sorted(manager.names_in(outcome.damaged_value) - loaded - fixed)


def _fix_name(fix: TopicFix | GroupFix) -> str:
    return fix.config.topic_name if isinstance(fix, TopicFix) else fix.config.group_name


def _fix_text(fix: TopicFix | GroupFix) -> str:
    if isinstance(fix, TopicFix):
        return fix.describe()
    return f"{fix.config.group_name} ({'; '.join(fix.evidence)})"


def _fix_detail(fix: TopicFix | GroupFix) -> dict[str, Any]:
    if isinstance(fix, TopicFix):
        c = fix.config
        out: dict[str, Any] = {
            "name": c.topic_name,
            "read_queue_nums": c.read_queue_nums,
            "write_queue_nums": c.write_queue_nums,
            "perm": c.perm,
            "evidence": list(fix.evidence),
        }
        if fix.widened_from is not None:
            out["was"] = {
                "read_queue_nums": fix.widened_from[0],
                "write_queue_nums": fix.widened_from[1],
            }
        return out
    return {
        "name": fix.config.group_name,
        "retry_queue_nums": fix.config.retry_queue_nums,
        "evidence": list(fix.evidence),
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:SUMMARY_NAMES])
    more = len(items) - SUMMARY_NAMES
    return f"{shown} and {more} more" if more > 0 else shown
