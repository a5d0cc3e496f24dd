"""Images a tenant pulls, builds or imports are its own (issue 24): named in a namespace of its
own, unseen and unusable by other tenants through any route, never given to another because
its blobs are already on the disk (a tenant's pull of content stored for another must get every
blob from the registry to its own login), removed by a purge; the host's images stay every
tenant's to run but not to delete."""
import threading
import urllib.parse
from pathlib import Path

import pytest

import harness
from oci_images import File, Dir, build_image, host_files, make_layer
from oci_registry import OciRegistry
from test_e2b_control_plane import E2b
from test_image_build import build, context_tar
from test_tenants import cli, new_key, new_tenant

PROGRAMS = ["/bin/sh", "/bin/cat", "/bin/echo"]
SDK_DIR = Path(__file__).resolve().parents[2] / "sdk" / "python"


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def rootfs_tar(motd: bytes) -> bytes:
    """A runnable image's root as an import takes it: the host's shell and cat, and /etc/motd."""
    return make_layer(host_files(PROGRAMS) + [Dir("etc", 0o755), File("etc/motd", motd)])


@pytest.fixture(scope="module")
def image_daemon(session_dir, request):
    d = harness.Daemon(state_dir=session_dir / "tenant-images", log_path=session_dir / "daemon-tenant-images.log",
                       warm_pool=0)
    d.extra_args = ("--insecure-registry", "127.0.0.1")
    harness._LIVE_DAEMONS.append(d)
    request.addfinalizer(d.destroy)
    d.start()
    return d


@pytest.fixture(scope="module")
def private_image():
    return build_image([make_layer(host_files(PROGRAMS) + [Dir("etc", 0o755), File("etc/motd", b"a's private\n")])],
                       {"Cmd": ["/bin/cat", "/etc/motd"]})


@pytest.fixture(scope="module")
def registry(private_image):
    """A registry where team/private needs a login (alice's), and open/app is anyone's."""
    with OciRegistry(auth="token", users={"alice": "s3cret"}, public=("open/app",)) as r:
        r.put_image("team/private", "1", private_image)
        r.put_image("open/app", "1", build_image([make_layer(host_files(PROGRAMS) + [
            Dir("etc", 0o755), File("etc/motd", b"open\n")])], {"Cmd": ["/bin/cat", "/etc/motd"]}))
        yield r


@pytest.fixture(scope="module")
def tenants(image_daemon):
    admin = image_daemon.client()
    out = {"admin": admin}
    for side in ("a", "b"):
        tenant = new_tenant(admin)
        client, key = new_key(admin, tenant, "tenant-admin")
        out[side] = {"tenant": tenant, "client": client, "key": key["key"]}
    return out


def pull(client, ref: str, **body):
    return client.post("/v1/images/pull", {"image": ref, **body}, timeout=120)


def names(client, query: str = "") -> dict:
    r = client.get("/v1/images" + query)
    assert r.status == 200, r
    return {image["name"]: image for image in r.json()["images"]}


def motd(client, image: str) -> str:
    sandbox = client.create(image=image)
    try:
        return client.exec(sandbox["id"], ["/bin/cat", "/etc/motd"])["stdout"]
    finally:
        client.delete(f"/v1/sandboxes/{sandbox['id']}")


def test_a_pulled_image_is_its_tenants_alone_and_knowing_its_digest_gives_another_nothing(
        registry, private_image, tenants):
    a, b, admin = tenants["a"]["client"], tenants["b"]["client"], tenants["admin"]
    ref = f"{registry.host}/team/private:1"
    r = pull(a, ref, auth={"username": "alice", "password": "s3cret"})
    assert r.status == 201, r
    image = r.json()
    hexname = image["name"]
    assert image["references"] == [ref] and image["shared"] is False and "tenants" not in image, image
    assert motd(a, ref) == "a's private\n"

    # b: not listed, not found by any of its names, not run, not pulled without the login.
    assert hexname not in names(b)
    by_digest = f"{registry.host}/team/private@{private_image.digest}"
    for name in (ref, hexname, by_digest):
        r = b.get(f"/v1/images/{quoted(name)}")
        assert r.status == 404 and r.json()["error"]["code"] == "image_not_found", (name, r)
        r = b.post("/v1/sandboxes", {"image": name, "pull": "never"})
        assert r.status == 404, (name, r)
    r = b.post("/v1/sandboxes", {"image": by_digest})  # a pull on create: the registry refuses b
    assert r.status in (401, 403, 502) and r.json()["error"]["code"] != "image_not_found", r
    r = pull(b, by_digest)
    assert r.status in (401, 403, 502), r
    assert hexname not in names(b)
    # Nor does the host's key see it as the host's; it sees it as a's.
    assert admin.get(f"/v1/images/{hexname}").status == 404
    listed = names(admin)[hexname]
    assert listed["shared"] is False and listed["tenants"] == {tenants["a"]["tenant"]: [ref]}, listed
    assert names(admin, f"?tenant={tenants['a']['tenant']}")[hexname]["references"] == [ref]


def test_a_registry_of_anothers_making_cannot_hand_over_blobs_it_does_not_serve(registry, private_image, tenants):
    """b serves a's manifest (or one naming a's layer) from a registry of its own without the
    layer: the layer is on the daemon's disk, but b must fetch it, so both pulls fail."""
    a, b = tenants["a"]["client"], tenants["b"]["client"]
    assert pull(a, f"{registry.host}/team/private:1", auth={"username": "alice", "password": "s3cret"}).status == 201
    with OciRegistry() as evil:
        evil.put_blob("copy/same", private_image.config)
        evil.put_manifest("copy/same", "1", private_image.media_type, private_image.manifest)
        other = build_image(private_image.layers, {"Cmd": ["/bin/sh"]})
        evil.put_blob("copy/other", other.config)
        evil.put_manifest("copy/other", "1", other.media_type, other.manifest)
        for ref in (f"{evil.host}/copy/same:1", f"{evil.host}/copy/other:1"):
            r = pull(b, ref)
            assert r.status >= 400, (ref, r)
            assert all(f"{evil.host}/copy" not in " ".join(i.get("references", [])) for i in names(b).values())
        # A registry that does serve every blob to b makes it b's too (one copy on disk).
        for digest, blob in private_image.blobs.items():
            evil.put_blob("copy/full", blob)
        evil.put_manifest("copy/full", "1", private_image.media_type, private_image.manifest)
        events = b.request("POST", "/v1/images/pull", {"image": f"{evil.host}/copy/full:1"},
                           headers={"Accept": "application/x-ndjson"}, timeout=120)
        assert events.status == 200 and b'"status":"done"' in events.body.replace(b" ", b""), events
        assert b'"cached":true' not in events.body.replace(b" ", b""), events  # (b learns nothing of a's)
        assert motd(b, f"{evil.host}/copy/full:1") == "a's private\n"
        # Each names it in its own namespace.
        hexname = private_image.digest.removeprefix("sha256:")
        assert names(b)[hexname]["references"] == [f"{evil.host}/copy/full:1"]
        assert names(a)[hexname]["references"] == [f"{registry.host}/team/private:1"]
        # b letting go leaves it a's.
        assert b.delete(f"/v1/images/{quoted(f'{evil.host}/copy/full:1')}").status == 204
        assert hexname not in names(b) and hexname in names(a)


def test_imports_are_named_in_each_tenants_namespace_and_the_hosts_are_everyones_to_run(tenants):
    a, b, admin = tenants["a"]["client"], tenants["b"]["client"], tenants["admin"]
    headers = {"Content-Type": "application/x-tar"}
    r = admin.request("PUT", "/v1/images/tool", rootfs_tar(b"host's\n"), headers=headers)
    assert r.status == 201, r
    try:
        r = a.request("PUT", "/v1/images/tool", rootfs_tar(b"a's\n"), headers=headers)
        assert r.status == 201 and r.json()["references"] == ["tool"] and r.json()["shared"] is False, r
        assert a.request("PUT", "/v1/images/tool", rootfs_tar(b"again\n"), headers=headers).status == 409
        # The same name: a's own for a, the host's for b (which has none), the host's for the host.
        assert motd(a, "tool") == "a's\n"
        assert motd(b, "tool") == "host's\n"
        assert motd(admin, "tool") == "host's\n"
        # b runs the host's image but does not delete it; a deletes its own, and then sees the host's.
        r = b.delete("/v1/images/tool")
        assert r.status == 403 and r.json()["error"]["code"] == "image_not_owned", r
        assert a.delete("/v1/images/tool").status == 204
        assert motd(a, "tool") == "host's\n"
        # The host's key acts on a tenant's with ?tenant=.
        r = admin.request("PUT", f"/v1/images/mine?tenant={tenants['b']['tenant']}", rootfs_tar(b"b's\n"), headers=headers)
        assert r.status == 201, r
        assert motd(b, "mine") == "b's\n"
        assert a.get("/v1/images/mine").status == 404 and admin.get("/v1/images/mine").status == 404
        assert admin.delete(f"/v1/images/mine?tenant={tenants['b']['tenant']}").status == 204
        assert b.get("/v1/images/mine").status == 404
        # A tenant's key names no other tenant.
        r = a.get(f"/v1/images?tenant={tenants['b']['tenant']}")
        assert r.status == 404 and r.json()["error"]["code"] == "tenant_not_found", r
    finally:
        admin.delete("/v1/images/tool")


def test_a_tenants_build_is_its_own_with_its_own_cache_and_its_quotas(image_daemon, tenants):
    a, b, admin = tenants["a"]["client"], tenants["b"]["client"], tenants["admin"]
    context = context_tar({"Dockerfile": b"FROM host\nRUN echo built-by-$(id -u) > /built\n"})
    status, events = build(a, context, tag="web")
    assert status == 200 and events[-1]["status"] == "done", events[-1]
    image = events[-1]["image"]
    assert image["references"] == ["web"] and image["shared"] is False, image
    # b neither sees "web" nor reuses a's steps: its build of the same context runs them itself
    # and makes an image of its own.
    assert b.get("/v1/images/web").status == 404
    status, again = build(b, context, tag="web")
    assert status == 200 and again[-1]["status"] == "done", again[-1]
    assert [e.get("cached") for e in again if e["status"] == "step" and e["instruction"].startswith("RUN")] == [False]
    assert again[-1]["image"]["name"] != image["name"]
    assert names(b)[again[-1]["image"]["name"]]["references"] == ["web"]
    # a's own second build is cached.
    status, cached = build(a, context, tag="web")
    assert [e.get("cached") for e in cached if e["status"] == "step" and e["instruction"].startswith("RUN")] == [True]
    # A build's step sandboxes are the tenant's: its sandbox quota holds them back.
    tenant = tenants["b"]["tenant"]
    assert admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"sandboxes": 0}}).status == 200
    try:
        status, refused = build(b, context_tar({"Dockerfile": b"FROM host\nRUN echo other > /x\n"}), tag="other")
        assert status == 200 and refused[-1]["status"] == "error", refused[-1]
        assert refused[-1]["error"]["code"] == "quota_exceeded", refused[-1]
    finally:
        assert admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"sandboxes": None}}).status == 200


def test_a_tenants_images_count_against_its_image_quotas(image_daemon, registry):
    """"images" and "image_bytes": an image that would pass one is let go again (429, naming the
    quota) and nothing of it is left the tenant's; usage shows both."""
    admin = image_daemon.client()
    tenant = new_tenant(admin)
    client, _ = new_key(admin, tenant, "user")
    headers = {"Content-Type": "application/x-tar"}
    try:
        assert admin.request("PATCH", f"/v1/tenants/{tenant}", {"quotas": {"images": 1}}).status == 200
        assert client.request("PUT", "/v1/images/one", rootfs_tar(b"1\n"), headers=headers).status == 201
        r = client.request("PUT", "/v1/images/two", rootfs_tar(b"2\n"), headers=headers)
        assert r.status == 429 and r.json()["error"]["code"] == "quota_exceeded", r
        assert '"images"' in r.json()["error"]["message"], r
        r = pull(client, f"{registry.host}/open/app:1")
        assert r.status == 429 and '"images"' in r.json()["error"]["message"], r
        own = [i for i in names(client).values() if not i["shared"]]
        assert [i["references"] for i in own] == [["one"]], own
        usage = admin.get(f"/v1/tenants/{tenant}").json()["usage"]
        assert usage["images"] == 1 and usage["image_bytes"] == own[0]["size_bytes"] > 0, usage
        # Bytes: a cap below what one more image takes.
        assert admin.request("PATCH", f"/v1/tenants/{tenant}",
                             {"quotas": {"images": None, "image_bytes": usage["image_bytes"] + 1}}).status == 200
        r = client.request("PUT", "/v1/images/three", rootfs_tar(b"3\n"), headers=headers)
        assert r.status == 429 and '"image_bytes"' in r.json()["error"]["message"], r
        assert client.get("/v1/images/three").status == 404
        # Letting one go makes room.
        assert client.delete("/v1/images/one").status == 204
        assert client.request("PUT", "/v1/images/three", rootfs_tar(b"3\n"), headers=headers).status == 201
    finally:
        assert admin.delete(f"/v1/tenants/{tenant}?purge=true").status == 200


def test_the_python_sdk_pulls_lists_and_deletes_a_tenants_images(image_daemon, registry, tenants):
    import sys
    sys.path.insert(0, str(SDK_DIR))
    from bulkhead import Bulkhead, ForbiddenError, NotFoundError
    url = f"http://127.0.0.1:{image_daemon.port}"
    ref = f"{registry.host}/open/app:1"
    with Bulkhead(url=url, api_key=image_daemon.key) as host, \
            Bulkhead(url=url, api_key=tenants["a"]["key"]) as a, Bulkhead(url=url, api_key=tenants["b"]["key"]) as b:
        image = host.images.pull(ref, tenant=tenants["a"]["tenant"])
        assert image.source == "registry" and image.references == [ref] and image.shared is False, image
        assert a.images.get(ref).name == image.name
        assert image.name in [i.name for i in host.images.list(tenant=tenants["a"]["tenant"])]
        with pytest.raises(NotFoundError):
            b.images.get(ref)
        with pytest.raises(ForbiddenError):
            a.images.delete("host")
        a.images.delete(ref)
        with pytest.raises(NotFoundError):
            a.images.get(ref)


def test_scopes_hold_on_image_routes(image_daemon, tenants):
    admin = image_daemon.client()
    reader, _ = new_key(admin, tenants["a"]["tenant"], "read-only")
    assert reader.get("/v1/images").status == 200
    for method, path, body in [("POST", "/v1/images/pull", {"image": "127.0.0.1:1/x:1"}),
                               ("PUT", "/v1/images/x", b"tar"), ("DELETE", "/v1/images/x", None),
                               ("POST", "/v1/images/push", {"image": "x", "target": "127.0.0.1:1/x:1"}),
                               ("POST", "/v1/images/build", b"tar"), ("POST", "/v1/images/gc", {})]:
        r = reader.request(method, path, body=body)
        assert r.status == 403 and r.json()["error"]["code"] == "insufficient_scope", (method, path, r)
    # gc stays the host's: a tenant-admin key is refused it too.
    r = tenants["a"]["client"].post("/v1/images/gc", {})
    assert r.status == 403, r


def test_a_purge_removes_the_tenants_images_and_leaves_what_others_hold(image_daemon, registry, private_image):
    admin = image_daemon.client()
    tenant = new_tenant(admin)
    client, _ = new_key(admin, tenant, "tenant-admin")
    other = new_tenant(admin)
    other_client, _ = new_key(admin, other, "user")
    headers = {"Content-Type": "application/x-tar"}
    assert client.request("PUT", "/v1/images/only-mine", rootfs_tar(b"mine\n"), headers=headers).status == 201
    assert pull(client, f"{registry.host}/open/app:1").status == 201
    assert pull(other_client, f"{registry.host}/open/app:1").status == 201
    own = {name: image for name, image in names(admin).items() if tenant in image.get("tenants", {})}
    assert len(own) == 2, own
    r = admin.delete(f"/v1/tenants/{tenant}")
    assert r.status == 409 and "2 images" in r.json()["error"]["message"], r
    r = admin.delete(f"/v1/tenants/{tenant}?purge=true")
    assert r.status == 200, r
    proof = r.json()
    removed = {image["name"]: image for image in proof["removed"]["images"]}
    assert set(removed) == set(own), proof
    assert proof["remaining"]["images"] == 0 and proof["removed_counts"]["images"] == 2, proof
    shared = next(name for name, image in own.items() if image["source"] == "registry")
    assert removed[shared]["files_removed"] is False
    assert next(i for n, i in removed.items() if n != shared)["files_removed"] is True
    after = names(admin)
    assert shared in after and tenant not in after[shared].get("tenants", {})
    assert all(n not in after for n in removed if n != shared)
    assert motd(other_client, f"{registry.host}/open/app:1") == "open\n"
    admin.delete(f"/v1/tenants/{other}?purge=true")


def test_the_e2b_front_and_the_cli_hold_a_tenant_to_its_images(image_daemon, tenants):
    a, b = tenants["a"], tenants["b"]
    headers = {"Content-Type": "application/x-tar"}
    assert a["client"].request("PUT", "/v1/images/e2b-own", rootfs_tar(b"e2b\n"), headers=headers).status == 201
    try:
        # E2B: a's key starts a sandbox of its own image by name; b's key is told no such template.
        r = E2b(image_daemon, a["key"]).request("POST", "/sandboxes", {"templateID": "e2b-own", "timeout": 60})
        assert r.status == 201, r
        sandbox = r.json()["sandboxID"]
        assert a["client"].exec(sandbox, ["/bin/cat", "/etc/motd"])["stdout"] == "e2b\n"
        a["client"].delete(f"/v1/sandboxes/{sandbox}")
        r = E2b(image_daemon, b["key"]).request("POST", "/sandboxes", {"templateID": "e2b-own", "timeout": 60})
        assert r.status == 404, r
        assert E2b(image_daemon, b["key"]).request("GET", "/templates/aliases/e2b-own").status == 404
        # CLI: a tenant's key lists its own; the host's key lists every holder, or one tenant's.
        mine = cli(image_daemon, "image", "ls", key=a["key"])
        assert mine.returncode == 0 and "e2b-own" in mine.stdout, mine
        assert "e2b-own" not in cli(image_daemon, "image", "ls", key=b["key"]).stdout
        every = cli(image_daemon, "image", "ls")
        assert every.returncode == 0 and "HELD BY" in every.stdout and a["tenant"] in every.stdout, every
        theirs = cli(image_daemon, "image", "inspect", "e2b-own", "--tenant", a["tenant"])
        assert theirs.returncode == 0 and '"shared": false' in theirs.stdout, theirs
        gone = cli(image_daemon, "image", "rm", "e2b-own", "--tenant", a["tenant"])
        assert gone.returncode == 0, gone
        assert a["client"].get("/v1/images/e2b-own").status == 404
    finally:
        a["client"].delete("/v1/images/e2b-own")


def test_a_pull_that_ends_after_its_tenant_was_purged_leaves_nothing_to_a_new_tenant_of_that_name(
        image_daemon, registry):
    """The purge cannot wait out a pull under way (it may take minutes): the image it stores
    after is held by a tenant that is gone, and a tenant made again with that name starts
    without it."""
    admin = image_daemon.client()
    tenant = new_tenant(admin)
    client, _ = new_key(admin, tenant, "user")
    image = build_image([make_layer(host_files(PROGRAMS) + [Dir("etc", 0o755), File("etc/motd", b"late\n")])],
                        {"Cmd": ["/bin/cat", "/etc/motd"]})
    registry.put_image("open/late", "1", image)
    registry.public.add("open/late")
    registry.fault(image.layer_digests()[0], stall=3)
    results = []
    puller = threading.Thread(target=lambda: results.append(pull(client, f"{registry.host}/open/late:1")))
    puller.start()
    try:
        harness.wait_until(lambda: any("open/late/blobs" in r.path for r in registry.requests(method="GET")),
                           timeout=30)
        assert admin.delete(f"/v1/tenants/{tenant}?purge=true").status == 200
    finally:
        puller.join(60)
        registry.clear_faults()
    assert results and results[0].status == 201, results  # (the key was good when it asked)
    hexname = image.digest.removeprefix("sha256:")
    assert tenant in names(admin)[hexname]["tenants"]
    assert admin.post("/v1/tenants", {"name": tenant}).status == 201
    again, _ = new_key(admin, tenant, "user")
    assert hexname not in names(again) and again.get(f"/v1/images/{quoted(f'{registry.host}/open/late:1')}").status == 404
    assert hexname not in names(admin)
    assert admin.delete(f"/v1/tenants/{tenant}").status == 204


def test_who_holds_an_image_survives_a_restart(image_daemon, tenants):
    """Run last: the module's daemon restarts."""
    a, b = tenants["a"], tenants["b"]
    headers = {"Content-Type": "application/x-tar"}
    assert a["client"].request("PUT", "/v1/images/kept", rootfs_tar(b"kept\n"), headers=headers).status == 201
    image_daemon.stop()
    image_daemon.start()
    port = image_daemon.client().port  # (the restarted daemon's own)
    a_client, b_client = harness.Client(a["key"], port=port), harness.Client(b["key"], port=port)
    assert motd(a_client, "kept") == "kept\n"
    assert b_client.get("/v1/images/kept").status == 404
    assert image_daemon.client().get("/v1/images/kept").status == 404
    assert a_client.delete("/v1/images/kept").status == 204
