"""Sandbox lifecycle through the HTTP API: create, get, list, timeout, delete, expiry."""

import time
import uuid
from datetime import datetime, timezone

from harness import assert_error_shape, wait_until

SANDBOX_FIELDS = {"id", "state", "image", "runtime", "created_at", "expires_at", "cpus", "memory_mb",
                  "disk_mb", "pids", "network", "metadata", "workdir", "parent_snapshot"}


def parse_time(text: str) -> datetime:
    assert text.endswith("Z"), f"not RFC 3339 UTC: {text}"
    value = datetime.fromisoformat(text)
    assert value.tzinfo is not None and value.utcoffset().total_seconds() == 0
    return value


def now() -> datetime:
    return datetime.now(timezone.utc)


def test_create_with_defaults_returns_documented_sandbox(client, sandbox_factory):
    before = now().replace(microsecond=0)
    sandbox = sandbox_factory()
    after = now()
    assert SANDBOX_FIELDS <= sandbox.keys(), f"missing: {SANDBOX_FIELDS - sandbox.keys()}"
    assert isinstance(sandbox["id"], str) and len(sandbox["id"]) >= 8
    assert sandbox["state"] == "running"
    assert sandbox["image"] == "host"
    assert sandbox["runtime"] == "native"
    assert sandbox["cpus"] == 1.0
    assert sandbox["memory_mb"] == 1024
    assert sandbox["disk_mb"] == 2048
    assert sandbox["pids"] == 512
    assert sandbox["network"] == {"mode": "none", "allow": [], "deny": []}
    assert sandbox["metadata"] == {}
    assert sandbox["workdir"] == "/workspace"
    assert sandbox["parent_snapshot"] is None
    created = parse_time(sandbox["created_at"])
    assert before.timestamp() - 1 <= created.timestamp() <= after.timestamp() + 1
    # Default lifetime is 300 s.
    lifetime = parse_time(sandbox["expires_at"]) - created
    assert abs(lifetime.total_seconds() - 300) <= 2, sandbox


def test_create_with_limits_keeps_them(client, sandbox_factory):
    spec = dict(cpus=0.5, memory_mb=256, disk_mb=128, pids=64, timeout_s=120,
                env={"GREETING": "hi"}, workdir="/tmp", metadata={"team": "it", "run": "1"})
    sandbox = sandbox_factory(**spec)
    for key in ("cpus", "memory_mb", "disk_mb", "pids", "workdir", "metadata"):
        assert sandbox[key] == spec[key], (key, sandbox)
    lifetime = parse_time(sandbox["expires_at"]) - parse_time(sandbox["created_at"])
    assert abs(lifetime.total_seconds() - 120) <= 2
    # The same values come back from GET, and the sandbox really uses them.
    fetched = client.sandbox(sandbox["id"])
    for key in ("cpus", "memory_mb", "disk_mb", "pids", "workdir", "metadata"):
        assert fetched[key] == spec[key], (key, fetched)
    assert client.sh(sandbox["id"], "pwd; echo $GREETING") == "/tmp\nhi\n"


def test_get_returns_sandbox_with_usage(client, sandbox):
    client.sh(sandbox, "head -c 3000000 /dev/urandom > /workspace/blob && sync")
    fetched = client.sandbox(sandbox)
    assert fetched["id"] == sandbox
    assert SANDBOX_FIELDS <= fetched.keys()
    usage = fetched.get("usage")
    assert isinstance(usage, dict), fetched
    for key in ("cpu_s", "memory_bytes", "disk_bytes", "pids"):
        assert isinstance(usage.get(key), (int, float)) and usage[key] >= 0, (key, usage)
    assert usage["cpu_s"] > 0
    assert usage["memory_bytes"] > 0
    assert usage["pids"] >= 1  # at least its init
    assert usage["disk_bytes"] >= 2_000_000, usage  # the 3 MB blob we wrote


def test_list_filters_by_state_and_metadata(client, sandbox_factory):
    tag = uuid.uuid4().hex[:12]
    a = sandbox_factory(metadata={"suite": tag, "role": "a"})["id"]
    b = sandbox_factory(metadata={"suite": tag, "role": "b"})["id"]
    other = sandbox_factory(metadata={"suite": "other-" + tag})["id"]

    all_ids = {s["id"] for s in client.list()}
    assert {a, b, other} <= all_ids

    running = client.list("state=running")
    assert {a, b, other} <= {s["id"] for s in running}
    assert all(s["state"] == "running" for s in running)
    assert not {a, b, other} & {s["id"] for s in client.list("state=paused")}

    assert {s["id"] for s in client.list(f"metadata.suite={tag}")} == {a, b}
    assert {s["id"] for s in client.list(f"metadata.suite={tag}&metadata.role=b")} == {b}
    assert {s["id"] for s in client.list(f"state=running&metadata.role=a&metadata.suite={tag}")} == {a}
    assert client.list(f"metadata.suite=nothing-{tag}") == []


def test_set_timeout_moves_expires_at(client, sandbox_factory):
    sandbox = sandbox_factory(timeout_s=60)
    old_expiry = parse_time(sandbox["expires_at"])
    r = client.post(f"/v1/sandboxes/{sandbox['id']}/timeout", {"timeout_s": 900})
    assert r.status == 200, r
    updated = r.json()
    assert updated["id"] == sandbox["id"]
    new_expiry = parse_time(updated["expires_at"])
    assert new_expiry > old_expiry
    assert abs((new_expiry - now()).total_seconds() - 900) <= 5, updated
    assert parse_time(client.sandbox(sandbox["id"])["expires_at"]) == new_expiry


def test_delete_answers_204_then_404(client, sandbox_factory):
    sandbox_id = sandbox_factory()["id"]
    r = client.delete(f"/v1/sandboxes/{sandbox_id}")
    assert r.status == 204, r
    assert r.body == b""
    assert_error_shape(client.get(f"/v1/sandboxes/{sandbox_id}"), 404)
    assert_error_shape(client.delete(f"/v1/sandboxes/{sandbox_id}"), 404)
    assert_error_shape(client.exec_raw(sandbox_id, ["true"]), 404)
    assert sandbox_id not in {s["id"] for s in client.list()}


def test_sandbox_with_short_timeout_disappears_by_itself(client, sandbox_factory):
    started = time.monotonic()
    sandbox_id = sandbox_factory(timeout_s=2)["id"]
    assert client.sh(sandbox_id, "echo alive") == "alive\n"
    gone = wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}").status == 404, timeout=6, interval=0.2)
    elapsed = time.monotonic() - started
    assert gone, f"sandbox still there {elapsed:.1f}s after creation with timeout_s=2"
    assert sandbox_id not in {s["id"] for s in client.list()}


def test_sandbox_lives_at_least_its_timeout(client, sandbox_factory):
    # Create late in a wall-clock second: a lifetime counted from the second's start
    # (whole-second arithmetic) would then end ~0.7 s early; a correct one does not.
    wait_until(lambda: 0.70 <= time.time() % 1 <= 0.75, timeout=2, interval=0.005)
    started = time.monotonic()
    sandbox_id = sandbox_factory(timeout_s=2)["id"]
    time.sleep(max(0.0, started + 1.75 - time.monotonic()))
    r = client.get(f"/v1/sandboxes/{sandbox_id}")
    assert r.status == 200, f"sandbox with timeout_s=2 was gone after {time.monotonic() - started:.2f}s: {r!r}"
    gone = wait_until(lambda: client.get(f"/v1/sandboxes/{sandbox_id}").status == 404, timeout=4, interval=0.1)
    assert gone


def test_a_workdir_of_its_own_is_made_and_used(client, sandbox_factory):
    sandbox = sandbox_factory(workdir="/work/deep/dir")
    r = client.exec(sandbox["id"], "pwd")
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "/work/deep/dir\n"
    # relative file paths resolve against it
    assert client.request("PUT", f"/v1/sandboxes/{sandbox['id']}/files?path=note.txt", b"hi").status == 201
    assert client.sh(sandbox["id"], "cat /work/deep/dir/note.txt") == "hi"


def test_a_workdir_that_cannot_be_made_fails_the_create(client):
    before = {s["id"] for s in client.list()}
    r = client.post("/v1/sandboxes", {"workdir": "/usr/cannot-be-here"})
    assert_error_shape(r, 422)
    assert r.json()["error"]["code"] == "invalid_workdir"
    assert {s["id"] for s in client.list()} == before
