"""``python -m mqcore``, run as an operator would: a subprocess on stores built in tmp_path.

Exit codes: 0 ok, 1 defects or nothing found, 2 usage. Errors are one line on stderr.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqcore import cli
from mqcore.clock import FakeClock
from mqcore.format.msgid import HostAddress
from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from tests.support.foreign_store import ForeignMessage, write_commitlog
from tests.support.store_oracle import Oracle, run_cli

T0 = 1_700_000_000_000
CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=100,
    index_hash_slots=7,
    index_max_entries=120,
)


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Oracle]]:
    """A closed store; every test of this module runs read-only commands on it."""
    root = tmp_path_factory.mktemp("cli")
    clock = FakeClock(T0)
    oracle = Oracle()
    with MessageStore(root, CONFIG, clock=clock) as s:
        for i in range(400):
            body = f"hello {i}".encode() if i % 2 else bytes(range(256)) * 2
            msg = Message(
                ("orders", "payments")[i % 2],
                body,
                tags="TagA",
                keys=[f"order-{i}", "shared"],
                born_host=HostAddress("::1", 7000) if i == 5 else None,
            )
            oracle.put(s, msg, i % 3)
            clock.advance(3)
    before = snapshot(root)
    yield root, oracle
    assert snapshot(root) == before, "a read-only command changed the store"


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


# --- help and usage errors --------------------------------------------------------------------


def test_help_lists_commands_and_examples() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for word in ("check", "dump", "query", "view", "examples:", "exit codes"):
        assert word in result.stdout
    for command in ("check", "dump", "query", "view"):
        sub = run_cli(command, "--help")
        assert sub.returncode == 0 and "--commitlog-file-size" in sub.stdout


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["frobnicate", "x"],
        ["dump", "{store}"],  # --offset is required
        ["dump", "{store}", "--offset", "-5"],
        ["dump", "{store}", "--offset", "0", "--count", "0"],
        ["check", "{store}", "--commitlog-file-size", "lots"],
        ["query", "{store}", "--topic", "orders", "--key", "k", "--begin", "yesterday"],
        ["check", "{missing}"],
        ["view", "{store}/commitlog", "--id", "X"],  # not a store directory
        ["query", "{store}", "--topic", "orders", "--key", "k", "--begin", "10", "--end", "5"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    filled = [a.format(store=store[0], missing=tmp_path / "nope") for a in args]
    result = run_cli(*filled)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    one_line(result.stderr)


# --- check ------------------------------------------------------------------------------------


def test_check_passes_on_a_good_store(store: tuple[Path, Oracle]) -> None:
    root, oracle = store
    result = run_cli("check", root)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"{len(oracle.messages)} records" in out
    assert "00000000000000000000" in out  # the segment list
    assert "orders/0  offsets 0 .. " in out  # the queue list
    assert "records     sizes min" in out
    assert out.rstrip().splitlines()[-1].startswith("summary: OK, no defect")
    report = json.loads(run_cli("check", root, "--json").stdout)
    assert report["ok"] is True and report["defect_count"] == 0
    assert report["record_sizes"]["count"] == len(oracle.messages)
    assert report["geometry"]["index_hash_slots"] == 7


def test_check_prints_progress_on_stderr(
    store: tuple[Path, Oracle], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "PROGRESS_INTERVAL_S", 0.0)  # as if the store were big
    assert cli.main(["check", str(store[0]), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["ok"] is True
    phases = {line.split()[1] for line in err.splitlines()}
    assert phases == {"commitlog", "consumequeue", "index"}
    assert cli.main(["check", str(store[0]), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_check_names_a_flipped_byte_and_exits_1(store: tuple[Path, Oracle], tmp_path: Path) -> None:
    root = copy(store[0], tmp_path)
    victim = store[1].messages[10]
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(victim.phys_offset + 88)  # first body byte
        byte = f.read(1)
        f.seek(victim.phys_offset + 88)
        f.write(bytes([byte[0] ^ 0x40]))
    result = run_cli("check", root)
    assert result.returncode == 1
    defects = [line for line in result.stdout.splitlines() if line.startswith("defect: ")]
    assert defects[0].startswith(
        f"defect: commitlog/{0:020d}@{victim.phys_offset} (phys {victim.phys_offset}): "
        "body CRC mismatch"
    )
    # Its ConsumeQueue unit and its 3 index entries (UNIQ_KEY and 2 keys) point at it.
    assert len(defects) == 5
    assert result.stdout.rstrip().splitlines()[-1].startswith("summary: FAILED, 5 defects")
    limited = run_cli("check", root, "--max-defects", "1")
    assert limited.returncode == 1 and "defect: ... and 4 more (--max-defects)" in limited.stdout


def test_check_lists_the_quarantine_and_never_says_ok(
    store: tuple[Path, Oracle], tmp_path: Path
) -> None:
    """A record damaged in the middle of the log, quarantined by a pull: check names the
    mid-log corruption, lists the range with its health status, and exits 1 until the
    range is gone, acknowledged or not."""
    root = copy(store[0], tmp_path)
    victim = store[1].messages[200]
    size = CONFIG.commitlog_file_size
    base = victim.phys_offset - victim.phys_offset % size
    with MessageStore(root, CONFIG, clock=FakeClock(T0 + 10**6)) as s:
        # Damaged after the start (its check of the derived files would have found it) in
        # an old segment, which no recovery rescans: a pull finds it.
        with open(root / "commitlog" / f"{base:020d}", "r+b") as f:
            f.seek(victim.phys_offset - base + 4)  # MAGICCODE
            f.write(bytes(4))
        assert s.quarantine.covering(victim.phys_offset) is None
        got = s.get_messages("g", victim.topic, victim.queue_id, victim.queue_offset, 2)
        assert [m.queue_offset for m in got.messages] == [victim.queue_offset + 1]
        assert s.quarantine.covering(victim.phys_offset) is not None
    result = run_cli("check", root)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "quarantine  1 corrupt range (1 not acknowledged), 0 torn tail copies" in lines
    [row] = [line for line in lines if line.startswith(f"  {victim.phys_offset:020d}")]
    assert f"phys {victim.phys_offset} .. {victim.phys_offset + victim.size}" in row
    assert "corrupt, NOT acknowledged; found by read" in row
    assert f"{victim.topic}-{victim.queue_id} offset {victim.queue_offset}" in row
    [defect] = [line for line in lines if line.startswith("defect: ") and "mid-log" in line]
    assert f"(phys {victim.phys_offset}): illegal magic code" in defect
    assert lines[-1].startswith("summary: FAILED")
    with MessageStore(root, CONFIG, clock=FakeClock(T0 + 10**6)) as s:
        assert len(s.health.acknowledge(None, "ops")) == 1
    result = run_cli("check", root)
    assert result.returncode == 1
    assert "quarantine  1 corrupt range (0 not acknowledged), 0 torn tail copies" in result.stdout
    assert "corrupt, acknowledged by ops" in result.stdout
    report = json.loads(run_cli("check", root, "--json").stdout)
    assert report["ok"] is False
    assert [q["offset"] for q in report["quarantine"]] == [victim.phys_offset]


def test_check_fails_on_a_half_built_store(store: tuple[Path, Oracle], tmp_path: Path) -> None:
    """A swap of rebuilt files a kill interrupted: check says so and exits 1, never OK."""
    root = copy(store[0], tmp_path)
    (root / "rebuild").mkdir()
    (root / "rebuild" / "swap.json").write_text('{"moves": []}')
    result = run_cli("check", root)
    assert result.returncode == 1, result.stdout
    assert (
        "defect: rebuild/swap.json: a swap of rebuilt files was interrupted (the next start "
        "or rebuildindex finishes it)"
    ) in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("summary: FAILED, 1 defect")


def test_check_with_a_wrong_segment_size_is_a_defect(store: tuple[Path, Oracle]) -> None:
    result = run_cli("check", store[0], "--commitlog-file-size", "32K")
    assert result.returncode == 1
    assert "length 65536 bytes but the configured file size is 32768" in result.stdout


def test_check_on_a_foreign_store_before_cairn_opened_it(tmp_path: Path) -> None:
    messages = [
        ForeignMessage("TopicTest", i % 2, b"x" * 100, {"KEYS": f"k{i}", "UNIQ_KEY": f"{i:032X}"})
        for i in range(120)
    ]
    write_commitlog(tmp_path, messages, file_size=8192)
    result = run_cli("check", tmp_path)
    assert result.returncode == 0, result.stdout
    assert "abnormal (abort file present)" in result.stdout
    assert "the next start dispatches them" in result.stdout
    assert "commitlog: 8192 bytes per file (from the file lengths)" in result.stdout
    view = run_cli("view", tmp_path, "--id", "0A00000500002A9F0000000000000000", "--json")
    assert view.returncode == 0 and json.loads(view.stdout)["message"]["keys"] == ["k0"]


# --- dump, query, view ------------------------------------------------------------------------


def test_dump_decodes_records_from_an_offset(store: tuple[Path, Oracle]) -> None:
    root, oracle = store
    first, second = oracle.messages[4], oracle.messages[5]
    result = run_cli("dump", root, "--offset", first.phys_offset, "--count", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    records = data["records"]
    assert [r["phys_offset"] for r in records] == [first.phys_offset, second.phys_offset]
    assert data["next_offset"] == second.phys_offset + second.size
    r = records[1]
    assert (r["topic"], r["queue_id"], r["queue_offset"]) == (
        second.topic,
        second.queue_id,
        second.queue_offset,
    )
    assert r["msg_id"] == second.msg_id and r["offset_msg_id"] == second.offset_msg_id
    assert r["born_host"] == "[::1]:7000" and "BORNHOST_V6" in r["sys_flag_names"]
    assert r["store_timestamp"] == second.store_timestamp and r["body_crc_ok"] is True
    assert r["body_encoding"] == "text" and r["body_preview"] == "hello 5"
    assert r["properties"]["KEYS"] == "order-5 shared" and r["tags"] == "TagA"
    assert records[0]["body_encoding"] == "hex" and records[0]["body_truncated"] is True
    text = run_cli("dump", root, "--offset", second.phys_offset)
    assert text.returncode == 0
    assert f"offset_msg_id       {second.offset_msg_id}" in text.stdout
    assert "body                7 bytes, text: 'hello 5'" in text.stdout


def test_dump_across_a_segment_end_and_off_a_record(store: tuple[Path, Oracle]) -> None:
    root, oracle = store
    size = CONFIG.commitlog_file_size
    last_of_first = max(
        (e for e in oracle.messages if e.phys_offset < size), key=lambda e: e.phys_offset
    )
    got = json.loads(
        run_cli(
            "dump", root, "--offset", last_of_first.phys_offset, "--count", "2", "--json"
        ).stdout
    )
    assert got["records"][1]["phys_offset"] == size  # the blank record was skipped
    bad = run_cli("dump", root, "--offset", last_of_first.phys_offset + 1)
    assert bad.returncode == 1 and bad.stdout == ""
    assert one_line(bad.stderr).startswith(
        f"mqcore dump: no record at offset {last_of_first.phys_offset + 1}"
    )
    beyond = run_cli("dump", root, "--offset", 10**9)
    assert beyond.returncode == 1 and "outside the CommitLog" in beyond.stderr


def test_query_by_key(store: tuple[Path, Oracle]) -> None:
    root, oracle = store
    e = oracle.messages[33]
    result = run_cli("query", root, "--topic", e.topic, "--key", f"order-{33}", "--json")
    assert result.returncode == 0
    assert [m["phys_offset"] for m in json.loads(result.stdout)["messages"]] == [e.phys_offset]
    shared = json.loads(
        run_cli(
            "query", root, "--topic", "orders", "--key", "shared", "--max", "5", "--json"
        ).stdout
    )
    assert len(shared["messages"]) == 5
    missing = run_cli("query", root, "--topic", "orders", "--key", "no-such-key")
    assert missing.returncode == 1 and missing.stdout == ""
    assert (
        one_line(missing.stderr) == "mqcore query: no message of topic orders with key no-such-key"
    )


def test_view_by_both_ids(store: tuple[Path, Oracle]) -> None:
    root, oracle = store
    e = oracle.messages[250]
    for msg_id in (e.offset_msg_id, e.msg_id, e.msg_id.lower()):
        result = run_cli("view", root, "--id", msg_id, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["message"]["phys_offset"] == e.phys_offset
    scoped = run_cli("view", root, "--id", e.msg_id, "--topic", e.topic)
    assert scoped.returncode == 0 and f"phys_offset         {e.phys_offset}" in scoped.stdout
    other = "payments" if e.topic == "orders" else "orders"
    assert run_cli("view", root, "--id", e.msg_id, "--topic", other).returncode == 1
    missing = run_cli("view", root, "--id", "00" * 16, "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout) == {"message": None}


def copy(src: Path, dst: Path) -> Path:
    for path in src.rglob("*"):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return dst
