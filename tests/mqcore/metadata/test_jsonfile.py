"""fastjson's text format, atomic writes and .bak fallback (spec 8.1)."""

from __future__ import annotations

import errno
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mqcore.errors import StoreError, ValidationError
from mqcore.metadata.jsonfile import (
    Bean,
    atomic_write,
    backup_current,
    dumps_fastjson,
    install_temp,
    load_with_backup,
    loads_fastjson,
    parse_document,
    sync_dir,
    write_temp,
)
from tests.conftest import REPO
from tests.mqcore.metadata.support import fixture_text

# -- writing -----------------------------------------------------------------------------------


def test_bean_keys_sorted_and_nulls_left_out() -> None:
    text = dumps_fastjson(Bean(zeta=1, alpha="a", missing=None, Mid=True))
    assert text == '{\n\t"Mid":true,\n\t"alpha":"a",\n\t"zeta":1\n}'


def test_string_map_keeps_order_and_puts_each_key_on_its_own_line() -> None:
    text = dumps_fastjson(Bean(table={"b": 1, "a": None, "c": {}}))
    assert text == '{\n\t"table":{\n\t\t"b":1,\n\t\t"c":{}\n\t}\n}'


def test_int_keyed_map_is_bare_and_on_the_line_of_its_brace() -> None:
    # What a real broker writes: no newline before a non-string key, one before the '}'.
    text = dumps_fastjson(Bean(offsetTable={"T@g": {0: 250, 1: 251}, "U@g": {}}))
    assert text == '{\n\t"offsetTable":{\n\t\t"T@g":{0:250,1:251\n\t\t},\n\t\t"U@g":{}\n\t}\n}'


def test_negative_int_key() -> None:
    assert dumps_fastjson({-1: 5}) == "{-1:5\n}"


def test_inline_arrays_for_sets_and_primitive_arrays() -> None:
    text = dumps_fastjson(Bean(next=(1000, 5000), topics={"b", "a"}, empty=()))
    assert text == '{\n\t"empty":[],\n\t"next":[1000,5000],\n\t"topics":["a","b"]\n}'


def test_beans_inside_an_inline_set_keep_the_outer_indentation() -> None:
    text = dumps_fastjson(Bean(set=(Bean(b=2, a=1),)))
    assert text == '{\n\t"set":[{\n\t\t"a":1,\n\t\t"b":2\n\t}]\n}'


def test_list_puts_every_item_on_its_own_line() -> None:
    assert dumps_fastjson([Bean(), Bean()]) == "[\n\t{\n\t\t\n\t},\n\t{\n\t\t\n\t}\n]"
    assert dumps_fastjson(Bean(items=[1])) == '{\n\t"items":[\n\t\t1\n\t]\n}'
    assert dumps_fastjson([]) == "[]"


def test_strings_escape_quotes_backslashes_and_control_characters_only() -> None:
    text = dumps_fastjson({"k": 'a"b\\c\nd\te\x01f/é标签'})
    assert text == '{\n\t"k":"a\\"b\\\\c\\nd\\te\\u0001f/é标签"\n}'


@pytest.mark.parametrize("bad", [1.5, object(), {1.5: 1}, {True: 1}])
def test_values_outside_the_model_are_refused(bad: Any) -> None:
    with pytest.raises(TypeError):
        dumps_fastjson({"k": bad})


# -- reading -----------------------------------------------------------------------------------


def test_bare_integer_keys_come_back_as_ints() -> None:
    parsed = loads_fastjson('{"offsetTable":{"T@g":{0:250,1:251\n\t\t},"E":{}}}')
    assert parsed == {"offsetTable": {"T@g": {0: 250, 1: 251}, "E": {}}}


def test_quoted_numeric_keys_stay_strings() -> None:
    assert loads_fastjson('{"0":1, 2:3}') == {"0": 1, 2: 3}


def test_bare_key_patterns_inside_strings_are_left_alone() -> None:
    text = '{"expr":"a,1:b {2:c", "esc":"q\\",3:x", 4 : -5, -6:7}'
    assert loads_fastjson(text) == {"expr": "a,1:b {2:c", "esc": 'q",3:x', 4: -5, -6: 7}


def test_literal_tabs_inside_strings_and_a_bom_are_accepted() -> None:
    assert loads_fastjson('\ufeff{"k":"a\tb"}') == {"k": "a\tb"}


def test_numbers_in_arrays_are_not_keys() -> None:
    assert loads_fastjson('{"next":[1000,5000],"m":{1:[2,3]}}') == {
        "next": [1000, 5000],
        "m": {1: [2, 3]},
    }


def test_garbage_raises_value_error_and_documents_raise_validation_error() -> None:
    with pytest.raises(ValueError):
        loads_fastjson('{"a":')
    with pytest.raises(ValidationError) as info:
        parse_document("{nope")
    assert (info.value.field, info.value.rule) == ("document", "json")


def test_a_java_file_survives_parse_and_write_byte_for_byte() -> None:
    original = fixture_text("delayOffset.json")
    assert dumps_fastjson(loads_fastjson(original)) == original


# -- atomic writes -----------------------------------------------------------------------------

OLDEST = '{"v":0}'
OLD = '{"v":1}'
NEW = '{"v":2}'
NEWER = '{"v":3}'

Step = Callable[[Path, bytes], object]
STEPS: list[Step] = [
    lambda path, data: write_temp(path, data),
    lambda path, data: backup_current(path),
    lambda path, data: install_temp(path),
    lambda path, data: sync_dir(path),
]


def test_atomic_write_keeps_the_previous_version_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "topics.json"
    atomic_write(path, OLD)
    assert path.read_text() == OLD
    assert not Path(f"{path}.bak").exists()
    atomic_write(path, NEW)
    assert path.read_text() == NEW
    assert Path(f"{path}.bak").read_text() == OLD
    assert sorted(p.name for p in path.parent.iterdir()) == ["topics.json", "topics.json.bak"]


@pytest.mark.parametrize("completed", range(len(STEPS) + 1))
def test_a_crash_after_any_step_loses_nothing(tmp_path: Path, completed: int) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, OLDEST)
    atomic_write(path, OLD)
    for step in STEPS[:completed]:  # the process dies after `completed` steps
        step(path, NEW.encode())

    expected = NEW if completed >= 3 else OLD
    assert load_with_backup(path) == loads_fastjson(expected)
    bak = Path(f"{path}.bak").read_text()
    assert bak in (OLDEST, OLD)  # always a complete earlier version
    # Losing X itself now still leaves the previous complete version.
    assert load_with_backup(Path(f"{path}.bak")) is not None
    # The next write after the crash completes normally.
    atomic_write(path, NEWER)
    assert load_with_backup(path) == loads_fastjson(NEWER)
    assert Path(f"{path}.bak").read_text() == expected


def test_backup_is_copied_where_hard_links_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "no hard links here")

    path = tmp_path / "topics.json"
    atomic_write(path, OLD)
    monkeypatch.setattr(os, "link", no_links)
    atomic_write(path, NEW)
    assert path.read_text() == NEW
    assert Path(f"{path}.bak").read_text() == OLD


def test_an_empty_file_is_not_made_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    atomic_write(path, OLD)
    atomic_write(path, NEW)
    path.write_text("")
    assert backup_current(path) is False
    assert Path(f"{path}.bak").read_text() == OLD


_WRITER = textwrap.dedent(
    """
    import sys
    from mqcore.metadata.jsonfile import atomic_write
    pad = "x" * 100_000
    n = 0
    while True:
        n += 1
        atomic_write(sys.argv[1], '{"n":%d,"pad":"%s"}' % (n, pad))
        print(n, flush=True)
    """
)


def test_sigkill_during_writes_loses_no_acknowledged_write(tmp_path: Path) -> None:
    rng = random.Random(20240917)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for round_no in range(8):
        path = tmp_path / f"round{round_no}" / "consumerOffset.json"
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        acknowledged = 0
        try:
            for _ in range(rng.randint(1, 25)):
                line = proc.stdout.readline()
                assert line, "the writer died on its own"
                acknowledged = int(line)
            time.sleep(rng.random() * 0.005)  # land the kill anywhere inside a write
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        # X itself is always complete: no fallback needed.
        state = loads_fastjson(path.read_text())
        assert state["n"] >= acknowledged
        assert load_with_backup(path) == state
        if state["n"] > 1:  # n - 1, or n when the kill came between backup and rename
            backup = loads_fastjson(Path(f"{path}.bak").read_text())
            assert backup["n"] in (state["n"] - 1, state["n"])


# -- loading with fallback ---------------------------------------------------------------------


def _two_versions(tmp_path: Path) -> Path:
    path = tmp_path / "topics.json"
    atomic_write(path, OLD)
    atomic_write(path, NEW)  # X = NEW, X.bak = OLD
    return path


def test_missing_file_and_backup_is_a_fresh_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert load_with_backup(tmp_path / "topics.json") is None
    assert caplog.records == []


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: p.unlink(), "missing"),  # RocketMQ HEAD died between rename and write
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: p.write_bytes(b"  \n"), "empty"),
        (lambda p: p.write_bytes(NEW.encode()[:4]), "unreadable"),  # cut short
        (lambda p: p.write_bytes(b'{"v":\xff}'), "unreadable"),  # not UTF-8
    ],
)
def test_a_bad_main_file_falls_back_to_the_backup(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], object],
    reason: str,
) -> None:
    path = _two_versions(tmp_path)
    damage(path)
    with caplog.at_level(logging.WARNING, logger="mqcore.metadata.jsonfile"):
        assert load_with_backup(path) == {"v": 1}
    assert any(reason in r.getMessage() and ".bak" in r.getMessage() for r in caplog.records)
    # A corrupt X is set aside so that the next write cannot make it the backup.
    assert not path.exists()
    assert Path(f"{path}.corrupt").exists() == (reason == "unreadable")
    atomic_write(path, NEWER)
    assert Path(f"{path}.bak").read_text() == OLD


def test_a_decoder_rejecting_the_content_counts_as_unreadable(tmp_path: Path) -> None:
    path = _two_versions(tmp_path)

    def decode(raw: Any) -> int:
        if raw["v"] == 2:
            raise ValidationError("v", "range", "v must not be 2")
        return int(raw["v"])

    assert load_with_backup(path, decode) == 1


def test_bad_file_without_backup_starts_empty_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "topics.json"
    path.write_text("{broken")
    with caplog.at_level(logging.WARNING):
        assert load_with_backup(path) is None
    assert any("starting empty" in r.getMessage() for r in caplog.records)
    assert Path(f"{path}.corrupt").read_text() == "{broken"


def test_both_unreadable_raises_and_moves_nothing(tmp_path: Path) -> None:
    path = _two_versions(tmp_path)
    path.write_text("{broken")
    Path(f"{path}.bak").write_text("[also broken")
    with pytest.raises(StoreError, match="topics.json.bak"):
        load_with_backup(path)
    assert path.read_text() == "{broken"
    assert not Path(f"{path}.corrupt").exists()
