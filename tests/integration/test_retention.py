"""Retention (issue 24): egress records older than --egress-keep-days are removed (at start,
then hourly) while newer ones stay; a deleted sandbox's egress log, files and layer go with it
at once (test_tenants.py's purge checks the database and the files)."""
import sqlite3
import time


def test_egress_records_past_the_retention_period_are_removed(daemon_factory):
    daemon = daemon_factory()
    daemon.extra_args = ("--egress-keep-days", "1")
    daemon.start()
    client = daemon.client()
    sandbox = client.create(network={"mode": "allowlist", "allow": ["allowed.test"]}, timeout=0)["id"]
    client.exec(sandbox, "curl -s -m 5 http://blocked.test/ >/dev/null; true")  # (the proxy refuses it)
    daemon.stop()
    db = sqlite3.connect(str(daemon.state_dir / "bulkhead.db"))
    two_days_ago = int(time.time() * 1000) - 2 * 24 * 3600 * 1000
    db.execute("INSERT INTO egress (sandbox_id, time_ms, protocol, name, address, port, query_type, allowed, reason) "
               "VALUES (?, ?, 'http', 'old.test', '', 80, '', 0, 'a record from two days ago')", (sandbox, two_days_ago))
    db.commit()
    db.close()
    daemon.start()
    client = daemon.client()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        names = [e["name"] for e in client.get(f"/v1/sandboxes/{sandbox}/egress").json()["entries"]]
        if "old.test" not in names:
            break
        time.sleep(0.2)
    assert "old.test" not in names and "blocked.test" in names, names
    assert "older than 1 days" in daemon.log_tail(200)
    client.remove(sandbox)
