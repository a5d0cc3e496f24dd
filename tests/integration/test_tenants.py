"""Tenants and their scoped API keys (issue 24): a tenant's key reaches its own sandboxes,
snapshots and volumes and nothing of another tenant's, through any route of the OpenAPI document
(another tenant's ids and volume names answer as unknown ones do); each tenant names its volumes
in its own namespace; scopes hold route by route; a revoked or expired key fails at once; keys are
stored hashed; the host's own key keeps reaching everything."""
import io
import json
import os
import tarfile
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from harness import BULKHEAD, Client, assert_error_shape

OPENAPI = json.loads((Path(__file__).resolve().parents[2] / "src/api/openapi.json").read_text())
METHODS = ("get", "post", "put", "delete", "patch")


def new_tenant(admin: Client) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    r = admin.post("/v1/tenants", {"name": name})
    assert r.status == 201, r
    return name


def new_key(admin: Client, tenant: str, scope: str, **extra) -> Client:
    r = admin.post("/v1/keys", {"tenant": tenant, "scope": scope, "name": f"{scope} key", **extra})
    assert r.status == 201, r
    body = r.json()
    assert body["key"].startswith("bhk_") and body["scope"] == scope and body["tenant"] == tenant, body
    return Client(body["key"], port=admin.port, timeout=60), body


@pytest.fixture(scope="module")
def two_tenants(daemon):
    """Tenants a and b, each with a tenant-admin key, a running sandbox holding a file, a
    snapshot of it and a volume."""
    admin = daemon.client()
    world = {}
    for side in ("a", "b"):
        tenant = new_tenant(admin)
        client, key = new_key(admin, tenant, "tenant-admin")
        sandbox = client.create()
        assert sandbox["tenant"] == tenant, sandbox
        client.sh(sandbox["id"], f"echo {side}-secret > /workspace/secret")
        r = client.post(f"/v1/sandboxes/{sandbox['id']}/snapshots", {})
        assert r.status == 201, r
        volume = f"{side}-vol-{uuid.uuid4().hex[:6]}"
        made = client.post("/v1/volumes", {"name": volume, "size_mb": 16})
        assert made.status == 201 and made.json()["tenant"] == tenant, made
        image = f"{side}-img-{uuid.uuid4().hex[:6]}"
        imported = client.request("PUT", f"/v1/images/{image}", empty_root_tar(),
                                  headers={"Content-Type": "application/x-tar"})
        assert imported.status == 201 and imported.json()["shared"] is False, imported
        world[side] = {"tenant": tenant, "client": client, "key": key, "sandbox": sandbox["id"],
                       "snapshot": r.json()["id"], "volume": volume, "image": image}
    yield world
    for side in world.values():
        admin.delete(f"/v1/sandboxes/{side['sandbox']}")
        admin.delete(f"/v1/snapshots/{side['snapshot']}")
        admin.delete(f"/v1/volumes/{side['volume']}?tenant={side['tenant']}")
        admin.delete(f"/v1/images/{side['image']}?tenant={side['tenant']}")
        admin.delete(f"/v1/tenants/{side['tenant']}")


def test_a_tenant_lists_and_reaches_only_its_own_sandboxes_and_snapshots(daemon, two_tenants):
    a, b = two_tenants["a"], two_tenants["b"]
    client = a["client"]
    assert [s["id"] for s in client.list()] == [a["sandbox"]]
    r = client.get("/v1/snapshots")
    assert [s["id"] for s in r.json()["snapshots"]] == [a["snapshot"]], r
    # Another tenant's ids answer as ids that do not exist do, word for word.
    theirs = client.get(f"/v1/sandboxes/{b['sandbox']}")
    unknown = client.get("/v1/sandboxes/0000000000000000000a")
    assert theirs.status == unknown.status == 404
    assert theirs.json()["error"]["code"] == unknown.json()["error"]["code"] == "sandbox_not_found"
    assert client.get(f"/v1/snapshots/{b['snapshot']}").status == 404
    # Not through a create either: from its snapshot.
    r = client.post("/v1/sandboxes", {"from_snapshot": b["snapshot"]})
    assert r.status == 404 and r.json()["error"]["code"] == "snapshot_not_found", r
    # Its own snapshot starts sandboxes of its own.
    r = client.post("/v1/sandboxes", {"from_snapshot": a["snapshot"]})
    assert r.status == 201 and r.json()["tenant"] == a["tenant"], r
    assert client.sh(r.json()["id"], "cat /workspace/secret") == "a-secret\n"
    client.remove(r.json()["id"])
    # A fork is its tenant's too.
    r = client.post(f"/v1/sandboxes/{a['sandbox']}/fork", {"count": 1})
    assert r.status == 201, r
    fork = r.json()["sandboxes"][0]
    assert fork["tenant"] == a["tenant"]
    assert b["client"].get(f"/v1/sandboxes/{fork['id']}").status == 404
    client.remove(fork["id"])
    # The host's key reaches both.
    admin = daemon.client()
    listed = {s["id"] for s in admin.list()}
    assert {a["sandbox"], b["sandbox"]} <= listed


def empty_root_tar() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("etc")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    return out.getvalue()


def concrete(path: str, sandbox: str, snapshot: str, volume: str = "some-name", image: str = "some-name") -> str:
    name = volume if path.startswith("/v1/volumes/") else image if path.startswith("/v1/images/") else "some-name"
    return (path.replace("{id}", sandbox).replace("{snapshot_id}", snapshot).replace("{pid}", "1")
            .replace("{port}", "8080").replace("{path}", "x").replace("{name}", name)
            .replace("{tenant}", "some-tenant").replace("{key_id}", "0000000000000000"))


def test_every_route_of_the_openapi_document_keeps_another_tenants_objects_out_of_reach(two_tenants):
    """Tenant a's admin key on every route and method, aimed at b's sandbox, snapshot and volume:
    each answers 404 (b's objects are unknown to it) or 403 (a host-wide route), never 2xx; and
    b's sandbox, its file, its snapshot, its volume and its tenant are as they were."""
    a, b = two_tenants["a"], two_tenants["b"]
    seen = 0
    for path, operations in OPENAPI["paths"].items():
        for method in (m for m in METHODS if m in operations):
            named = path.startswith(("/v1/volumes/{", "/v1/images/{"))
            if not any(p in path for p in ("{id}", "{snapshot_id}", "{tenant}")) and not named:
                continue
            if path == "/v1/images/{name}" and method == "put":
                continue  # (an import of a's own by that name: b's is not touched, as checked below)
            target = concrete(path, b["sandbox"], b["snapshot"], b["volume"], b["image"]).replace("some-tenant", b["tenant"])
            if path.endswith("/files") or "/files/" in path:
                target += "?path=/workspace/secret"
            body = b"{}" if method in ("post", "put", "patch") else None
            r = a["client"].request(method.upper(), target, body=body,
                                    headers={"Content-Type": "application/json"})
            assert r.status in (403, 404), (method, target, r)
            assert_error_shape(r)
            seen += 1
    assert seen >= 40, seen
    client = b["client"]
    assert client.sandbox(b["sandbox"])["state"] == "running"
    assert client.sh(b["sandbox"], "cat /workspace/secret") == "b-secret\n"
    assert client.get(f"/v1/snapshots/{b['snapshot']}").status == 200
    assert client.get(f"/v1/volumes/{b['volume']}").status == 200
    assert client.get(f"/v1/images/{b['image']}").status == 200
    assert client.get(f"/v1/tenants/{b['tenant']}").json()["sandboxes"] == 1


def test_host_wide_routes_answer_a_tenants_key_403(two_tenants):
    client = two_tenants["a"]["client"]
    for method, path in [("GET", "/metrics"), ("GET", "/v1/audit"),
                         ("POST", "/v1/images/gc"), ("DELETE", "/v1/images/build/cache"),
                         ("POST", "/v1/snapshots/import"),
                         ("GET", "/v1/tenants"), ("POST", "/v1/tenants"),
                         ("DELETE", f"/v1/tenants/{two_tenants['b']['tenant']}")]:
        r = client.request(method, path, body=b"{}" if method == "POST" else None)
        assert r.status == 403 and r.json()["error"]["code"] == "insufficient_scope", (method, path, r)
    # The host's images are every tenant's to run, not to delete (its own: test_tenant_images.py).
    r = client.delete("/v1/images/host")
    assert r.status == 403 and r.json()["error"]["code"] == "image_not_owned", r
    # The daemon's health and the API's description are everyone's.
    assert client.get("/healthz").status == 200 and client.get("/openapi.json").status == 200


def test_scopes_hold_route_by_route(daemon, two_tenants):
    admin = daemon.client()
    a = two_tenants["a"]
    reader, _ = new_key(admin, a["tenant"], "read-only")
    user, _ = new_key(admin, a["tenant"], "user")
    sandbox = a["sandbox"]
    # read-only: reads, and nothing that changes anything.
    assert reader.sandbox(sandbox)["id"] == sandbox
    assert reader.get(f"/v1/sandboxes/{sandbox}/files?path=/workspace/secret").body == b"a-secret\n"
    for method, path, body in [("POST", f"/v1/sandboxes/{sandbox}/exec", {"cmd": "true"}),
                               ("POST", "/v1/sandboxes", {}),
                               ("DELETE", f"/v1/sandboxes/{sandbox}", None),
                               ("PUT", f"/v1/sandboxes/{sandbox}/network", {"mode": "none"}),
                               ("GET", "/v1/keys", None)]:
        r = reader.request(method, path, body=body)
        assert r.status == 403 and r.json()["error"]["code"] == "insufficient_scope", (method, path, r)
    # user: the sandboxes, not the keys.
    assert user.exec(sandbox, "echo hi")["stdout"] == "hi\n"
    for method, path, body in [("POST", "/v1/keys", {"scope": "user"}), ("GET", "/v1/keys", None),
                               ("DELETE", f"/v1/keys/{a['key']['id']}", None)]:
        r = user.request(method, path, body=body)
        assert r.status == 403, (method, path, r)
    # tenant-admin: keys of its own tenant only.
    r = a["client"].post("/v1/keys", {"scope": "user"})
    assert r.status == 201 and r.json()["tenant"] == a["tenant"], r
    r = a["client"].post("/v1/keys", {"scope": "user", "tenant": two_tenants["b"]["tenant"]})
    assert r.status == 404, r
    r = a["client"].post("/v1/keys", {"scope": "admin"})
    assert r.status == 422, r
    listed = a["client"].get("/v1/keys").json()["keys"]
    assert {k["tenant"] for k in listed} == {a["tenant"]} and all("key" not in k for k in listed), listed
    r = a["client"].delete(f"/v1/keys/{two_tenants['b']['key']['id']}")
    assert r.status == 404, r


def test_a_revoked_key_fails_at_once_and_an_expired_one_when_it_expires(daemon, two_tenants):
    admin = daemon.client()
    tenant = two_tenants["a"]["tenant"]
    client, key = new_key(admin, tenant, "user")
    assert client.get("/v1/sandboxes").status == 200
    assert admin.delete(f"/v1/keys/{key['id']}").status == 204
    r = client.get("/v1/sandboxes")
    assert r.status == 401, r
    revoked = [k for k in admin.get("/v1/keys").json()["keys"] if k["id"] == key["id"]]
    assert revoked and revoked[0]["revoked_at"], revoked
    short, key = new_key(admin, tenant, "user", ttl_s=1)
    assert key["expires_at"]
    assert short.get("/v1/sandboxes").status == 200
    time.sleep(1.2)
    assert short.get("/v1/sandboxes").status == 401
    # A key of the right shape with a wrong secret, and one naming no key.
    for wrong in (key["id"] and f"bhk_{key['id']}_{'0' * 64}", "bhk_nothing_here", "bhk_"):
        assert Client(wrong, port=admin.port).get("/v1/sandboxes").status == 401


def test_bad_tenant_and_key_requests_get_clear_4xx(daemon):
    admin = daemon.client()
    for body in ({}, {"name": ""}, {"name": "UPPER"}, {"name": "-x"}, {"name": "x" * 64}, {"name": 5},
                 {"name": "ok", "extra": 1}):
        r = admin.post("/v1/tenants", body)
        assert r.status == 422, (body, r)
        assert_error_shape(r)
    tenant = new_tenant(admin)
    assert admin.post("/v1/tenants", {"name": tenant}).status == 409
    for body in ({"tenant": tenant}, {"tenant": tenant, "scope": "root"}, {"scope": "user"},
                 {"tenant": tenant, "scope": "user", "ttl_s": -1}, {"tenant": tenant, "scope": "user", "ttl_s": "1"},
                 {"tenant": tenant, "scope": "user", "name": "x" * 300}):
        r = admin.post("/v1/keys", body)
        assert r.status == 422, (body, r)
    assert admin.post("/v1/keys", {"tenant": "no-such-tenant", "scope": "user"}).status == 404
    assert admin.delete("/v1/keys/nope").status == 404
    assert admin.delete("/v1/tenants/no-such-tenant").status == 404
    assert admin.delete(f"/v1/tenants/{tenant}").status == 204


def test_keys_are_stored_hashed_and_survive_a_restart_and_a_removed_tenant_takes_its_keys(daemon_factory):
    daemon = daemon_factory()
    daemon.start()
    admin = daemon.client()
    tenant = new_tenant(admin)
    client, key = new_key(admin, tenant, "tenant-admin")
    sandbox = client.create()["id"]
    secret = key["key"].rsplit("_", 1)[1].encode()
    for path in daemon.state_dir.glob("bulkhead.db*"):
        assert secret not in path.read_bytes(), path
    daemon.stop()
    daemon.start()
    admin = daemon.client()
    client = Client(key["key"], port=admin.port)  # (the daemon listens on a new port)
    assert client.sandbox(sandbox)["tenant"] == tenant
    # Not removed while it owns something.
    r = admin.delete(f"/v1/tenants/{tenant}")
    assert r.status == 409 and r.json()["error"]["code"] == "tenant_not_empty", r
    listed = {t["name"]: t for t in admin.get("/v1/tenants").json()["tenants"]}
    assert listed[tenant]["sandboxes"] == 1, listed
    client.remove(sandbox)
    assert admin.delete(f"/v1/tenants/{tenant}").status == 204
    assert client.get("/v1/sandboxes").status == 401


def test_the_audit_names_the_key_and_tenant_of_each_call(daemon, two_tenants):
    a = two_tenants["a"]
    a["client"].exec(a["sandbox"], "echo audited")
    records = daemon.client().get(f"/v1/audit?target={a['sandbox']}&action=POST%20/v1/sandboxes/%7Bid%7D/exec").json()
    last = records["records"][-1]
    assert last["key"] == a["key"]["id"] and last["tenant"] == a["tenant"], last


def test_the_cli_manages_tenants_and_keys_and_a_tenants_key_works_through_it(daemon):
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    assert cli(daemon, "tenant", "create", tenant).stdout == f"{tenant}\n"
    made = cli(daemon, "key", "create", "--tenant", tenant, "--scope", "user", "--name", "ci")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("bhk_")
    listed = cli(daemon, "key", "ls")
    key_id = key.split("_")[1]
    assert key_id in listed.stdout and tenant in listed.stdout and key not in listed.stdout
    assert tenant in cli(daemon, "tenant", "ls").stdout
    # The key itself, through BULKHEAD_API_KEY: sandboxes of its tenant, and no tenants.
    made = cli(daemon, "create", key=key)
    assert made.returncode == 0, made.stderr
    refused = cli(daemon, "tenant", "ls", key=key)
    assert refused.returncode != 0 and "insufficient_scope" in refused.stderr + refused.stdout, refused
    daemon.client().delete(f"/v1/sandboxes/{made.stdout.split()[0]}")
    assert cli(daemon, "key", "revoke", key_id).stdout == f"{key_id}\n"
    assert cli(daemon, "ls", key=key).returncode != 0
    assert cli(daemon, "tenant", "rm", tenant).stdout == f"{tenant}\n"


def cli(daemon, *args, key=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_STATE"] = str(daemon.state_dir)
    if key:
        env["BULKHEAD_API_KEY"] = key
    return subprocess.run([str(BULKHEAD), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_private_preview_opens_for_its_own_tenants_keys_and_not_anothers(daemon, two_tenants):
    from test_ports import APP, APP_PORT, host_call, start_server
    a, b = two_tenants["a"], two_tenants["b"]
    sandbox = a["client"].create(preview={"public": False})["id"]
    try:
        start_server(a["client"], sandbox, "app", APP, APP_PORT)
        host = f"{APP_PORT}-{sandbox}.localhost:7420"
        own = host_call(a["client"], "GET", host, "/", headers={"Authorization": f"Bearer {a['client'].key}"})
        assert own.status == 200, own
        theirs = host_call(a["client"], "GET", host, "/", headers={"Authorization": f"Bearer {b['client'].key}"})
        assert theirs.status == 403 and theirs.json()["error"]["code"] == "preview_token_required", theirs
        admin = host_call(a["client"], "GET", host, "/", headers={"Authorization": f"Bearer {daemon.key}"})
        assert admin.status == 200, admin
        # Through the API's port route, another tenant's key finds no such sandbox.
        r = b["client"].get(f"/v1/sandboxes/{sandbox}/ports/{APP_PORT}/")
        assert r.status == 404, r
    finally:
        a["client"].remove(sandbox)


def test_a_purge_removes_everything_a_tenant_left_and_proves_it(daemon):
    import sqlite3
    admin = daemon.client()
    tenant = new_tenant(admin)
    client, key = new_key(admin, tenant, "tenant-admin")
    running = client.create(network={"mode": "allowlist", "allow": ["allowed.test"]})["id"]
    client.exec(running, "curl -s -m 5 http://blocked.test/ >/dev/null; true")  # (the proxy refuses it)
    egress = client.get(f"/v1/sandboxes/{running}/egress").json()["entries"]
    assert egress, "a refused request is an egress record"
    assert client.post("/v1/volumes", {"name": "records", "size_mb": 16}).status == 201
    stopped = client.create(volumes=[{"name": "records", "path": "/records"}])["id"]
    client.sh(stopped, "echo personal > /workspace/data; echo personal > /records/data")
    assert client.post(f"/v1/sandboxes/{stopped}/stop").status == 200
    snapshot = client.post(f"/v1/sandboxes/{running}/snapshots", {}).json()["id"]
    assert admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"sandboxes": 5}}).status == 200
    # Without purge it is refused, and says how.
    r = admin.delete(f"/v1/tenants/{tenant}")
    assert r.status == 409 and "purge" in r.json()["error"]["message"], r
    assert admin.delete(f"/v1/tenants/{tenant}?purge=maybe").status == 422

    r = admin.delete(f"/v1/tenants/{tenant}?purge=true")
    assert r.status == 200, r
    proof = r.json()
    assert sorted(s["id"] for s in proof["removed"]["sandboxes"]) == sorted([running, stopped])
    assert [s["id"] for s in proof["removed"]["snapshots"]] == [snapshot]
    assert proof["removed"]["keys"] == [key["id"]]
    assert proof["removed"]["quota"] == {"sandboxes": 5}
    assert proof["removed"]["egress_records"] == len(egress)
    assert [v["name"] for v in proof["removed"]["volumes"]] == ["records"], proof
    assert proof["remaining"] == {"sandboxes": 0, "snapshots": 0, "volumes": 0, "images": 0, "keys": 0, "tenant": False}
    # Checked from outside: the API, the key, the state database and the snapshot's files.
    assert client.get("/v1/sandboxes").status == 401
    for sandbox in (running, stopped):
        assert admin.get(f"/v1/sandboxes/{sandbox}").status == 404
    assert admin.get(f"/v1/snapshots/{snapshot}").status == 404
    assert admin.get(f"/v1/tenants/{tenant}").status == 404
    db = sqlite3.connect(f"file:{daemon.state_dir}/bulkhead.db?mode=ro", uri=True)
    for table, column in [("sandboxes", "spec_json"), ("snapshots", "spec_json"), ("api_keys", "tenant"),
                          ("tenants", "name"), ("tenant_quotas", "tenant"), ("volumes", "tenant")]:
        assert db.execute(f"SELECT count(*) FROM {table} WHERE {column} LIKE ?", (f"%{tenant}%",)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM egress WHERE sandbox_id IN (?, ?)", (running, stopped)).fetchone()[0] == 0
    db.close()
    assert not [p for p in daemon.state_dir.rglob(f"*{snapshot}*")], "the snapshot's files are gone"
    assert not [p for p in daemon.state_dir.rglob(f"*{tenant}*")], "the volume's files are gone"
    # The purge itself is on record, and it alone: the tenant's records are blanked in place.
    assert proof["removed"]["audit_records"] >= 6, proof  # its creates, exec, stop, snapshot, quota...
    records = admin.get(f"/v1/audit?target={tenant}").json()["records"]
    assert [(r["action"], r["outcome"]) for r in records] == [("DELETE /v1/tenants/{tenant}", 200)], records
    assert records[-1]["detail"]["purged"]["sandboxes"] == 2, records[-1]
    assert admin.get(f"/v1/audit?tenant={tenant}").json()["records"] == []
    named = [line for line in (daemon.state_dir / "audit.log").read_text().splitlines() if tenant in line]
    assert len(named) == 1 and '"DELETE /v1/tenants/{tenant}"' in named[0], named
    verified = subprocess.run([str(BULKHEAD), "audit", "verify"], capture_output=True, text=True,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")},
                                   "BULKHEAD_STATE": str(daemon.state_dir)})
    assert verified.returncode == 0 and "chain intact" in verified.stdout, verified
    # The name is free again, with nothing of the old tenant's.
    assert admin.post("/v1/tenants", {"name": tenant}).json()["quotas"] == {}
    assert admin.delete(f"/v1/tenants/{tenant}").status == 204


def test_the_cli_purges_a_tenant_and_prints_what_went(daemon):
    admin = daemon.client()
    tenant = new_tenant(admin)
    client, _ = new_key(admin, tenant, "user")
    client.create()
    purged = cli(daemon, "tenant", "rm", "--purge", tenant)
    assert purged.returncode == 0, purged.stderr
    assert f"purged {tenant}: removed 1 sandboxes" in purged.stdout, purged.stdout
    assert "left: 0 sandboxes, 0 snapshots, 0 volumes, 0 keys, tenant gone" in purged.stdout, purged.stdout
    assert "audit records (blanked in the chain)" in purged.stdout, purged.stdout


def test_the_host_key_makes_a_sandbox_of_a_tenants_that_the_tenant_then_owns(daemon, two_tenants):
    admin = daemon.client()
    a, b = two_tenants["a"], two_tenants["b"]
    made = admin.post("/v1/sandboxes", {"tenant": a["tenant"]})
    assert made.status == 201 and made.json()["tenant"] == a["tenant"], made
    sandbox = made.json()["id"]
    try:
        assert a["client"].sh(sandbox, "echo mine") == "mine\n"
        assert b["client"].get(f"/v1/sandboxes/{sandbox}").status == 404
        # Not from another tenant's snapshot, not with another's volumes, not for an unknown tenant.
        r = admin.post("/v1/sandboxes", {"tenant": a["tenant"], "from_snapshot": b["snapshot"]})
        assert r.status == 404 and r.json()["error"]["code"] == "snapshot_not_found", r
        r = admin.post("/v1/sandboxes", {"tenant": a["tenant"], "volumes": [{"name": b["volume"], "path": "/data"}]})
        assert r.status == 404 and r.json()["error"]["code"] == "volume_not_found", r
        r = admin.post("/v1/sandboxes", {"tenant": "no-such-tenant"})
        assert r.status == 404 and r.json()["error"]["code"] == "tenant_not_found", r
        assert admin.post("/v1/sandboxes", {"tenant": 7}).status == 422
        # A tenant's key names its own tenant only.
        r = a["client"].post("/v1/sandboxes", {"tenant": b["tenant"]})
        assert r.status == 404 and r.json()["error"]["code"] == "tenant_not_found", r
    finally:
        admin.delete(f"/v1/sandboxes/{sandbox}")


def test_each_tenant_names_its_own_volumes_and_its_sandboxes_mount_those_alone(daemon, two_tenants):
    admin = daemon.client()
    a, b = two_tenants["a"], two_tenants["b"]
    name = f"shared-{uuid.uuid4().hex[:6]}"
    # One name, three volumes: a's, b's and the host's.
    for client in (a["client"], b["client"], admin):
        assert client.post("/v1/volumes", {"name": name, "size_mb": 16}).status == 201
    sandboxes = []
    try:
        for side, client in (("a", a["client"]), ("b", b["client"]), ("host", admin)):
            made = client.post("/v1/sandboxes", {"volumes": [{"name": name, "path": "/shared"}]})
            assert made.status == 201, made
            sandboxes.append((client, made.json()["id"]))
            client.sh(made.json()["id"], f"echo {side} >> /shared/who")
        for (client, sandbox), side in zip(sandboxes, ("a", "b", "host")):
            assert client.sh(sandbox, "cat /shared/who") == f"{side}\n"
        # Lists: a tenant's own; the host's every tenant's, or one's with ?tenant=.
        mine = a["client"].get("/v1/volumes").json()["volumes"]
        assert sorted(v["name"] for v in mine) == sorted([a["volume"], name]), mine
        assert all(v["tenant"] == a["tenant"] for v in mine)
        everyone = [(v["tenant"], v["name"]) for v in admin.get("/v1/volumes").json()["volumes"]]
        assert {(a["tenant"], name), (b["tenant"], name), (None, name)} <= set(everyone), everyone
        only_b = admin.get(f"/v1/volumes?tenant={b['tenant']}").json()["volumes"]
        assert sorted(v["name"] for v in only_b) == sorted([b["volume"], name]), only_b
        got = a["client"].get(f"/v1/volumes/{name}").json()
        assert got["tenant"] == a["tenant"] and got["mounted_by"] == [sandboxes[0][1]], got
        got = admin.get(f"/v1/volumes/{name}?tenant={b['tenant']}").json()
        assert got["tenant"] == b["tenant"] and got["mounted_by"] == [sandboxes[1][1]], got
        # A tenant's key names no other tenant, and reaches none of its volumes.
        for r in (a["client"].get(f"/v1/volumes?tenant={b['tenant']}"),
                  a["client"].get(f"/v1/volumes/{name}?tenant={b['tenant']}"),
                  a["client"].post("/v1/volumes", {"name": "x", "size_mb": 1, "tenant": b["tenant"]})):
            assert r.status == 404 and r.json()["error"]["code"] == "tenant_not_found", r
        r = a["client"].delete(f"/v1/volumes/{b['volume']}")
        assert r.status == 404 and r.json()["error"]["code"] == "volume_not_found", r
        # Read-only keys read them and change nothing.
        reader, _ = new_key(admin, a["tenant"], "read-only")
        assert reader.get(f"/v1/volumes/{name}").status == 200
        assert reader.post("/v1/volumes", {"name": "y", "size_mb": 1}).status == 403
        assert reader.delete(f"/v1/volumes/{name}").status == 403
        # In use while mounted, whoever asks.
        r = admin.delete(f"/v1/volumes/{name}?tenant={a['tenant']}")
        assert r.status == 409 and r.json()["error"]["code"] == "volume_in_use", r
        # A tenant with volumes is not removed without --purge.
        r = admin.delete(f"/v1/tenants/{a['tenant']}")
        assert r.status == 409 and "volumes" in r.json()["error"]["message"], r
        # The CLI: the host's key sees a TENANT column and removes a tenant's with --tenant.
        listed = cli(daemon, "volume", "ls")
        assert listed.returncode == 0 and "TENANT" in listed.stdout and a["tenant"] in listed.stdout, listed
    finally:
        for client, sandbox in sandboxes:
            client.remove(sandbox)
    removed = cli(daemon, "volume", "rm", "--tenant", a["tenant"], name)
    assert removed.returncode == 0, removed.stderr
    assert a["client"].get(f"/v1/volumes/{name}").status == 404
    assert b["client"].sh(b["sandbox"], "true") == ""  # b is untouched
    assert b["client"].get(f"/v1/volumes/{name}").status == 200
    for client in (b["client"], admin):
        assert client.delete(f"/v1/volumes/{name}").status == 204


def test_a_tenants_volumes_keep_their_data_and_mounts_across_a_restart(daemon_factory):
    """The host's volume and two tenants' of one name are three directories on disk; a restart
    finds each again (none taken for another's, none removed as stray)."""
    daemon = daemon_factory()
    daemon.start()
    admin = daemon.client()
    tenants = [new_tenant(admin), new_tenant(admin)]
    clients = [new_key(admin, tenant, "user")[0] for tenant in tenants] + [admin]
    sandboxes = []
    for i, client in enumerate(clients):
        assert client.post("/v1/volumes", {"name": "keep", "size_mb": 16}).status == 201
        sandbox = client.create(volumes=[{"name": "keep", "path": "/keep"}])["id"]
        client.sh(sandbox, f"echo {i} > /keep/mine")
        sandboxes.append(sandbox)
    assert admin.delete(f"/v1/sandboxes/{sandboxes[1]}").status == 204  # b's is free, not in use
    daemon.stop()
    daemon.start()
    admin = daemon.client()
    clients = [Client(c.key, port=admin.port, timeout=60) for c in clients[:2]] + [admin]
    for i, (client, sandbox) in enumerate(zip(clients, sandboxes)):
        got = client.get("/v1/volumes/keep").json()
        assert got["mounted_by"] == ([] if i == 1 else [sandbox]), got
        if i != 1:
            assert client.sh(sandbox, "cat /keep/mine") == f"{i}\n"
    again = clients[1].create(volumes=[{"name": "keep", "path": "/keep"}])["id"]
    assert clients[1].sh(again, "cat /keep/mine") == "1\n"
    sandboxes[1] = again
    for client, sandbox in zip(clients, sandboxes):
        client.remove(sandbox)
        assert client.delete("/v1/volumes/keep").status == 204
    daemon.stop()


def test_a_tenants_egress_rules_give_a_default_policy_and_deny_entries_its_keys_cannot_lift(daemon, two_tenants):
    admin = daemon.client()
    a, b = two_tenants["a"], two_tenants["b"]
    client = a["client"]
    rules = {"default": {"mode": "allowlist", "allow": ["allowed.test"], "deny": []},
             "deny": ["blocked.test", "203.0.113.0/24"]}
    # The host's key sets them; a tenant's key may not; bad entries are 422.
    assert client.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": rules}).status == 403
    for bad in [5, {"deny": ["no such host!"]}, {"default": {"mode": "sideways"}}, {"deny": "blocked.test"},
                {"allow": []}, {"deny": [f"h{i}.test" for i in range(101)]}]:
        r = admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": bad})
        assert r.status == 422, (bad, r)
    r = admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": rules})
    assert r.status == 200 and r.json()["egress"] == rules, r
    assert client.get(f"/v1/tenants/{a['tenant']}").json()["egress"] == rules
    made = []
    try:
        # No network asked: the tenant's default, with its deny entries.
        box = client.create()
        made.append(box["id"])
        assert box["network"] == {"mode": "allowlist", "allow": ["allowed.test"],
                                  "deny": ["blocked.test", "203.0.113.0/24"]}, box
        # Its own policy: the tenant's deny entries are added, and stay through a change.
        box = client.create(network={"mode": "allowlist", "allow": ["blocked.test", "allowed.test"]})
        made.append(box["id"])
        assert box["network"]["deny"] == ["blocked.test", "203.0.113.0/24"], box
        r = client.request("PUT", f"/v1/sandboxes/{box['id']}/network", {"mode": "open", "deny": []})
        assert r.status == 200 and r.json()["network"]["deny"] == ["blocked.test", "203.0.113.0/24"], r
        r = client.request("PUT", f"/v1/sandboxes/{box['id']}/network",
                           {"mode": "allowlist", "allow": ["blocked.test"]})
        assert r.status == 200, r
        client.exec(box["id"], "curl -s -m 5 http://blocked.test/ >/dev/null; true")
        denied = [e for e in client.get(f"/v1/sandboxes/{box['id']}/egress").json()["entries"]
                  if e["verdict"] == "denied" and e["reason"].endswith('is denied by deny entry "blocked.test"')]
        assert denied, client.get(f"/v1/sandboxes/{box['id']}/egress").json()
        # Its forks carry them too; another tenant's sandboxes get none of them.
        r = client.post(f"/v1/sandboxes/{box['id']}/fork", {"count": 1})
        assert r.status == 201, r
        fork = r.json()["sandboxes"][0]
        made.append(fork["id"])
        assert "blocked.test" in fork["network"]["deny"], fork
        other = b["client"].create()
        assert other["network"] == {"mode": "none", "allow": [], "deny": []}, other
        b["client"].remove(other["id"])
        # The host's key making one for the tenant gets the same.
        r = admin.post("/v1/sandboxes", {"tenant": a["tenant"]})
        assert r.status == 201 and r.json()["network"]["deny"] == ["blocked.test", "203.0.113.0/24"], r
        made.append(r.json()["id"])
    finally:
        for sandbox in made:
            admin.delete(f"/v1/sandboxes/{sandbox}")
    # null takes them away.
    r = admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": None})
    assert r.status == 200 and r.json()["egress"] == {}, r
    box = client.create()
    assert box["network"]["mode"] == "none", box
    client.remove(box["id"])
