"""The E2B front with tenants' keys (issue 24): a tenant's API key taken as X-API-KEY is that
tenant, as on the native API: the sandboxes it creates are its own, lists show it its own,
another tenant's ids answer 404 on every sandbox route, read-only keys only read, templates (the
host's shared images) are the host's key's, and quotas hold."""
import pytest

from test_e2b_control_plane import E2b
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


def test_read_only_keys_read_and_templates_are_the_hosts(daemon, e2b_tenants):
    a = e2b_tenants["a"]
    admin = daemon.client()
    _, key = new_key(admin, a["tenant"], "read-only")
    reader = E2b(daemon, key["key"])
    assert reader.request("GET", f"/sandboxes/{a['sandbox']}").status == 200
    r = reader.request("POST", "/sandboxes", {"templateID": "base"})
    assert r.status == 403, r
    assert reader.request("DELETE", f"/sandboxes/{a['sandbox']}").status == 403
    for method, path in [("POST", "/v3/templates"), ("POST", "/templates/tags"), ("GET", "/templates/x/tags"),
                         ("POST", "/v2/templates/x/builds/y")]:
        r = a["e2b"].request(method, path, {} if method == "POST" else None)
        assert r.status == 403, (method, path, r)
    assert a["e2b"].request("GET", "/templates/aliases/base").status == 200
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
