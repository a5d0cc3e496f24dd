"""The audit trail (issue 24): every call that changed something, and every refused key, on
record before it is answered, hash-chained, readable through GET /v1/audit and the CLI."""

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from urllib.parse import urlencode

from harness import BULKHEAD, Client, WebSocket, files_url


def audit(client, page_size=1000, after=0, **query) -> list[dict]:
    """Every record after `after` that passes the filter, page by page."""
    records = []
    while True:
        target = "/v1/audit?" + urlencode({**query, "after": after, "limit": page_size})
        r = client.get(target)
        assert r.status == 200, (target, r)
        page = r.json()
        records += page["records"]
        if page["next"] is None:
            return records
        assert page["next"] == page["records"][-1]["seq"]
        after = page["next"]


def cli(daemon, *args, state_dir=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(state_dir or daemon.state_dir)
    return subprocess.run([str(BULKHEAD), *args], env=env, capture_output=True, text=True, timeout=120)


def test_changes_are_recorded_with_who_what_and_the_outcome_and_reads_are_not(client, sandbox_factory):
    sandbox_id = sandbox_factory()["id"]
    assert client.exec(sandbox_id, ["sh", "-c", "echo audited"])["stdout"] == "audited\n"
    assert client.request("PUT", files_url(sandbox_id, path="/workspace/a.txt"), b"x").status in (200, 201, 204)
    assert client.get(files_url(sandbox_id, path="/workspace/a.txt")).status == 200
    assert client.get(f"/v1/sandboxes/{sandbox_id}").status == 200
    assert client.delete(files_url(sandbox_id, path="/workspace/a.txt")).status == 204
    assert client.delete(f"/v1/sandboxes/{sandbox_id}").status == 204

    records = audit(client, page_size=2, target=sandbox_id)
    actions = [(r["action"], r["outcome"]) for r in records]
    assert actions == [("POST /v1/sandboxes/{id}/exec", 200), ("PUT /v1/sandboxes/{id}/files", actions[1][1]),
                       ("DELETE /v1/sandboxes/{id}/files", 204), ("DELETE /v1/sandboxes/{id}", 204)], actions
    exec_record, write_record = records[0], records[1]
    assert exec_record["detail"]["cmd"] == ["sh", "-c", "echo audited"]
    assert write_record["detail"]["path"] == "/workspace/a.txt"
    assert all(r["key"] == "admin" and r["source"] == "127.0.0.1" and r["time"].endswith("Z") for r in records)
    # The create names what it made.
    created = [r for r in audit(client, action="POST /v1/sandboxes") if r.get("detail", {}).get("created") == sandbox_id]
    assert len(created) == 1 and created[0]["outcome"] == 201, created
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)


def test_a_websocket_into_a_sandbox_is_recorded_though_it_is_a_get(client, sandbox_factory):
    """An attach opens a process's stdin; the upgrade is on record with its outcome."""
    sandbox_id = sandbox_factory()["id"]
    r = client.post(f"/v1/sandboxes/{sandbox_id}/processes", {"cmd": ["sleep", "30"]})
    assert r.status == 201, r
    pid = r.json()["pid"]
    ws = WebSocket.connect(client, f"/v1/sandboxes/{sandbox_id}/processes/{pid}/attach")
    ws.close()
    records = audit(client, target=sandbox_id, action="GET /v1/sandboxes/{id}/processes/{pid}/attach")
    assert [(r["outcome"], r["detail"].get("pid")) for r in records] == [(101, str(pid))], records
    # Plain reads stay off the record.
    assert client.get(f"/v1/sandboxes/{sandbox_id}/processes").status == 200
    assert not audit(client, target=sandbox_id, action="GET /v1/sandboxes/{id}/processes")


def test_a_refused_key_is_recorded_and_gets_nothing(daemon_factory):
    # (A daemon of its own: past 20 refusals a minute from one address they are counted.)
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    wrong = Client(f"wrong-{uuid.uuid4().hex}", port=daemon.port)
    assert wrong.get("/v1/sandboxes").status == 401
    assert wrong.post("/v1/volumes?note=chosen-by-the-client", {"name": "never"}).status == 401
    refused = [r for r in audit(client) if r["outcome"] == 401][-2:]
    assert [(r["action"], r["key"]) for r in refused] == [("GET /v1/sandboxes", ""), ("POST /v1/volumes", "")]
    assert "chosen-by-the-client" not in json.dumps(refused)  # nothing it sent is kept
    # and the refused key cannot read the record of its refusal
    assert wrong.get("/v1/audit").status == 401
    daemon.stop()


def test_a_flood_of_refused_keys_is_counted_not_written_one_by_one(daemon_factory):
    """20 refusals a minute from one address get a record each; the rest are counted, and the
    count is one record when the minute ends (or the daemon stops)."""
    daemon = daemon_factory()
    daemon.start()
    wrong = Client("wrong-key", port=daemon.port)
    for _ in range(25):
        assert wrong.get("/v1/sandboxes").status == 401
    client = daemon.client()
    assert len([r for r in audit(client) if r["outcome"] == 401]) == 20
    daemon.stop()
    daemon.start()
    client = daemon.client()
    counted = audit(client, action="refused keys")
    assert [(r["source"], r["outcome"], r["detail"]["refusals"]) for r in counted] == [("127.0.0.1", 401, 5)], counted
    assert cli(daemon, "audit", "verify").returncode == 0  # the count is a link of the chain
    daemon.stop()


def test_bad_filters_are_refused_by_name(client):
    for query, word in (("limit=0", "limit"), ("limit=5000", "limit"), ("after=-1", "after"),
                        ("since=yesterday", "since"), ("colour=red", "colour")):
        r = client.get(f"/v1/audit?{query}")
        assert r.status == 422 and word in r.json()["error"]["message"], (query, r)


def test_verify_finds_an_edited_removed_or_reordered_record_and_a_cut_end(daemon, client, tmp_path):
    for name in ("audit-a", "audit-b", "audit-c"):
        client.post("/v1/volumes", {"name": name, "size_mb": 16})
        client.delete(f"/v1/volumes/{name}")
    ok = cli(daemon, "audit", "verify")
    assert ok.returncode == 0, ok
    head = ok.stdout.split("head ")[1].strip()
    seq, digest = head.split(":")
    assert int(seq) >= 6 and len(digest) == 64
    exported = cli(daemon, "audit", "export")
    assert exported.returncode == 0, exported
    lines = exported.stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(lines) + 1))

    original = (daemon.state_dir / "audit.log").read_text().splitlines()
    original = original[:int(seq)]  # what the head covers (more may have come since)
    volume = next(i for i, line in enumerate(original) if '"audit-b"' in line)

    def verdict(lines, *args):
        state = tmp_path / uuid.uuid4().hex[:8]
        state.mkdir()
        (state / "audit.log").write_text("".join(line + "\n" for line in lines))
        return cli(daemon, "audit", "verify", *args, state_dir=state)

    edited = list(original)
    edited[volume] = edited[volume].replace('"audit-b"', '"audit-x"')
    removed = original[:volume] + original[volume + 1:]
    reordered = list(original)
    reordered[volume], reordered[volume + 1] = reordered[volume + 1], reordered[volume]
    for lines, problem in ((edited, "does not match its hash"), (removed, "was due"), (reordered, "was due")):
        r = verdict(lines)
        assert r.returncode == 1 and problem in r.stderr, r
    assert verdict(original[:-1]).returncode == 0  # a shorter chain holds...
    cut = verdict(original[:-1], "--head", head)
    assert cut.returncode == 1 and "cut off" in cut.stderr, cut  # ...but not against the head kept


def test_a_sigkill_during_a_burst_keeps_every_answered_call(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    sandbox_id = client.create()["id"]
    answered, stop = [], threading.Event()

    def burst(worker):
        mine = daemon.client(timeout=30)
        for n in range(10_000):
            if stop.is_set():
                return
            try:
                r = mine.post(f"/v1/sandboxes/{sandbox_id}/exec", {"cmd": ["true", f"{worker}-{n}"]})
            except OSError:
                return
            if r.status == 200:
                answered.append(f"{worker}-{n}")

    workers = [threading.Thread(target=burst, args=(w,)) for w in range(4)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while len(answered) < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(answered) >= 40, "the burst did not get going"
    daemon.stop(signal.SIGKILL)
    stop.set()
    for w in workers:
        w.join(timeout=60)
    recorded = set()
    for line in (daemon.state_dir / "audit.log").read_text().splitlines():
        record = json.loads(line)
        if record["action"] == "POST /v1/sandboxes/{id}/exec":
            recorded.add(record["detail"]["cmd"][1])
    assert set(answered) <= recorded, sorted(set(answered) - recorded)[:5]
    assert cli(daemon, "audit", "verify").returncode == 0
    # The next daemon goes on with the same chain.
    daemon.start()
    client = daemon.client()
    client.delete(f"/v1/sandboxes/{sandbox_id}")
    r = cli(daemon, "audit", "verify")
    assert r.returncode == 0, r


def test_the_e2b_fronts_calls_are_recorded_too(daemon, client):
    from test_e2b_control_plane import E2b
    e2b = E2b(daemon)
    before = max([0] + [r["seq"] for r in audit(client)])
    sandbox_id = e2b.create()["sandboxID"]
    assert E2b(daemon, key="e2b_wrong").request("POST", "/v2/sandboxes", {"templateID": "base"}).status == 401
    assert e2b.request("DELETE", f"/sandboxes/{sandbox_id}").status == 204
    records = audit(client, after=before)
    mine = [(r["action"], r["key"], r["outcome"]) for r in records if r["action"].startswith("e2b ")]
    assert ("e2b POST /v2/sandboxes", "e2b", 201) in mine, mine
    assert ("e2b POST /v2/sandboxes", "", 401) in mine, mine
    assert (f"e2b DELETE /sandboxes/{sandbox_id}", "e2b", 204) in mine, mine

