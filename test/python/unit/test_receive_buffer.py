"""Where the client receives an answer's body of declared length: small ones in a
bytearray, large ones in a private memory mapping that asks for transparent huge pages, so
that 64 MiB are 32 page faults rather than 16,384; and large ``bytes`` values copied out of
it into huge pages too (kcoral._body)."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import pytest

from kcoral._body import MAPPED_FROM_BYTES, _receive_buffer, bytes_copy

MiB = 1 << 20
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_kib_within(address: int, size: int) -> int:
    """AnonHugePages of this process's mappings that overlap ``size`` bytes at ``address``
    (/proc/self/smaps; advising part of a mapping splits it)."""
    inside = False
    total = 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split()[0]
        if not first.endswith(":"):
            start, end = (int(bound, 16) for bound in first.split("-"))
            inside = start < address + size and address < end
        elif inside and first == "AnonHugePages:":
            total += int(line.split()[1])
    return total


def test_a_small_body_goes_into_a_bytearray():
    buffer = _receive_buffer(MAPPED_FROM_BYTES - 1)
    assert type(buffer) is bytearray and len(buffer) == MAPPED_FROM_BYTES - 1


@pytest.mark.skipif(sys.platform != "linux", reason="huge pages are asked for on Linux only")
def test_a_large_body_goes_into_a_private_mapping_in_huge_pages():
    buffer = _receive_buffer(64 * MiB)
    assert isinstance(buffer, mmap.mmap) and len(buffer) == 64 * MiB
    memoryview(buffer)[:] = b"\x01" * (64 * MiB)
    assert buffer[:2] == b"\x01\x01" and buffer.find(b"\x00") == -1
    setting = THP_SETTING.read_text() if THP_SETTING.exists() else ""
    if "[madvise]" not in setting and "[always]" not in setting:
        pytest.skip(f"the kernel gives no transparent huge pages on request ({setting.strip()})")
    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    huge = huge_kib_within(address, len(buffer))
    assert huge >= 60 << 10, huge  # all but an unaligned mapping's ends


@pytest.mark.parametrize("size", [0, 1, MAPPED_FROM_BYTES - 1, MAPPED_FROM_BYTES, 5 * MiB + 3])
def test_bytes_copy_is_bytes_of_the_same_bytes(size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for source in (data, memoryview(data), bytearray(data), memoryview(data)[0:]):
        copied = bytes_copy(source)
        assert type(copied) is bytes and copied == data
    hash(copied)  # a bytes object like any other: hashable, usable as a key
    assert {copied: 1}[data] == 1


@pytest.mark.skipif(sys.platform != "linux", reason="huge pages are asked for on Linux only")
def test_a_large_bytes_copy_lies_in_huge_pages():
    data = b"\x02" * (64 * MiB)
    copied = bytes_copy(memoryview(data))  # as from the answer's buffer
    assert copied == data and copied is not data
    assert bytes_copy(data) is data  # a bytes cannot change: it is its own copy
    setting = THP_SETTING.read_text() if THP_SETTING.exists() else ""
    if "[madvise]" not in setting and "[always]" not in setting:
        pytest.skip(f"the kernel gives no transparent huge pages on request ({setting.strip()})")
    address = ctypes.cast(ctypes.c_char_p(copied), ctypes.c_void_p).value
    assert huge_kib_within(address, len(copied)) >= 60 << 10
