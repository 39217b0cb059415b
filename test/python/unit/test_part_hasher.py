"""The client's hashing of an answer's parts while it arrives (kcoral._part_hasher).

What it finds is a hint: the decoder takes a digest only for a part at exactly its range.
So what must hold, for any bytes however cut into arrivals, is that every digest it gives
is the SHA-256 of exactly its range, that it finds the payloads of a well-formed body, and
that it ends (at once when stopped) however hostile the bytes. A payload equal to one of
the program's large uploads takes the upload's digest, compared rather than hashed; any
other is hashed, however much of an upload it shares.
"""

from __future__ import annotations

import hashlib
import mmap
import random
import threading

import pytest

from kcoral._codec import Part, decode_multipart, encode_multipart
from kcoral._part_hasher import COMPARED_FROM_BYTES, MAX_CANDIDATES, NO_UPLOADS, PartFollower, PartHasher

MiB = 1 << 20


def follow(
    body: bytes, boundary: bytes, cuts: list[int], uploads=NO_UPLOADS
) -> dict[tuple[int, int], str]:
    """The digests found by a follower fed ``body`` up to each of ``cuts`` in turn."""
    buffer = mmap.mmap(-1, max(len(body), 1))
    follower = PartFollower(buffer, boundary, uploads)
    arrived = 0
    for cut in [*cuts, len(body)]:
        buffer[arrived:cut] = body[arrived:cut]
        arrived = cut
        follower.feed(arrived)
    follower.close()
    return follower.digests


def random_cuts(rng: random.Random, size: int, count: int) -> list[int]:
    return sorted(rng.randrange(size + 1) for _ in range(count))


def assert_exact(body: bytes, digests: dict[tuple[int, int], str]) -> None:
    hashed = 0
    for (start, end), digest in sorted(digests.items()):
        assert hashed <= start <= end <= len(body)  # ranges never overlap
        assert digest == hashlib.sha256(body[start:end]).hexdigest()
        hashed = end


def well_formed(rng: random.Random, sizes: list[int]) -> tuple[bytes, bytes, list[Part]]:
    parts = [Part("result", "application/json", b'{"status": "COMPLETED"}')]
    parts += [
        Part(f"return:{i}", "application/octet-stream", rng.randbytes(size))
        for i, size in enumerate(sizes)
    ]
    content_type, body = encode_multipart(parts)
    return body, content_type.split("boundary=")[1].encode(), parts


def mangled(rng: random.Random, body: bytes, boundary: bytes, edits: int) -> bytes:
    """``body`` with ``edits`` framing pieces put in or stretches cut out, at random."""
    data = bytearray(body)
    pieces = [b"--" + boundary, b"\r\n--" + boundary, b"\r\n\r\n", b"\r\n", b"--", boundary[:5]]
    for _ in range(edits):
        at = rng.randrange(len(data) + 1)
        if rng.random() < 0.5:
            data[at:at] = rng.choice(pieces)
        else:
            del data[at : at + rng.randrange(1, 40)]
    return bytes(data)


@pytest.mark.parametrize("seed", range(8))
def test_it_finds_each_payload_of_a_well_formed_body_however_it_arrives(seed):
    rng = random.Random(seed)
    body, boundary, _ = well_formed(rng, [rng.choice([0, 1, 100, MiB + 7, 3 * MiB]) for _ in range(3)])
    cuts = random_cuts(rng, len(body), rng.choice([0, 3, 50, 500]))
    digests = follow(body, boundary, cuts)
    assert_exact(body, digests)
    decoded = decode_multipart(f"multipart/form-data; boundary={boundary.decode()}", body, digests)
    assert all(part.sha256 == hashlib.sha256(part.data).hexdigest() for part in decoded)


def test_arrivals_that_cut_through_every_delimiter_still_find_the_payloads():
    rng = random.Random(1)
    body, boundary, _ = well_formed(rng, [5000, 7000])
    delimiter = b"\r\n--" + boundary
    cuts = []
    at = body.find(delimiter)
    while at >= 0:
        cuts += range(at, at + len(delimiter) + 1)  # a byte at a time through each delimiter
        at = body.find(delimiter, at + 1)
    digests = follow(body, boundary, cuts)
    assert_exact(body, digests)
    assert len(digests) == 3


@pytest.mark.parametrize("seed", range(40))
def test_any_bytes_give_only_exact_digests(seed):
    """Mangled bodies: boundaries cut, doubled, with no headers' end, stray delimiters."""
    rng = random.Random(seed)
    body, boundary, _ = well_formed(rng, [rng.randrange(3000) for _ in range(rng.randrange(4))])
    data = mangled(rng, body, boundary, rng.randrange(1, 12))
    assert_exact(data, follow(data, boundary, random_cuts(rng, len(data), rng.randrange(30))))


def test_megabytes_of_delimiters_and_of_nothing_end_with_each_byte_hashed_at_most_once():
    boundary = b"b"
    for data in (b"\r\n--b" * (2 * MiB), b"--b\r\n\r\n" + b"\x00" * (16 * MiB), b"--b" * MiB):
        digests = follow(data, boundary, list(range(0, len(data), 64 << 10)))
        assert_exact(data, digests)
        assert sum(end - start for start, end in digests) <= len(data)


def test_the_thread_gives_what_the_follower_finds():
    rng = random.Random(2)
    body, boundary, _ = well_formed(rng, [3 * MiB, 10, 2 * MiB])
    buffer = mmap.mmap(-1, len(body))
    hasher = PartHasher(PartFollower(buffer, boundary))
    for at in range(0, len(body), 256 << 10):
        buffer[at : at + (256 << 10)] = body[at : at + (256 << 10)]
        hasher.advance(min(len(body), at + (256 << 10)))
    assert hasher.finish() == follow(body, boundary, [])
    buffer.close()  # the thread let go of its view


def test_stop_ends_the_thread_mid_body():
    buffer = mmap.mmap(-1, 64 * MiB)
    buffer[: 32 * MiB] = b"--b\r\n\r\n" + bytes(32 * MiB - 7)
    before = threading.active_count()
    hasher = PartHasher(PartFollower(buffer, b"b"))
    hasher.advance(32 * MiB)
    hasher.stop()  # joins the thread: the test would hang here otherwise
    assert threading.active_count() == before


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# A digest no hash gives: a part found with it was compared with the upload, not hashed.
LABEL = "c" * 64


def payloads_with(upload: bytes, others: list[bytes], seed: int):
    """A body holding ``upload`` and ``others`` as payloads, followed with ``upload`` given
    under LABEL, cut at random: [(payload, its digest)] in order, the result part first."""
    rng = random.Random(seed)
    parts = [Part("result", "application/json", b"{}")]
    parts += [Part(f"return:{i}", "application/octet-stream", data) for i, data in enumerate(others)]
    content_type, body = encode_multipart(parts)
    boundary = content_type.split("boundary=")[1].encode()
    digests = follow(body, boundary, random_cuts(rng, len(body), 40), {LABEL: upload})
    found = decode_multipart(content_type, body, digests)
    return [(bytes(part.data), part.sha256) for part in found]


@pytest.mark.parametrize("seed", range(4))
def test_a_payload_equal_to_an_upload_takes_its_digest_and_any_other_is_hashed(seed):
    rng = random.Random(seed)
    upload = rng.randbytes(COMPARED_FROM_BYTES + rng.randrange(3 * MiB))
    last_changed = upload[:-1] + bytes([upload[-1] ^ 1])
    first_changed = bytes([upload[0] ^ 1]) + upload[1:]
    others = [upload, upload[:-1], upload + b"x", last_changed, first_changed, b"", b"y" * 9, upload]
    rng.shuffle(others)
    found = payloads_with(upload, others, seed)
    assert [data for data, _ in found[1:]] == others
    for data, digest in found[1:]:
        assert digest == (LABEL if data == upload else sha256(data))


@pytest.mark.parametrize("seed", range(30))
def test_any_bytes_with_uploads_give_exact_digests_and_an_uploads_only_for_it(seed):
    """Mangled bodies whose payloads hold uploads, their starts, and pieces of them: a digest
    is the upload's (a label no hash gives) only for a range holding exactly that upload,
    and every other is the SHA-256 of its range."""
    rng = random.Random(500 + seed)
    upload = rng.randbytes(COMPARED_FROM_BYTES + rng.randrange(5000))
    other = upload[: rng.randrange(len(upload))] + rng.randbytes(rng.randrange(3))
    payloads = [rng.choice([upload, other, upload[rng.randrange(9):], b""]) for _ in range(rng.randrange(1, 4))]
    parts = [Part("result", "application/json", b"{}")]
    parts += [Part(f"return:{i}", "application/octet-stream", data) for i, data in enumerate(payloads)]
    content_type, body = encode_multipart(parts)
    boundary = content_type.split("boundary=")[1].encode()
    data = mangled(rng, body, boundary, rng.randrange(0, 6))
    digests = follow(data, boundary, random_cuts(rng, len(data), rng.randrange(30)), {LABEL: upload})
    hashed = 0
    for (start, end), digest in sorted(digests.items()):
        assert hashed <= start <= end <= len(data)
        expected = LABEL if data[start:end] == upload else sha256(data[start:end])
        assert digest == expected
        hashed = end


def test_uploads_below_the_comparison_size_are_hashed_as_any_payload():
    small = random.Random(5).randbytes(COMPARED_FROM_BYTES - 1)
    found = payloads_with(small, [small], 5)
    assert found[1] == (small, sha256(small))


def test_payloads_that_begin_as_the_upload_cost_at_most_a_comparison_and_a_hash_each():
    """A hostile body of megabytes of an upload's first bytes, over and over: each payload
    compared once and hashed once, the digests exact."""
    upload = random.Random(6).randbytes(4 * MiB)
    others = [upload[: rng_size] for rng_size in (MiB, 2 * MiB, 4 * MiB - 1)] * 4
    found = payloads_with(upload, others, 6)
    assert [digest for _, digest in found[1:]] == [sha256(data) for data in others]


def test_a_payload_that_could_be_more_uploads_than_it_compares_with_is_hashed():
    """Uploads sharing their start: a payload could be any of them until their ends, so
    beyond MAX_CANDIDATES it is hashed rather than compared with each."""
    start = random.Random(8).randbytes(COMPARED_FROM_BYTES)
    uploads = [start + bytes([i]) for i in range(MAX_CANDIDATES + 1)]
    labels = {f"{i:064x}": upload for i, upload in enumerate(uploads)}
    parts = [Part("result", "application/json", b"{}"), Part("return:0", "application/octet-stream", uploads[0])]
    content_type, body = encode_multipart(parts)
    boundary = content_type.split("boundary=")[1].encode()
    cuts = list(range(0, len(body), 64 << 10))  # arriving a piece at a time
    assert list(follow(body, boundary, cuts, labels).values()) == [sha256(b"{}"), sha256(uploads[0])]
    few = dict(list(labels.items())[:MAX_CANDIDATES])
    assert list(follow(body, boundary, cuts, few).values()) == [sha256(b"{}"), f"{0:064x}"]


def test_the_thread_compares_with_the_uploads_it_is_given():
    rng = random.Random(7)
    upload = rng.randbytes(3 * MiB)
    parts = [Part("result", "application/json", b"{}"), Part("return:0", "application/octet-stream", upload)]
    content_type, body = encode_multipart(parts)
    boundary = content_type.split("boundary=")[1].encode()
    buffer = mmap.mmap(-1, len(body))
    buffer[:] = body
    hasher = PartHasher(PartFollower(buffer, boundary, {LABEL: upload}))
    hasher.advance(len(body))
    assert LABEL in hasher.finish().values()
    buffer.close()


def parts_or_error(content_type: str, body: bytes, digests=None):
    try:
        return [(p.name, p.content_type, bytes(p.data)) for p in decode_multipart(content_type, body, digests)]
    except ValueError as error:
        return type(error)


@pytest.mark.parametrize("seed", range(60))
def test_the_decoder_reads_any_body_the_same_with_the_followers_findings_as_without(seed):
    """What the follower found changes how much the decoder searches, never what it reads:
    the same parts, or the same refusal, for well-formed and mangled bodies alike."""
    rng = random.Random(1000 + seed)
    body, boundary, _ = well_formed(rng, [rng.randrange(4000) for _ in range(rng.randrange(1, 4))])
    data = mangled(rng, body, boundary, rng.randrange(0, 6))
    content_type = f"multipart/form-data; boundary={boundary.decode()}"
    digests = follow(data, boundary, random_cuts(rng, len(data), rng.randrange(20)))
    assert parts_or_error(content_type, data, digests) == parts_or_error(content_type, data)
    if not isinstance(parts_or_error(content_type, data), type):
        for part in decode_multipart(content_type, data, digests):
            assert part.sha256 in (None, hashlib.sha256(part.data).hexdigest())
