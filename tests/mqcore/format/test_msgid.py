"""Host encoding, offsetMsgId (spec 2.3) and UNIQ_KEY client ids (spec 2.4)."""

from __future__ import annotations

import struct
import threading
from datetime import datetime
from ipaddress import IPv4Address, IPv6Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.format.msgid import (
    HostAddress,
    UniqKeyGenerator,
    choose_producer_ip,
    create_offset_msg_id,
    decode_host,
    decode_offset_msg_id,
    encode_host,
    uniq_key_time_ms,
)


def local_month_start_ms(year: int, month: int) -> int:
    """Local midnight of the 1st, computed with datetime (independently of the module)."""
    return int(datetime(year, month, 1).timestamp() * 1000)


# --- hosts -------------------------------------------------------------------------------------


def test_encode_host_ipv4() -> None:
    assert encode_host(HostAddress("10.0.0.5", 10911)) == bytes([10, 0, 0, 5, 0, 0, 0x2A, 0x9F])


def test_encode_host_ipv6() -> None:
    raw = encode_host(HostAddress("2001:db8::1", 8080))
    assert len(raw) == 20
    assert raw[:16] == bytes.fromhex("20010db8000000000000000000000001")
    assert raw[16:] == (8080).to_bytes(4, "big")


def test_ipv4_mapped_and_scoped_addresses() -> None:
    # Java stores IPv4-mapped addresses as plain IPv4 (Inet4Address).
    assert encode_host(HostAddress("::ffff:10.0.0.5", 1)) == encode_host(HostAddress("10.0.0.5", 1))
    assert encode_host(HostAddress("fe80::1%eth0", 1)) == encode_host(HostAddress("fe80::1", 1))


@pytest.mark.parametrize("ip", ["", "10.0.0", "256.1.1.1", "host.example", "::g"])
def test_encode_host_rejects_bad_ip(ip: str) -> None:
    with pytest.raises(ValidationError) as info:
        encode_host(HostAddress(ip, 1))
    assert (info.value.field, info.value.rule) == ("host", "ip_address")


@pytest.mark.parametrize("port", [-1, 65536])
def test_encode_host_rejects_bad_port(port: int) -> None:
    with pytest.raises(ValidationError) as info:
        encode_host(HostAddress("1.2.3.4", port))
    assert info.value.rule == "port"
    assert "0..65535" in str(info.value)


def test_decode_host_from_any_buffer() -> None:
    raw = b"xx" + encode_host(HostAddress("192.168.0.1", 54321))
    for buf in (raw, bytearray(raw), memoryview(raw)):
        assert decode_host(buf, 2, False) == HostAddress("192.168.0.1", 54321)
    with pytest.raises(struct.error):
        decode_host(raw, 2, True)  # 20 bytes needed, 8 there


def test_host_str() -> None:
    assert str(HostAddress("10.0.0.5", 10911)) == "10.0.0.5:10911"
    assert str(HostAddress("::1", 10911)) == "[::1]:10911"


ipv4 = st.ip_addresses(v=4).map(str)


def _not_ipv4_mapped(address: IPv4Address | IPv6Address) -> bool:
    return not (isinstance(address, IPv6Address) and address.ipv4_mapped is not None)


ipv6 = st.ip_addresses(v=6).filter(_not_ipv4_mapped).map(str)
hosts = st.builds(HostAddress, ipv4 | ipv6, st.integers(0, 65535))


@given(hosts)
def test_host_round_trip(host: HostAddress) -> None:
    raw = encode_host(host)
    v6 = ":" in host.ip
    assert len(raw) == (20 if v6 else 8)
    assert decode_host(raw, 0, v6) == host


# --- offsetMsgId -------------------------------------------------------------------------------


def test_offset_msg_id_spec_example() -> None:
    msg_id = create_offset_msg_id(HostAddress("10.0.0.5", 10911), 1073741947)
    assert msg_id == "0A00000500002A9F000000004000007B"
    assert decode_offset_msg_id(msg_id) == (HostAddress("10.0.0.5", 10911), 1073741947)
    assert decode_offset_msg_id(msg_id.lower()) == (HostAddress("10.0.0.5", 10911), 1073741947)


def test_offset_msg_id_ipv6() -> None:
    msg_id = create_offset_msg_id(HostAddress("2001:db8::7", 10911), 42)
    assert msg_id == "20010DB8000000000000000000000007" + "00002A9F" + "000000000000002A"
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == (HostAddress("2001:db8::7", 10911), 42)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "0A00000500002A9F000000004000007",  # 31 chars
        "0A00000500002A9F000000004000007BB",  # 33 chars
        "0A00000500002A9F00000000400000ZZ",  # not hex
        "0A00000500002A9F 00000004000007B",  # whitespace (fromhex would skip it)
    ],
)
def test_decode_offset_msg_id_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValidationError) as info:
        decode_offset_msg_id(bad)
    assert (info.value.field, info.value.rule) == ("msg_id", "format")


@given(hosts, st.integers(-(2**63), 2**63 - 1))
def test_offset_msg_id_round_trip(host: HostAddress, offset: int) -> None:
    msg_id = create_offset_msg_id(host, offset)
    assert msg_id == msg_id.upper() and len(msg_id) in (32, 56)
    assert decode_offset_msg_id(msg_id) == (host, offset)


# --- UNIQ_KEY ----------------------------------------------------------------------------------


def test_uniq_key_spec_example() -> None:
    start = local_month_start_ms(2024, 5)
    generator = UniqKeyGenerator(
        "192.168.0.1",
        12345,
        FakeClock(start + 0x0A1B2C3D),
        loader_hash=0x1B6D3586,
        counter_start=1,
    )
    assert generator.prefix == "C0A8000130391B6D3586"
    assert generator.next_id() == "C0A8000130391B6D35860A1B2C3D0001"
    assert generator.next_id() == "C0A8000130391B6D35860A1B2C3D0002"


def test_counter_is_16_bits_and_pid_truncated() -> None:
    clock = FakeClock(local_month_start_ms(2024, 5))
    generator = UniqKeyGenerator("1.2.3.4", 0x12345, clock, loader_hash=0, counter_start=0xFFFF)
    assert generator.prefix == "01020304" + "2345" + "00000000"
    assert generator.next_id().endswith("00000000FFFF")
    assert generator.next_id().endswith("000000000000")


def test_ipv6_producer_id_is_56_chars() -> None:
    key = UniqKeyGenerator("2001:db8::1", 1, FakeClock(), loader_hash=1).next_id()
    assert len(key) == 56
    assert key.startswith("20010DB8000000000000000000000001" + "0001" + "00000001")


def test_default_generator() -> None:
    generator = UniqKeyGenerator()
    first, second = generator.next_id(), generator.next_id()
    assert len(first) in (32, 56) and first != second
    assert first[:-12] == second[:-12] == generator.prefix
    int(first, 16)


def test_month_rollover() -> None:
    may, june = local_month_start_ms(2024, 5), local_month_start_ms(2024, 6)
    clock = FakeClock(june - 1000)
    generator = UniqKeyGenerator("1.2.3.4", 1, clock, loader_hash=0)
    assert generator.next_id()[-12:-4] == f"{june - 1000 - may:08X}"
    clock.set(june + 5)
    assert generator.next_id()[-12:-4] == "00000005"


def test_small_clock_step_back_is_forced_to_zero() -> None:
    june = local_month_start_ms(2024, 6)
    clock = FakeClock(june + 10)
    generator = UniqKeyGenerator("1.2.3.4", 1, clock, loader_hash=0)
    clock.set(june - 500)  # NTP step back across the month start
    assert generator.next_id()[-12:-4] == "00000000"
    clock.set(june - 2_000_000)  # too far back: Java keeps the negative int
    assert generator.next_id()[-12:-4] == f"{(-2_000_000) & 0xFFFFFFFF:08X}"


def test_generator_is_thread_safe() -> None:
    generator = UniqKeyGenerator("1.2.3.4", 1, FakeClock(), loader_hash=0)
    seen: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        ids = [generator.next_id() for _ in range(2000)]
        with lock:
            seen.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == len(set(seen)) == 16000


def test_uniq_key_time() -> None:
    start = local_month_start_ms(2024, 5)
    created = start + 0x0A1B2C3D
    key = UniqKeyGenerator("1.2.3.4", 1, FakeClock(created), loader_hash=0).next_id()
    assert uniq_key_time_ms(key, created) == created
    assert uniq_key_time_ms(key, created + 5 * 86_400_000) == created
    # near_ms earlier in the month than the key's offset: the key is from the month before
    april = local_month_start_ms(2024, 4)
    assert uniq_key_time_ms(key, start + 1000) == april + 0x0A1B2C3D


@pytest.mark.parametrize("bad", ["", "XYZ", "C0A8000130391B6D35860A1B2C3D000", "Z" * 32])
def test_uniq_key_time_rejects_malformed(bad: str) -> None:
    assert uniq_key_time_ms(bad, 1_700_000_000_000) is None


# --- choosing the producer IP ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        ([], None),
        (["127.0.0.1", "::1"], None),
        (["not-an-ip", "8.8.8.8"], "8.8.8.8"),
        (["192.168.0.1", "8.8.8.8"], "8.8.8.8"),  # public wins over internal
        (["192.168.0.1", "10.0.0.1"], "192.168.0.1"),  # first internal one
        (["169.254.1.1", "172.16.0.9"], "172.16.0.9"),  # link-local never
        (["0.0.0.0", "224.0.0.1", "10.1.1.1"], "10.1.1.1"),  # unspecified, multicast never
        (["fe80::1", "fec0::1", "2001:4860::8888"], "2001:4860::8888"),
        (["10.0.0.1", "2001:4860::8888"], "2001:4860::8888"),
        (["::ffff:8.8.4.4"], "8.8.4.4"),
    ],
)
def test_choose_producer_ip(candidates: list[str], expected: str | None) -> None:
    chosen = choose_producer_ip(candidates)
    if expected is None:
        assert chosen is None
    else:
        assert chosen == encode_host(HostAddress(expected, 0))[:-4]
