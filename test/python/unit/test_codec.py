"""Strict JSON, multipart/form-data framing and SHA-256 names."""

import hashlib
import math
import sys

import pytest

from kcoral import _codec
from kcoral._codec import (
    Part,
    decode_multipart,
    dumps_json,
    encode_multipart,
    is_sha256_hex,
    json_copy,
    loads_json,
    parse_header_value,
    sha256_hex,
)


def test_sha256_hex():
    assert sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()
    assert is_sha256_hex(sha256_hex(b""))
    assert not is_sha256_hex(sha256_hex(b"").upper())
    assert not is_sha256_hex("ab" * 31)
    assert not is_sha256_hex(None)


def test_strict_json_accepts_plain_documents():
    assert loads_json(b'{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert loads_json('"\u00e9"') == "\u00e9"


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"outer": {"k": 1, "k": 1}}',
        '{"a": NaN}',
        "[Infinity]",
        "[-Infinity]",
        '{"a": 1} trailing',
        "{'a': 1}",
        b'"\xff"',
    ],
)
def test_strict_json_rejects(text):
    with pytest.raises(ValueError):
        loads_json(text)


def test_dumps_json_is_compact_utf8_and_finite():
    assert dumps_json({"a": [1, "\u00e9"]}) == '{"a":[1,"\u00e9"]}'.encode()
    with pytest.raises(ValueError):
        dumps_json({"a": math.nan})


def test_json_copy_snapshots_and_normalizes():
    inner = [1, 2]
    original = {"t": (1, 2.5), "l": inner, "b": True, "n": None}
    copied = json_copy(original, "arg")
    inner.append(3)
    assert copied == {"t": [1, 2.5], "l": [1, 2], "b": True, "n": None}
    assert type(json_copy(True, "arg")) is bool


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (math.inf, ValueError),
        ({1: "x"}, TypeError),
        ({1, 2}, TypeError),
        (b"bytes", TypeError),
        (object(), TypeError),
    ],
)
def test_json_copy_rejects(value, error):
    with pytest.raises(error):
        json_copy([value], "arg")


def test_json_copy_rejects_cycles():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="contains itself"):
        json_copy(cycle, "arg")


def test_parse_header_value():
    assert parse_header_value('Multipart/Form-Data; boundary="a b\\"c"; x=1') == (
        "multipart/form-data",
        {"boundary": 'a b"c', "x": "1"},
    )
    assert parse_header_value("application/json") == ("application/json", {})
    with pytest.raises(ValueError):
        parse_header_value("text/plain; =broken")


def test_multipart_round_trip_with_awkward_payloads():
    parts = [
        Part("program", "application/json", b'{"instructions":[]}'),
        Part("blob:x", "application/octet-stream", b"\r\n--not-a-boundary\r\n\x00\xff"),
        Part("empty", "application/octet-stream", b""),
        Part("crlf", "application/octet-stream", b"\r\n"),
    ]
    content_type, body = encode_multipart(parts)
    assert content_type.startswith("multipart/form-data; boundary=")
    assert decode_multipart(content_type, body) == parts


def test_boundary_never_occurs_in_a_payload(monkeypatch):
    colliding = "0" * 32
    tokens = iter([colliding, "1" * 32])
    monkeypatch.setattr(_codec.secrets, "token_hex", lambda n: next(tokens))
    payload = f"kcoral-{colliding}".encode()
    content_type, body = encode_multipart([Part("a", "application/octet-stream", payload)])
    assert content_type.endswith("kcoral-" + "1" * 32)
    assert decode_multipart(content_type, body)[0].data == payload


def test_decode_tolerates_preamble_epilogue_and_quoted_boundary():
    body = (
        b"preamble\r\n--b\r\n"
        b'Content-Disposition: form-data; name="result"\r\n'
        b"Content-Type: application/json\r\n\r\n{}\r\n--b--\r\nepilogue"
    )
    (part,) = decode_multipart('multipart/form-data; boundary="b"', body)
    assert part == Part("result", "application/json", b"{}")


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b"{}"),
        ("multipart/form-data", b"--b\r\n"),
        ("multipart/form-data; boundary=b", b"no boundary here"),
        ("multipart/form-data; boundary=b", b"--b--\r\n"),
        ("multipart/form-data; boundary=b", b"--b\r\nContent-Type: a/b\r\n\r\nx\r\n--b--"),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\nx\r\n--b--',
        ),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="a"\r\nContent-Type: a/b\r\n\r\nx',
        ),
        (
            "multipart/form-data; boundary=b",
            b'--b\r\nContent-Disposition: form-data; name="a"\r\nContent-Type: a/b\r\n'
            b"Content-Transfer-Encoding: base64\r\n\r\neA==\r\n--b--",
        ),
    ],
)
def test_decode_rejects_malformed_bodies(content_type, body):
    with pytest.raises(ValueError):
        decode_multipart(content_type, body)


def test_encode_rejects_unsafe_part_names():
    with pytest.raises(ValueError):
        encode_multipart([Part('a"b', "application/json", b"")])


def test_deeply_nested_json_is_a_value_error():
    with pytest.raises(ValueError, match="nested"):
        loads_json("[" * 100_000 + "]" * 100_000)


def test_numbers_beyond_a_float_are_value_errors():
    for text in ("1e400", "[-1e400]", '{"a": 1.5e999}'):
        with pytest.raises(ValueError, match="beyond a float"):
            loads_json(text)
    assert loads_json("1.7976931348623157e308") == 1.7976931348623157e308


def test_integers_past_the_clients_digit_limit_are_value_errors_whatever_the_process_allows():
    limit = _codec.MAX_JSON_INTEGER_DIGITS
    assert loads_json("-" + "9" * limit) == -int("9" * limit)
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # a process that lifted Python's own limit
    try:
        with pytest.raises(ValueError, match=f"{limit + 1} digits \\(more than {limit}\\)"):
            loads_json("[1" + "0" * limit + "]")
    finally:
        sys.set_int_max_str_digits(before)
    assert sys.get_int_max_str_digits() == before


def test_shown_values_are_short_whatever_their_size_or_depth():
    assert len(_codec.shown("x" * 1_000_000)) < 100
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    assert _codec.shown(nested).startswith("[[")
