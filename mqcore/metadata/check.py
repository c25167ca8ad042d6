"""The config directory's part of ``python -m mqcore check``: read-only findings.

For each RocketMQ config file ``X`` (spec 8) it reads ``X``, ``X.bak`` and the integrity record
``X.sum`` exactly as a broker start would (:mod:`mqcore.metadata.checked_file`), changing
nothing, and reports:

* a **defect** for every copy that fails its integrity check (a flipped byte, even one that
  still parses; a cut; an empty or unparseable file), a damaged record, or a missing ``X``
  beside other copies, saying which copy the next start would load;
* a **note** for a file with no record (written by RocketMQ or an older Cairn: only checked
  to parse), for ``*.tmp`` files an interrupted write left (removed at the next start), and
  for damaged copies recovery set aside (``*.corrupt``), which an operator may delete once
  looked at.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mqcore.metadata.checked_file import CheckedFile, damage_phrase
from mqcore.metadata.jsonfile import CORRUPT_SUFFIX, TEMP_SUFFIX, StrPath

#: The files a broker keeps in ``<store>/config`` (spec 8), in load order.
CONFIG_FILES = (
    "topics.json",
    "subscriptionGroup.json",
    "consumerOffset.json",
    "delayOffset.json",
    "consumerFilter.json",
)


@dataclass(frozen=True, slots=True)
class ConfigFinding:
    """One line of the check: ``defect`` False for a note."""

    file: str
    defect: bool
    text: str


def check_config_dir(config_dir: StrPath) -> list[ConfigFinding]:
    """Check every config file in ``config_dir`` without changing anything (module docstring).

    Returns:
        Findings, defects and notes, in file order; empty for a clean or absent directory.

    Raises:
        OSError: a file exists but cannot be read.
    """
    directory = os.fspath(config_dir)
    findings: list[ConfigFinding] = []
    for name in CONFIG_FILES:
        findings += _check_file(os.path.join(directory, name))
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return findings
    for name in names:
        if name.endswith(TEMP_SUFFIX):
            text = "left by an interrupted write; removed at the next start"
        elif CORRUPT_SUFFIX in name:
            text = "a damaged copy recovery set aside; delete it once looked at"
        else:
            continue
        findings.append(ConfigFinding(name, False, f"{name}: {text}"))
    return findings


def _identity(raw: Any) -> Any:
    return raw


def _check_file(path: str) -> list[ConfigFinding]:
    name = os.path.basename(path)
    outcome = CheckedFile(path).load(_identity, readonly=True)
    if outcome.status == "fresh":
        return []
    if outcome.recovered:
        return [ConfigFinding(name, True, outcome.describe(for_check=True))]
    intact = f"{name} itself is intact; the next start sets the backup aside and rewrites it"
    findings = [
        ConfigFinding(name, True, f"{damage_phrase(label, state)} ({intact})")
        for label, state in outcome.damage
    ]
    if outcome.generation is None:
        unverified = "no integrity record (written by RocketMQ or an older Cairn): only parsed"
        findings.append(ConfigFinding(name, False, f"{name}: {unverified}"))
    return findings
