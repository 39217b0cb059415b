"""Many programs at once: 8 threads, several programs each, on the 4-worker shared server.

Every program carries its own token in a literal argument, a tensor and a file; its
result, stdout and stderr must hold exactly its own token, whichever worker ran it and
whatever ran beside it. Half the threads share one Client, which its docs allow.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from kcoral import Program


THREADS = 8
PROGRAMS_PER_THREAD = 4

SOURCE = r'''
import os, sys, time

def work(token, tensor, path):
    print(token, flush=True)
    print(token, file=sys.stderr, flush=True)
    time.sleep(0.05)
    os.system(f"echo {token}-shell")
    return {"token": token, "sum": int(tensor.sum()), "file": open(path).read(),
            "cwd_entries": sorted(os.listdir("."))}
'''


def token_program(token: str, seed: int) -> tuple[Program, int]:
    values = np.arange(seed, seed + 1000, dtype=np.int64)
    program = Program()
    module = program.upload(id="m", kind="module", source=SOURCE)
    tensor = program.upload(id="t", kind="tensor", value=values)
    path = program.upload_file(id="p", blob=token.encode(), path=f"tokens/{token}.txt")
    work = program.get_function(id="work", module=module, name="work")
    program.return_(key="out", value=program.run(id="r", fn=work, args=[token, tensor, path]))
    return program, int(values.sum())


def test_concurrent_programs_do_not_cross_talk(server):
    shared = server.client()
    lock = threading.Lock()
    seen_ids: list[str] = []

    def thread(index: int) -> int:
        own = server.client() if index % 2 else None
        client = own or shared
        try:
            for n in range(PROGRAMS_PER_THREAD):
                token = f"t{index}-{n}-{uuid.uuid4().hex[:8]}"
                program, expected_sum = token_program(token, index * 1000 + n)
                result = client.execute(program)
                assert result.completed, result.error
                assert result["out"] == {"token": token, "sum": expected_sum, "file": token,
                                         "cwd_entries": ["tokens"]}
                assert result.stdout == f"{token}\n{token}-shell\n"
                assert result.stderr == f"{token}\n"
                with lock:
                    seen_ids.append(result.request_id)
            return PROGRAMS_PER_THREAD
        finally:
            if own is not None:
                own.close()

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            done = sum(pool.map(thread, range(THREADS)))
    finally:
        shared.close()
    assert done == THREADS * PROGRAMS_PER_THREAD
    assert len(set(seen_ids)) == done
    health = server.get("/health").json()
    assert health["load"]["requests_in_progress"] == 0
    assert health["load"]["requests_waiting"] == 0
