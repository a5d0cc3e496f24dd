"""Tenants' quotas (issue 24): a call that would take a tenant past a quota answers 429
"quota_exceeded" naming it, and leaves nothing half-made; concurrent creates cannot pass a quota
together; stopped sandboxes free their running share and starting one again is checked; usage
and quotas are in the API and in /metrics, and survive a restart."""
import json
import re
import threading
import uuid

from harness import Client
from test_tenants import cli, new_key


def tenant_with(admin: Client, **quotas) -> tuple[str, Client]:
    name = f"q-{uuid.uuid4().hex[:10]}"
    r = admin.post("/v1/tenants", {"name": name, "quotas": quotas})
    assert r.status == 201, r
    assert r.json()["quotas"] == quotas, r
    client, _ = new_key(admin, name, "tenant-admin")
    return name, client


def refused(r, quota: str):
    assert r.status == 429, r
    error = r.json()["error"]
    assert error["code"] == "quota_exceeded" and f'"{quota}"' in error["message"], error


def usage(client: Client, tenant: str) -> dict:
    r = client.get(f"/v1/tenants/{tenant}")
    assert r.status == 200, r
    return r.json()["usage"]


def cleanup(admin: Client, tenant: str):
    for sandbox in admin.list():
        if sandbox["tenant"] == tenant:
            admin.delete(f"/v1/sandboxes/{sandbox['id']}")
    for snapshot in admin.get("/v1/snapshots").json()["snapshots"]:
        if snapshot["tenant"] == tenant:
            admin.delete(f"/v1/snapshots/{snapshot['id']}")
    for volume in admin.get(f"/v1/volumes?tenant={tenant}").json()["volumes"]:
        admin.delete(f"/v1/volumes/{volume['name']}?tenant={tenant}")
    assert admin.delete(f"/v1/tenants/{tenant}").status == 204


def test_running_sandboxes_quota_counts_what_runs_and_checks_creates_and_starts(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, sandboxes=2)
    try:
        first = client.create()["id"]
        client.create()
        refused(client.post("/v1/sandboxes", {}), "sandboxes")
        assert len(client.list()) == 2
        assert usage(client, tenant)["sandboxes"] == 2
        # A paused sandbox holds its memory: still counted. A stopped one is not.
        assert client.post(f"/v1/sandboxes/{first}/pause").status == 200
        refused(client.post("/v1/sandboxes", {}), "sandboxes")
        assert client.post(f"/v1/sandboxes/{first}/stop").status == 200
        third = client.create()["id"]
        # Starting the stopped one again would make three.
        refused(client.post(f"/v1/sandboxes/{first}/start"), "sandboxes")
        assert client.sandbox(first)["state"] == "stopped"
        client.remove(third)
        assert client.post(f"/v1/sandboxes/{first}/start").status == 200
        assert client.sh(first, "echo up") == "up\n"
        # The host's own key is not the tenant's: no quota of it holds for the admin.
        admin.remove(admin.create()["id"])
    finally:
        cleanup(admin, tenant)


def test_cpu_memory_and_disk_quotas_sum_the_limits_of_the_tenants_sandboxes(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, cpus=1.5, memory_mb=1536, disk_mb=3000)
    try:
        client.create(cpus=1, memory_mb=512, disk_mb=1024)
        refused(client.post("/v1/sandboxes", {"cpus": 1, "memory_mb": 256, "disk_mb": 256}), "cpus")
        refused(client.post("/v1/sandboxes", {"cpus": 0.5, "memory_mb": 1100, "disk_mb": 256}), "memory_mb")
        refused(client.post("/v1/sandboxes", {"cpus": 0.5, "memory_mb": 256, "disk_mb": 2048}), "disk_mb")
        client.create(cpus=0.5, memory_mb=1024, disk_mb=1976)
        held = usage(client, tenant)
        assert held["cpus"] == 1.5 and held["memory_mb"] == 1536 and held["disk_mb"] == 3000, held
        assert len(client.list()) == 2
    finally:
        cleanup(admin, tenant)


def test_concurrent_creates_cannot_pass_a_quota_together(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, sandboxes=3)
    try:
        answers = []
        barrier = threading.Barrier(8)

        def create():
            barrier.wait()
            answers.append(client.post("/v1/sandboxes", {}))

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        made = [r for r in answers if r.status == 201]
        for r in answers:
            if r.status != 201:
                refused(r, "sandboxes")
        assert 1 <= len(made) <= 3, answers
        # Exactly what was answered 201 exists: no sandbox half-made by a refused create.
        assert sorted(s["id"] for s in admin.list() if s["tenant"] == tenant) == sorted(r.json()["id"] for r in made)
        assert usage(client, tenant)["sandboxes"] == len(made)
    finally:
        cleanup(admin, tenant)


def test_a_fork_past_the_quota_makes_no_copy(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, sandboxes=2)
    try:
        parent = client.create()["id"]
        snapshots_before = admin.get("/v1/snapshots").json()["snapshots"]
        refused(client.post(f"/v1/sandboxes/{parent}/fork", {"count": 2}), "sandboxes")
        assert [s["id"] for s in client.list()] == [parent]
        assert admin.get("/v1/snapshots").json()["snapshots"] == snapshots_before
        r = client.post(f"/v1/sandboxes/{parent}/fork", {"count": 1})
        assert r.status == 201, r
    finally:
        cleanup(admin, tenant)


def test_snapshot_quotas_count_them_and_their_bytes(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, snapshots=1)
    try:
        sandbox = client.create()["id"]
        assert client.post(f"/v1/sandboxes/{sandbox}/snapshots", {}).status == 201
        refused(client.post(f"/v1/sandboxes/{sandbox}/snapshots", {}), "snapshots")
        assert len(client.get("/v1/snapshots").json()["snapshots"]) == 1
        # Bytes are known once taken: a snapshot past the quota of them is not kept.
        r = admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"snapshots": None, "snapshot_bytes": 1000}})
        assert r.status == 200 and r.json()["quotas"] == {"snapshot_bytes": 1000}, r
        client.sh(sandbox, "head -c 200000 /dev/urandom > /workspace/blob")
        before = client.get("/v1/snapshots").json()["snapshots"]
        refused(client.post(f"/v1/sandboxes/{sandbox}/snapshots", {}), "snapshot_bytes")
        assert client.get("/v1/snapshots").json()["snapshots"] == before
        assert usage(client, tenant)["snapshots"] == 1
    finally:
        cleanup(admin, tenant)


def test_volume_quotas_count_them_and_their_sizes(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, volumes=1, volume_mb=100)
    try:
        assert client.post("/v1/volumes", {"name": "one", "size_mb": 60}).status == 201
        refused(client.post("/v1/volumes", {"name": "two", "size_mb": 1}), "volumes")
        # The host's key making one for the tenant is held to the same quota.
        refused(admin.post("/v1/volumes", {"name": "two", "size_mb": 1, "tenant": tenant}), "volumes")
        assert admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"volumes": 5}}).status == 200
        refused(client.post("/v1/volumes", {"name": "two", "size_mb": 41}), "volume_mb")
        assert [v["name"] for v in client.get("/v1/volumes").json()["volumes"]] == ["one"]
        assert client.post("/v1/volumes", {"name": "two", "size_mb": 40}).status == 201
        assert {k: usage(client, tenant)[k] for k in ("volumes", "volume_mb")} == {"volumes": 2, "volume_mb": 100}
        # Deleting one frees its share.
        assert client.delete("/v1/volumes/one").status == 204
        assert client.post("/v1/volumes", {"name": "three", "size_mb": 60}).status == 201
        metrics = admin.get("/metrics").body.decode()
        assert re.search(rf'bulkhead_tenant_usage{{tenant="{tenant}",resource="volume_mb"}} 100\b', metrics), metrics
        # The host's own volumes count for no tenant.
        assert admin.post("/v1/volumes", {"name": f"host-{tenant}", "size_mb": 500}).status == 201
        assert usage(client, tenant)["volume_mb"] == 100
        assert admin.delete(f"/v1/volumes/host-{tenant}").status == 204
    finally:
        cleanup(admin, tenant)


def test_the_create_rate_quota_counts_the_last_minute(daemon):
    admin = daemon.client()
    tenant, client = tenant_with(admin, creates_per_minute=2)
    try:
        client.remove(client.create()["id"])
        client.remove(client.create()["id"])
        refused(client.post("/v1/sandboxes", {}), "creates_per_minute")
        assert usage(client, tenant)["creates_per_minute"] >= 2
        assert client.list() == []
    finally:
        cleanup(admin, tenant)


def test_quotas_and_egress_rules_are_checked_set_merged_and_kept_across_a_restart(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    admin = daemon.client()
    tenant, client = tenant_with(admin, sandboxes=1)
    other, other_client = tenant_with(admin)
    path = f"/v1/tenants/{tenant}"
    for bad in [{"sandbox": 1}, {"sandboxes": -1}, {"sandboxes": 1.5}, {"memory_mb": "lots"},
                {"cpus": 1e300}, [1], "x"]:
        r = admin.request("PATCH", path, {"quotas": bad})
        assert r.status == 422, (bad, r)
    assert admin.request("PATCH", path, {"quota": {}}).status == 422
    assert admin.request("PATCH", path, b"{not json", headers={"Content-Type": "application/json"}).status == 400
    assert admin.request("PATCH", "/v1/tenants/no-such-tenant", {"quotas": {}}).status == 404
    assert admin.post("/v1/tenants", {"name": "bad-quota", "quotas": {"sandboxes": -2}}).status == 422
    assert admin.get("/v1/tenants/bad-quota").status == 404  # nothing half-made
    r = admin.request("PATCH", path, {"quotas": {"memory_mb": 4096}})
    assert r.json()["quotas"] == {"sandboxes": 1, "memory_mb": 4096}, r
    # A tenant reads its own tenant, not another's, and sets no quota.
    assert client.get(path).json()["quotas"] == {"sandboxes": 1, "memory_mb": 4096}
    assert client.get(f"/v1/tenants/{other}").status == 404
    assert other_client.get(path).status == 404
    r = client.request("PATCH", path, {"quotas": {"sandboxes": 100}})
    assert r.status == 403 and r.json()["error"]["code"] == "insufficient_scope", r
    client.create()
    rules = {"deny": ["blocked.test"]}
    assert admin.request("PATCH", f"/v1/tenants/{other}", {"egress": rules}).json()["egress"] == rules
    made = admin.post("/v1/tenants", {"name": f"e-{tenant}", "egress": {"default": {"mode": "open"}}})
    assert made.status == 201 and made.json()["egress"]["default"]["mode"] == "open", made
    daemon.stop()
    daemon.start()
    admin = daemon.client()
    client = Client(client.key, port=admin.port)
    refused(client.post("/v1/sandboxes", {}), "sandboxes")
    assert admin.get(f"/v1/tenants/{other}").json()["egress"] == rules
    assert admin.delete(f"/v1/tenants/e-{tenant}").status == 204
    metrics = admin.get("/metrics").body.decode()
    assert re.search(rf'^bulkhead_tenant_quota{{tenant="{tenant}",resource="sandboxes"}} 1$', metrics, re.M), metrics
    assert re.search(rf'^bulkhead_tenant_usage{{tenant="{tenant}",resource="sandboxes"}} 1$', metrics, re.M)
    assert re.search(rf'^bulkhead_tenant_usage{{tenant="{other}",resource="memory_mb"}} 0$', metrics, re.M)
    # A tenant removed and made again starts with no quota and no egress rules.
    cleanup(admin, tenant)
    assert admin.post("/v1/tenants", {"name": tenant}).json()["quotas"] == {}
    cleanup(admin, other)
    assert admin.post("/v1/tenants", {"name": other}).json()["egress"] == {}


def test_the_cli_sets_and_shows_quotas(daemon):
    tenant = f"q-{uuid.uuid4().hex[:10]}"
    made = cli(daemon, "tenant", "create", tenant, "--quota", "sandboxes=3", "--quota", "cpus=2.5")
    assert made.returncode == 0, made.stderr
    shown = cli(daemon, "tenant", "show", tenant)
    assert re.search(r"^sandboxes\s+0\s+3$", shown.stdout, re.M), shown.stdout
    assert re.search(r"^cpus\s+0(\.0)?\s+2\.5$", shown.stdout, re.M), shown.stdout
    changed = cli(daemon, "tenant", "quota", tenant, "sandboxes=none", "memory_mb=2048")
    assert changed.returncode == 0, changed.stderr
    assert re.search(r"^sandboxes\s+0\s+-$", changed.stdout, re.M), changed.stdout
    assert re.search(r"^memory_mb\s+0\s+2048$", changed.stdout, re.M), changed.stdout
    bad = cli(daemon, "tenant", "quota", tenant, "sandboxes=many")
    assert bad.returncode != 0 and "not a number" in bad.stderr, bad
    # Egress rules: set, shown, refused when bad, cleared.
    rules = cli(daemon, "tenant", "egress", tenant, "--mode", "allowlist", "--allow", "allowed.test",
                "--deny", "blocked.test", "--deny", "10.0.0.0/8")
    assert rules.returncode == 0, rules.stderr
    assert "egress default: allowlist; allow allowed.test; deny -" in rules.stdout, rules.stdout
    assert "egress deny (every sandbox): blocked.test, 10.0.0.0/8" in rules.stdout, rules.stdout
    assert "blocked.test" in cli(daemon, "tenant", "show", tenant).stdout
    bad = cli(daemon, "tenant", "egress", tenant, "--deny", "not a host!")
    assert bad.returncode != 0 and "egress.deny" in bad.stderr, bad
    assert cli(daemon, "tenant", "egress", tenant).returncode != 0  # nothing to set
    cleared = cli(daemon, "tenant", "egress", tenant, "--clear", "--json")
    assert cleared.returncode == 0 and json.loads(cleared.stdout)["egress"] == {}, cleared
    assert cli(daemon, "tenant", "rm", tenant).returncode == 0
