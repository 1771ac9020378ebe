"""Request ids: random (never a count a shared backend could read load from), unique, and a forked
worker never repeats its parent's."""

from __future__ import annotations

import os
import re

from kvfence.gateway.proxy import _request_ids


def test_ids_are_random_hex_and_unique_across_pool_refills() -> None:
    ids = [_request_ids.next() for _ in range(2000)]  # several 4 KiB refills
    assert all(re.fullmatch(r"gwreq-[0-9a-f]{20}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    numbers = [int(i[6:], 16) for i in ids[:50]]
    assert numbers != sorted(numbers)  # not a counter


def test_a_forked_child_does_not_reuse_its_parents_bits() -> None:
    _request_ids.next()  # the parent has a pool drawn
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        try:
            os.write(write, _request_ids.next().encode())
        finally:
            os._exit(0)
    os.close(write)
    child_id = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert re.fullmatch(r"gwreq-[0-9a-f]{20}", child_id)
    assert child_id != _request_ids.next()  # the parent's next is not what the child drew
