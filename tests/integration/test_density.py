"""Density (issue 23), CI-sized: a few hundred idle sandboxes held at once all answer, all
delete, and nothing is left behind; the sandbox cap is the server's option and is answered
with 429. Figures (memory per sandbox, slab, create and delete rates) are bench/density.py's;
nothing here asserts a time."""

import os
import random

from harness import assert_no_leaks, delete_concurrently

COUNT = int(os.environ.get("BULKHEAD_DENSITY_COUNT", "300"))


def test_hundreds_of_idle_sandboxes_all_answer_and_all_delete(daemon_factory):
    daemon = daemon_factory()
    daemon.extra_args = ("--max-sandboxes", str(COUNT))
    daemon.start()
    client = daemon.client()
    ids = [client.create(memory_mb=64)["id"] for _ in range(COUNT)]
    assert len(set(ids)) == COUNT
    listed = {s["id"] for s in client.list()}
    assert listed == set(ids)
    # Every one runs a command, each its own (its hostname is its id).
    for sandbox_id in ids:
        r = client.exec(sandbox_id, ["cat", "/proc/sys/kernel/hostname"])
        assert r["exit_code"] == 0, r
    # The cap: one more is refused, with what to change.
    r = client.post("/v1/sandboxes", {})
    assert r.status == 429 and "--max-sandboxes" in r.json()["error"]["message"], r
    r = client.post(f"/v1/sandboxes/{ids[0]}/fork", {"count": 1})
    assert r.status == 429, r

    # Deleted from several clients at once: all go, nothing is left.
    random.shuffle(ids)
    failures = delete_concurrently(daemon, ids)
    assert failures == []
    assert client.list() == []
    assert_no_leaks(daemon, timeout=30)
    # Room again after the deletes.
    client.remove(client.create()["id"])
