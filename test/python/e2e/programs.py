"""Small builders shared by the end-to-end tests: one-function programs, raw multipart reading.

Not a test module: it holds what several test files need to say briefly, so each test
reads as the request it makes and the answer it expects.
"""

from __future__ import annotations

import json
from typing import Any

from kcoral import Program



def call(source: str, name: str, *args: Any, key: str | None = "out") -> Program:
    """Upload ``source`` as module ``m``, run ``name(*args)`` as ``r``, return it as ``key``."""
    program = Program()
    module = program.upload(id="m", kind="module", source=source)
    function = program.get_function(id="f", module=module, name=name)
    value = program.run(id="r", fn=function, args=list(args))
    if key is not None:
        program.return_(key=key, value=value)
    return program


def split_multipart(content_type: str, body: bytes) -> list[tuple[str, str, bytes]]:
    """(name, content type, data) of each part of a multipart/form-data response body.

    Written here rather than taken from the client, so that a fault in the client's own
    decoder cannot hide one in the server's encoder.
    """
    boundary = content_type.split("boundary=", 1)[1].strip().strip('"')
    delimiter = b"--" + boundary.encode()
    assert body.startswith(delimiter + b"\r\n"), body[:100]
    assert body.endswith(delimiter + b"--\r\n"), body[-100:]
    chunks = body[len(delimiter) + 2: -len(delimiter) - 4].split(b"\r\n" + delimiter + b"\r\n")
    chunks[-1] = chunks[-1].removesuffix(b"\r\n")
    parts = []
    for chunk in chunks:
        head, _, data = chunk.partition(b"\r\n\r\n")
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        name = headers["Content-Disposition"].split('name="', 1)[1].rstrip('"')
        parts.append((name, headers["Content-Type"], data))
    return parts


def response_document(response: Any) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(the JSON document, binary parts by name) of a raw 200 /execute response."""
    assert response.status_code == 200, response.text
    content_type = response.headers["content-type"]
    if content_type.startswith("application/json"):
        document, parts = json.loads(response.content), {}
    else:
        split = split_multipart(content_type, response.content)
        name, part_type, data = split[0]
        assert (name, part_type) == ("result", "application/json")
        for _, other_type, _ in split[1:]:
            assert other_type == "application/octet-stream"
        document, parts = json.loads(data), {name: data for name, _, data in split[1:]}
    return document, parts
