"""The E2B front with tenants' keys (issue 24): a tenant's API key taken as X-API-KEY is that
tenant, as on the native API: the sandboxes it creates are its own, lists show it its own,
another tenant's ids answer 404 on every sandbox route, read-only keys only read, each tenant builds
templates of its own (its images: unseen by another, their uploaded files its own), and quotas
hold."""
import uuid

import pytest

from test_e2b_control_plane import E2b
from test_e2b_templates import files_tar, put, request_build, start_build, upload, wait_build
from test_tenants import new_key, new_tenant

ROUTES = [("GET", "/sandboxes/{id}"), ("DELETE", "/sandboxes/{id}"), ("POST", "/sandboxes/{id}/connect"),
          ("POST", "/sandboxes/{id}/resume"), ("POST", "/sandboxes/{id}/timeout"), ("POST", "/sandboxes/{id}/pause"),
          ("GET", "/sandboxes/{id}/metrics"), ("PUT", "/sandboxes/{id}/network"), ("POST", "/sandboxes/{id}/fork"),
          ("POST", "/sandboxes/{id}/snapshots"), ("POST", "/v2/sandboxes/{id}/connect")]


@pytest.fixture(scope="module")
def e2b_tenants(daemon):
    admin = daemon.client()
    world = {}
    for side in ("a", "b"):
        tenant = new_tenant(admin)
        _, key = new_key(admin, tenant, "tenant-admin")
        e2b = E2b(daemon, key["key"])
        r = e2b.request("POST", "/sandboxes", {"templateID": "base", "timeout": 300})
        assert r.status == 201, r
        world[side] = {"tenant": tenant, "e2b": e2b, "sandbox": r.json()["sandboxID"]}
    yield world
    for side in world.values():
        for sandbox in admin.list():
            if sandbox["tenant"] == side["tenant"]:
                admin.delete(f"/v1/sandboxes/{sandbox['id']}")
        for snapshot in admin.get("/v1/snapshots").json()["snapshots"]:
            if snapshot["tenant"] == side["tenant"]:
                admin.delete(f"/v1/snapshots/{snapshot['id']}")
        admin.delete(f"/v1/tenants/{side['tenant']}")


def test_a_tenants_key_on_the_e2b_front_is_that_tenant(daemon, e2b_tenants):
    a, b = e2b_tenants["a"], e2b_tenants["b"]
    assert daemon.client().sandbox(a["sandbox"])["tenant"] == a["tenant"]
    listed = a["e2b"].request("GET", "/v2/sandboxes").json()
    assert [s["sandboxID"] for s in listed] == [a["sandbox"]], listed
    # The front's own key is the host's: it sees both.
    everything = {s["sandboxID"] for s in E2b(daemon).request("GET", "/v2/sandboxes").json()}
    assert {a["sandbox"], b["sandbox"]} <= everything
    # The audit names the tenant's key.
    record = daemon.client().get(f"/v1/audit?tenant={a['tenant']}").json()["records"]
    assert any(r["action"] == "e2b POST /sandboxes" and r["tenant"] == a["tenant"] for r in record), record


def test_another_tenants_sandbox_answers_as_an_unknown_one_on_every_route(daemon, e2b_tenants):
    a, b = e2b_tenants["a"], e2b_tenants["b"]
    for method, path in ROUTES:
        theirs = a["e2b"].request(method, path.format(id=b["sandbox"]), {} if method in ("POST", "PUT") else None)
        unknown = a["e2b"].request(method, path.format(id="0000000000000000000b"), {} if method in ("POST", "PUT") else None)
        assert theirs.status == unknown.status == 404, (method, path, theirs, unknown)
        assert theirs.json()["message"].replace(b["sandbox"], "X") == unknown.json()["message"].replace(
            "0000000000000000000b", "X"), (theirs, unknown)
    r = a["e2b"].request("GET", f"/sandboxes/metrics?sandbox_ids={b['sandbox']}")
    assert r.status == 200 and r.json()["sandboxes"] == {}, r
    # Not from its snapshot either, and its snapshots are not listed.
    r = b["e2b"].request("POST", f"/sandboxes/{b['sandbox']}/snapshots", {})
    assert r.status in (200, 201), r
    snapshot = r.json()["snapshotID"]
    assert a["e2b"].request("GET", "/snapshots").json() == []
    assert a["e2b"].request("POST", "/sandboxes", {"templateID": snapshot}).status == 404
    assert a["e2b"].request("DELETE", f"/templates/{snapshot}").status == 404
    assert daemon.client().sandbox(b["sandbox"])["state"] == "running"
    assert [s["snapshotID"] for s in b["e2b"].request("GET", "/snapshots").json()] == [snapshot]


def test_read_only_keys_read_and_build_no_templates(daemon, e2b_tenants):
    a = e2b_tenants["a"]
    admin = daemon.client()
    _, key = new_key(admin, a["tenant"], "read-only")
    reader = E2b(daemon, key["key"])
    assert reader.request("GET", f"/sandboxes/{a['sandbox']}").status == 200
    r = reader.request("POST", "/sandboxes", {"templateID": "base"})
    assert r.status == 403, r
    assert reader.request("DELETE", f"/sandboxes/{a['sandbox']}").status == 403
    for method, path in [("POST", "/v3/templates"), ("POST", "/templates/tags"), ("DELETE", "/templates/x"),
                         ("POST", "/v2/templates/x/builds/y")]:
        r = reader.request(method, path, {} if method == "POST" else None)
        assert r.status == 403, (method, path, r)
    assert reader.request("GET", "/templates/aliases/base").status == 200
    # A revoked key stops at once, here too.
    assert admin.delete(f"/v1/keys/{key['id']}").status == 204
    assert reader.request("GET", "/v2/sandboxes").status == 401


def test_quotas_hold_on_the_e2b_front(daemon, e2b_tenants):
    a = e2b_tenants["a"]
    admin = daemon.client()
    r = admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"quotas": {"sandboxes": 1}})
    assert r.status == 200, r
    r = a["e2b"].request("POST", "/sandboxes", {"templateID": "base"})
    assert r.status == 429 and "quota" in r.json()["message"], r
    assert admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"quotas": {"sandboxes": None}}).status == 200


def test_the_tenants_egress_rules_hold_for_its_e2b_sandboxes(daemon, e2b_tenants):
    admin = daemon.client()
    a = e2b_tenants["a"]
    rules = {"default": {"mode": "allowlist", "allow": ["allowed.test"], "deny": []}, "deny": ["blocked.test"]}
    assert admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": rules}).status == 200
    try:
        # Nothing said of the network: the tenant's default. Internet access asked: its deny stays.
        r = a["e2b"].request("POST", "/sandboxes", {"templateID": "base", "timeout": 300})
        assert r.status == 201, r
        network = admin.sandbox(r.json()["sandboxID"])["network"]
        assert network == {"mode": "allowlist", "allow": ["allowed.test"], "deny": ["blocked.test"]}, network
        r = a["e2b"].request("POST", "/sandboxes", {"templateID": "base", "timeout": 300, "allow_internet_access": True})
        assert r.status == 201, r
        network = admin.sandbox(r.json()["sandboxID"])["network"]
        assert network["mode"] == "open" and "blocked.test" in network["deny"], network
    finally:
        assert admin.request("PATCH", f"/v1/tenants/{a['tenant']}", {"egress": None}).status == 200


def test_a_tenant_builds_templates_of_its_own_that_another_cannot_see_use_or_build_from(daemon):
    admin = daemon.client()
    fronts = {}
    for side in ("a", "b"):
        tenant = new_tenant(admin)
        _, key = new_key(admin, tenant, "user")
        fronts[side] = (tenant, E2b(daemon, key["key"]))
    (a_tenant, a), (b_tenant, b) = fronts["a"], fronts["b"]
    name = f"own-{uuid.uuid4().hex[:8]}"
    files_hash = uuid.uuid4().hex + uuid.uuid4().hex
    try:
        build = request_build(a, name)
        upload(a, name, files_hash, files_tar([("note.txt", b"a's file\n")]))
        assert start_build(a, build, {"fromImage": "e2bdev/base", "force": False, "steps": [
            {"type": "COPY", "args": ["note.txt", "/srv/note.txt", "", ""], "filesHash": files_hash, "force": False}]
        }).status == 204
        status, entries = wait_build(a, build)
        assert status["status"] == "ready", (status, entries)
        r = a.request("POST", "/sandboxes", {"templateID": name, "timeout": 60})
        assert r.status == 201, r
        assert admin.sandbox(r.json()["sandboxID"])["tenant"] == a_tenant
        assert admin.exec(r.json()["sandboxID"], ["/bin/cat", "/srv/note.txt"])["stdout"] == "a's file\n"
        admin.delete(f"/v1/sandboxes/{r.json()['sandboxID']}")

        # b: a's template, its build and its tags are unknown; its own of that name is its own.
        assert b.request("GET", f"/templates/aliases/{name}").status == 404
        assert b.request("POST", "/sandboxes", {"templateID": name, "timeout": 60}).status == 404
        assert b.request("GET", f"/templates/{name}/builds/{build['buildID']}/status").status == 404
        assert b.request("GET", f"/templates/{name}/tags").status == 404
        assert b.request("DELETE", f"/templates/{name}").status == 404
        # Nor does a's upload serve b's build: b must send the files itself.
        mine = request_build(b, name)
        link = b.request("GET", f"/templates/{name}/files/{files_hash}").json()
        assert link["present"] is False, link
        r = start_build(b, mine, {"fromImage": "e2bdev/base", "force": False, "steps": [
            {"type": "COPY", "args": ["note.txt", "/srv/note.txt", "", ""], "filesHash": files_hash, "force": False}]})
        assert r.status == 400 and "not uploaded" in r.json()["message"], r
        # An upload URL made for a cannot be used with b's name in it.
        url = a.request("GET", f"/templates/{name}/files/{'c' * 64}").json()["url"]
        assert put(url.replace(f"tenant={a_tenant}", f"tenant={b_tenant}"), files_tar([("x", b"x")])).status == 401
        # The host's key does not see a tenant's templates as its own.
        assert E2b(daemon).request("GET", f"/templates/aliases/{name}").status == 404
    finally:
        for tenant, _ in fronts.values():
            r = admin.delete(f"/v1/tenants/{tenant}?purge=true")
            assert r.status == 200, r
            if tenant == a_tenant:
                removed = r.json()["removed_counts"]
                assert removed["images"] >= 1 and removed["template_file_sets"] == 1, removed
