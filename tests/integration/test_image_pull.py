"""Images pulled from a registry (issue 22): a registry the test starts on loopback
(oci_registry.py), a daemon told it is insecure, and real sandboxes running what was pulled.
The layers' whiteouts and opaque directories, the image config, multi-platform indexes, auth,
the blob store's sharing and resume, and hostile registries and layers."""

import itertools
import json
import os
import signal
import time
import urllib.parse
from pathlib import Path

import pytest

import harness
from oci_images import (Device, Dir, File, Hardlink, Opaque, Symlink, Whiteout, build_image, build_index, digest_of,
                        host_files, make_layer)
from oci_registry import OciRegistry

PROGRAMS = ["/bin/sh", "/bin/cat", "/usr/bin/id", "/usr/bin/env", "/bin/ls"]


@pytest.fixture(scope="module")
def base_layer():
    return make_layer(host_files(PROGRAMS) + [
        Dir("etc", 0o755),
        File("etc/motd", b"from the base\n"),
        File("etc/gone", b"whited out above\n"),
        Dir("cache", 0o755),
        File("cache/old", b"lower\n"),
        Dir("srv", 0o755),
        File("srv/kept", b"kept\n"),
        File("bin/suid", b"#!/bin/sh\n", 0o4755),
        Dir("dev", 0o755),
        Device("dev/null", "char", 1, 3),
    ])


@pytest.fixture(scope="module")
def top_layer():
    return make_layer([
        File("etc/motd", b"from the top\n"),
        Whiteout("etc/gone"),
        File("cache/new", b"upper\n"),  # before the marker in the tar: kept all the same
        Opaque("cache"),
        Hardlink("srv/link", "srv/kept"),
        Dir("home", 0o755),
        Dir("home/app", 0o755, 1000, 1000),
    ])


CONFIG = {"Env": ["GREETING=hello from the image", "PATH=/usr/local/bin:/usr/bin:/bin"],
          "WorkingDir": "/home/app", "User": "1000:1000", "Cmd": ["/bin/cat", "/etc/motd"],
          "ExposedPorts": {"8080/tcp": {}}, "Labels": {"team": "py"}}


@pytest.fixture(scope="module")
def registry(base_layer, top_layer):
    with OciRegistry() as r:
        r.put_image("team/app", "1.0", build_image([base_layer, top_layer], CONFIG))
        yield r


@pytest.fixture(scope="module")
def pull_daemon(session_dir, request):
    d = harness.Daemon(state_dir=session_dir / "pull", log_path=session_dir / "daemon-pull.log", warm_pool=0)
    d.extra_args = ("--insecure-registry", "127.0.0.1")
    harness._LIVE_DAEMONS.append(d)
    request.addfinalizer(d.destroy)
    d.start()
    return d


@pytest.fixture
def pc(pull_daemon):
    return pull_daemon.client()


def gets(registry, path_part: str) -> list:
    """The GET requests the registry had whose path holds path_part, in order."""
    return [r for r in registry.requests(method="GET") if path_part in r.path]


def quoted(ref: str) -> str:
    return urllib.parse.quote(ref, safe="")


def pull(client, ref: str, **body):
    return client.post("/v1/images/pull", {"image": ref, **body}, timeout=120)


def pull_events(client, ref: str) -> list[dict]:
    r = client.request("POST", "/v1/images/pull", {"image": ref}, headers={"Accept": "application/x-ndjson"})
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in r.body.decode().splitlines() if line]


def run(client, sandbox_id, script) -> str:
    r = client.exec(sandbox_id, ["/bin/sh", "-c", script])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def blobs_on_disk(daemon) -> set:
    return {"sha256:" + p.name for p in (daemon.state_dir / "blobs" / "sha256").iterdir()}


def test_a_pulled_image_runs_its_layers_and_config(pull_daemon, pc, registry, request):
    ref = f"{registry.host}/team/app:1.0"
    r = pull(pc, ref)
    assert r.status == 201, r
    image = r.json()
    assert image["source"] == "registry" and image["digest"].startswith("sha256:")
    assert image["references"] == [ref]
    assert image["config"]["exposed_ports"] == ["8080/tcp"]
    assert image["config"]["cmd"] == ["/bin/cat", "/etc/motd"]
    assert image["config"]["labels"] == {"team": "py"}
    assert pc.get("/v1/images/" + quoted(ref)).json()["digest"] == image["digest"]
    assert pc.get("/v1/images/" + image["name"]).json()["references"] == [ref]
    assert any(i["name"] == image["name"] for i in pc.get("/v1/images").json()["images"])

    sb = pc.create(image=ref)
    request.addfinalizer(lambda: pc.remove(sb["id"]))
    assert sb["image"] == ref and sb["image_id"] == image["name"]
    assert sb["workdir"] == "/home/app" and sb["user"] == "1000:1000"
    assert sb["env"]["GREETING"] == "hello from the image"
    out = run(pc, sb["id"], 'cat /etc/motd; echo "$GREETING"; pwd; id -u; '
                            'ls /etc; ls /cache; cat /srv/link; ls -l /bin/suid')
    lines = out.splitlines()
    assert lines[0] == "from the top", out
    assert lines[1] == "hello from the image" and lines[2] == "/home/app" and lines[3] == "1000", out
    assert "gone" not in out, "a whiteout removes the lower layer's file"
    assert "new" in out and "old" not in out, "an opaque directory keeps only this layer's entries"
    assert "kept" in out, "a hard link to a lower layer's file"
    assert "-rwsr-xr-x" in out, "setuid kept on the image's own root"
    # The stored tree belongs to the stored id range, not to host accounts.
    rootfs = pull_daemon.state_dir / "images" / image["name"] / "rootfs"
    st = (rootfs / "bin" / "suid").stat()
    assert st.st_uid >= 1 << 20 and st.st_mode & 0o4000, "no host-root setuid file"
    assert not (rootfs / "dev" / "null").exists() or not (rootfs / "dev" / "null").is_char_device()


def test_pull_progress_streams_and_a_second_pull_fetches_nothing(pc, registry, base_layer):
    ref = f"{registry.host}/team/app:1.0"
    pc.delete("/v1/images/" + quoted(ref))
    events = pull_events(pc, ref)
    kinds = [e["status"] for e in events]
    assert kinds[0] == "resolving" and "resolved" in kinds and "unpacking" in kinds and kinds[-1] == "done", kinds
    resolved = next(e for e in events if e["status"] == "resolved")
    assert resolved["total_bytes"] > 0 and len(resolved["layers"]) == 2
    base = digest_of(base_layer)
    before = len(gets(registry, base[7:]))
    again = pull_events(pc, ref)
    assert again[-1]["status"] == "done"
    assert len(gets(registry, base[7:])) == before, "a stored layer is not fetched again"


def test_images_sharing_a_layer_store_it_once_and_rm_collects_what_none_uses(pull_daemon, pc, registry, base_layer):
    other = build_image([base_layer, make_layer([File("etc/motd", b"other\n")])], {"Cmd": ["/bin/sh"]})
    registry.put_image("team/other", "v1", other)
    base = digest_of(base_layer)
    fetched_before = len(gets(registry, base[7:]))
    assert pull(pc, f"{registry.host}/team/app:1.0").status == 201
    r = pull(pc, f"{registry.host}/team/other:v1")
    assert r.status == 201, r
    assert len(gets(registry, base[7:])) == fetched_before, "the shared base layer came from the store"
    assert base in blobs_on_disk(pull_daemon)
    # Two references on one image: rm of one takes the reference only.
    ref2 = f"{registry.host}/team/other:latest"
    registry.put_image("team/other", "latest", other)
    assert pull(pc, ref2).json()["references"] == [f"{registry.host}/team/other:v1", ref2]
    assert pc.delete("/v1/images/" + quoted(ref2)).status == 204
    assert pc.get("/v1/images/" + quoted(f"{registry.host}/team/other:v1")).status == 200
    assert pc.get("/v1/images/" + quoted(ref2)).status == 404
    # The last reference takes the image, and its own blobs, but not the shared layer.
    own = set(other.layer_digests()[1:]) | {other.digest}
    assert pc.delete("/v1/images/" + quoted(f"{registry.host}/team/other:v1")).status == 204
    on_disk = blobs_on_disk(pull_daemon)
    assert not own & on_disk, "blobs no image uses are removed"
    assert base in on_disk, "a layer another image uses stays"
    gc = pc.post("/v1/images/gc").json()
    assert gc["deferred"] is False


def test_an_index_gives_the_hosts_platform_and_zstd_and_docker_manifests_unpack(pc, registry):
    arm = build_image([make_layer([File("arch", b"arm64\n")])], {}, architecture="arm64")
    amd = build_image([make_layer(host_files(["/bin/cat"]) + [File("arch", b"amd64\n")], "zstd")],
                      {"Cmd": ["/bin/cat", "/arch"]})
    registry.put_image("multi/app", "latest", build_index([(arm, {"os": "linux", "architecture": "arm64"}),
                                                           (amd, {"os": "linux", "architecture": "amd64"})]))
    r = pull(pc, f"{registry.host}/multi/app")
    assert r.status == 201, r
    assert r.json()["digest"] == amd.digest, "the amd64 manifest, though arm64 is listed first"
    r = pull(pc, f"{registry.host}/multi/app", platform="linux/s390x")
    harness.assert_error_shape(r, 404)
    assert "linux/arm64" in r.json()["error"]["message"]

    docker = build_image([make_layer(host_files(["/bin/cat"]) + [File("kind", b"docker\n")])],
                         {"Cmd": ["/bin/cat", "/kind"]}, media="docker")
    registry.put_image("docker/app", "1", docker)
    r = pull(pc, f"{registry.host}/docker/app:1")
    assert r.status == 201, r
    # By digest, as well as by tag.
    r = pull(pc, f"{registry.host}/docker/app@{docker.digest}")
    assert r.status == 201 and r.json()["digest"] == docker.digest


def test_create_pulls_on_first_use_unless_told_never(pc, registry, request):
    image = build_image([make_layer(host_files(["/bin/sh", "/bin/cat"]) + [File("hello", b"lazy\n")])], {})
    registry.put_image("lazy/app", "1", image)
    ref = f"{registry.host}/lazy/app:1"
    r = pc.post("/v1/sandboxes", {"image": ref, "pull": "never"})
    assert harness.assert_error_shape(r, 404)["code"] == "image_not_found"
    sb = pc.create(image=ref)
    request.addfinalizer(lambda: pc.remove(sb["id"]))
    assert run(pc, sb["id"], "cat /hello") == "lazy\n"
    # In use: the image cannot go.
    r = pc.delete("/v1/images/" + quoted(ref))
    assert harness.assert_error_shape(r, 409)["code"] == "image_in_use"
    r = pc.post("/v1/sandboxes", {"image": f"{registry.host}/lazy/absent:1"})
    harness.assert_error_shape(r, 404)


def test_token_auth_and_basic_auth(pull_daemon, pc, session_dir, base_layer):
    image = build_image([base_layer], {})
    with OciRegistry(auth="token", users={"alice": "s3cret"}, public=("open/app",)) as reg:
        reg.put_image("team/private", "1", image)
        reg.put_image("open/app", "1", image)
        r = pull(pc, f"{reg.host}/team/private:1")
        assert harness.assert_error_shape(r, 401)["code"] == "registry_unauthorized"
        r = pull(pc, f"{reg.host}/team/private:1", auth={"username": "alice", "password": "not-her-pa55"})
        harness.assert_error_shape(r, 401)
        assert "pa55" not in r.body.decode() and "s3cret" not in r.body.decode(), "no password in an error"
        r = pull(pc, f"{reg.host}/team/private:1", auth={"username": "alice", "password": "s3cret"})
        assert r.status == 201, r
        assert pull(pc, f"{reg.host}/open/app:1").status == 201, "anonymous pull of a public repository"
        assert gets(reg, "/token"), "the token dance happened"
    with OciRegistry(auth="basic", users={"bob": "pw"}) as reg:
        reg.put_image("team/basic", "1", image)
        harness.assert_error_shape(pull(pc, f"{reg.host}/team/basic:1"), 401)
        # Logins from a Docker config.json given to the daemon.
        auth_file = session_dir / "docker-config.json"
        auth_file.write_text(json.dumps({"auths": {reg.host: {"auth": "Ym9iOnB3"}}}))  # bob:pw
        d = harness.Daemon(state_dir=session_dir / "pull-auth", log_path=session_dir / "daemon-pull-auth.log")
        d.extra_args = ("--insecure-registry", "127.0.0.1", "--registry-auth", str(auth_file))
        try:
            d.start()
            assert pull(d.client(), f"{reg.host}/team/basic:1").status == 201
        finally:
            d.destroy()


def test_hostile_registries_leave_nothing_behind(pull_daemon, pc, registry):
    state = pull_daemon.state_dir
    images_before = {i["name"] for i in pc.get("/v1/images").json()["images"]}

    counter = itertools.count()

    def refused(image, want, code=None, blob_checked=True, **fault):
        repo = f"hostile/{next(counter)}"
        registry.put_image(repo, "1", image)
        if fault:
            registry.fault(image.layer_digests()[0], **fault)
        r = pull(pc, f"{registry.host}/{repo}:1")
        err = harness.assert_error_shape(r, want)
        if code:
            assert err["code"] == code, r
        assert {i["name"] for i in pc.get("/v1/images").json()["images"]} == images_before
        if blob_checked:
            assert image.layer_digests()[0] not in blobs_on_disk(pull_daemon), "a bad blob never enters the store"
        return err

    layer = lambda text: make_layer(host_files(["/bin/cat"]) + [File("f", text.encode() * 1000)])
    refused(build_image([layer("a")], {}), (422, 502), "digest_mismatch", wrong_bytes=True)
    refused(build_image([layer("b")], {}), 502, truncate_at=1000)
    refused(build_image([layer("c")], {}), (422, 502), "blob_too_large", extra_bytes=4096)
    refused(build_image([layer("d")], {}), 502, status=500)

    # A manifest whose layer claims a terabyte: refused before any download.
    huge = build_image([layer("e")], {})
    doc = json.loads(huge.manifest)
    doc["layers"][0]["size"] = 1 << 40
    huge.manifest = json.dumps(doc).encode()
    refused(huge, 507)

    # A manifest that is not what its digest says.
    liar = build_image([layer("f")], {})
    registry.put_image("hostile/liar", "1", liar)
    registry.fault(liar.digest, wrong_bytes=True)
    r = pull(pc, f"{registry.host}/hostile/liar@{liar.digest}")
    assert harness.assert_error_shape(r, 502)["code"] == "digest_mismatch"

    # Layers that try to write outside the image.
    sentinel = Path("/tmp/bulkhead-escape-sentinel")
    sentinel.unlink(missing_ok=True)
    for entries in ([File("../../../../tmp/bulkhead-escape-sentinel", b"x")],
                    [File("/tmp/bulkhead-escape-sentinel", b"x")],
                    [File("a/../../tmp/bulkhead-escape-sentinel", b"x")],
                    [Hardlink("h", "../../../etc/passwd")]):
        # (the blob itself is what the registry meant to send: it stays until collected)
        err = refused(build_image([make_layer(entries)], {}), 422, "invalid_image", blob_checked=False)
        assert "escape" in err["message"] or "out of the image" in err["message"] or "absolute" in err["message"]
    # A symlink out, then a write through it: refused (as an import refuses it), never on the host.
    r = pull_through_symlink(pc, registry)
    assert "symlink" in harness.assert_error_shape(r, 422)["message"]
    assert not sentinel.exists()
    assert not list(state.glob("images/*.tmp-*")), "no half-made image is left"


def pull_through_symlink(pc, registry):
    image = build_image([make_layer([Dir("tmp", 0o1777),
                                     Symlink("out", "/tmp"),
                                     File("out/bulkhead-escape-sentinel", b"inside\n")])], {})
    registry.put_image("hostile/symlink", "1", image)
    return pull(pc, f"{registry.host}/hostile/symlink:1")


def test_a_dropped_download_resumes_with_range_and_a_redirect_gets_no_credentials(pc, registry):
    big = make_layer([File("big", os.urandom(3 << 20))], "none")
    image = build_image([big], {})
    registry.put_image("resume/app", "1", image)
    registry.fault(digest_of(big), drop_after=1 << 20)
    r = pull(pc, f"{registry.host}/resume/app:1")
    assert r.status == 201, r
    ranges = [q.range for q in gets(registry, digest_of(big)[7:])]
    assert ranges[0] is None and len(ranges) == 2, ranges
    resumed_at = int(ranges[1][len("bytes="):-1])
    assert 0 < resumed_at <= 1 << 20, "the second request went on from what the first delivered"

    moved = build_image([make_layer([File("moved", b"storage\n")])], {})
    registry.put_image("redirect/app", "1", moved)
    registry.fault(moved.layer_digests()[0], redirect=True)
    r = pull(pc, f"{registry.host}/redirect/app:1")
    assert r.status == 201, r
    storage = [q for q in gets(registry, "/storage/")]
    assert storage and all(not q.auth for q in storage)


def test_a_daemon_killed_mid_pull_leaves_a_store_the_next_pull_completes(session_dir):
    layer = make_layer([File("big", os.urandom(4 << 20))], "none")
    image = build_image([layer], {})
    with OciRegistry() as reg:
        reg.put_image("kill/app", "1", image)
        reg.fault(digest_of(layer), stall_at=2 << 20, stall=30)
        d = harness.Daemon(state_dir=session_dir / "pull-kill", log_path=session_dir / "daemon-pull-kill.log")
        d.extra_args = ("--insecure-registry", "127.0.0.1")
        try:
            d.start()
            c = d.client()
            conn = c.connection(timeout=60)
            conn.request("POST", "/v1/images/pull", body=json.dumps({"image": f"{reg.host}/kill/app:1"}),
                         headers={"Authorization": f"Bearer {d.key}", "Content-Type": "application/json"})
            partial = d.state_dir / "blobs" / "partial" / digest_of(layer)[7:]
            assert harness.wait_until(lambda: partial.exists() and partial.stat().st_size >= 1 << 20, 20)
            time.sleep(0.5)  # the stall: nothing more arrives
            d.stop(signal.SIGKILL)
            conn.close()
            kept = partial.stat().st_size
            reg.clear_faults()
            d.start()
            r = pull(d.client(), f"{reg.host}/kill/app:1")
            assert r.status == 201, r
            ranges = [q.range for q in gets(reg, digest_of(layer)[7:])]
            assert ranges[-1] == f"bytes={kept}-", ranges
            assert not partial.exists()
        finally:
            d.destroy()


def test_an_image_keeps_a_warm_pool_that_follows_its_tag(session_dir, base_layer, top_layer, request):
    """--warm-pool REF=N: the image is pulled at start, creates from it are served ready, a pull
    that moves the tag moves the pool, and deleting the image empties it."""
    with OciRegistry() as reg:
        reg.put_image("pool/app", "1", build_image([base_layer, top_layer], CONFIG))
        ref = f"{reg.host}/pool/app:1"
        d = harness.Daemon(state_dir=session_dir / "pull-pool", log_path=session_dir / "daemon-pull-pool.log")
        d.extra_args = ("--insecure-registry", "127.0.0.1", "--warm-pool", f"{ref}=2")
        request.addfinalizer(d.destroy)
        d.start()
        c = d.client()
        assert harness.wait_until(lambda: c.metric("bulkhead_warm_pool_ready") == 2, timeout=90), d.log_tail()
        first = c.get("/v1/images/" + quoted(ref)).json()

        hits = c.metric("bulkhead_warm_pool_hits_total")
        sb = c.create(image=ref)
        assert c.metric("bulkhead_warm_pool_hits_total") == hits + 1
        assert sb["image_id"] == first["name"] and sb["workdir"] == "/home/app"
        assert run(c, sb["id"], 'cat /etc/motd; echo "$GREETING"; pwd') == \
            "from the top\nhello from the image\n/home/app\n"
        c.remove(sb["id"])

        # The tag moves: a pull of it moves the pool to the new image.
        reg.put_image("pool/app", "1", build_image([base_layer, make_layer([File("etc/motd", b"version 2\n")])],
                                                   CONFIG))
        second = pull(c, ref).json()
        assert second["name"] != first["name"]
        assert harness.wait_until(lambda: c.metric("bulkhead_warm_pool_ready") == 2, timeout=60)
        hits = c.metric("bulkhead_warm_pool_hits_total")
        sb = c.create(image=ref)
        assert c.metric("bulkhead_warm_pool_hits_total") == hits + 1
        assert sb["image_id"] == second["name"]
        assert run(c, sb["id"], "cat /etc/motd") == "version 2\n"
        c.remove(sb["id"])

        # Deleted, the image takes its pool with it (and no pooled sandbox keeps it in use).
        assert c.delete("/v1/images/" + quoted(ref)).status == 204
        assert harness.wait_until(lambda: c.metric("bulkhead_warm_pool_ready") == 0, timeout=30)
        assert not (d.state_dir / "images" / second["name"]).exists()


def test_bad_pull_requests_are_clear_4xx(pc):
    for body in ({}, {"image": 7}, {"image": "UPPER/case"}, {"image": "r.example/x", "platform": "amd64"},
                 {"image": "r.example/x", "auth": "alice"}, {"image": "x@sha256:abc"}):
        harness.assert_error_shape(pc.post("/v1/images/pull", body), (400, 422))
    harness.assert_error_shape(pc.post("/v1/images/pull", "{not json"), 400)
    # A name without a registry and no --default-registry: nowhere to look.
    harness.assert_error_shape(pc.post("/v1/images/pull", {"image": "team/app:1"}), (400, 422))
    # A registry that is not there.
    harness.assert_error_shape(pc.post("/v1/images/pull", {"image": f"127.0.0.1:{harness.free_port()}/x:1"}), 502)
    harness.assert_error_shape(pc.get("/v1/images/" + quoted("127.0.0.1:1/none:1")), 404)
    harness.assert_error_shape(pc.delete("/v1/images/" + quoted("127.0.0.1:1/none:1")), 404)


def test_push_writes_pulled_and_imported_images_that_pull_back(pull_daemon, pc, registry, request):
    ref = f"{registry.host}/team/app:1.0"
    pulled = pull(pc, ref).json()
    alice = {"username": "alice", "password": "s3cret"}
    with OciRegistry(auth="token", users={"alice": "s3cret"}) as reg:
        # Without a login the registry refuses; the host image is no image to push.
        r = pc.post("/v1/images/push", {"image": ref, "target": f"{reg.host}/mirror/app:1"})
        assert harness.assert_error_shape(r, 401)["code"] == "registry_unauthorized"
        r = pc.post("/v1/images/push", {"image": "host", "target": f"{reg.host}/mirror/host:1", "auth": alice})
        assert harness.assert_error_shape(r, 422)["code"] == "image_not_pushable"

        # A pulled image goes with its own blobs, byte for byte: the same digest there.
        r = pc.post("/v1/images/push", {"image": ref, "target": f"{reg.host}/mirror/app:1", "auth": alice})
        assert r.status == 200, r
        assert r.json() == {"reference": f"{reg.host}/mirror/app:1", "digest": pulled["digest"]}
        uploads = len(reg.requests(kind="upload"))
        events = [json.loads(line) for line in pc.request(
            "POST", "/v1/images/push", {"image": ref, "target": f"{reg.host}/mirror/app:2", "auth": alice},
            headers={"Accept": "application/x-ndjson"}).body.decode().splitlines()]
        assert events[-1]["status"] == "done" and events[-1]["pushed"]["digest"] == pulled["digest"], events[-1]
        assert {e["status"] for e in events[1:-1]} == {"exists"}, "blobs the registry has are not sent again"
        assert len(reg.requests(kind="upload")) == uploads
        r = pull(pc, f"{reg.host}/mirror/app:2", auth=alice)
        assert r.status == 201 and r.json()["digest"] == pulled["digest"]

        # An imported image goes as one layer of its tree, owners as inside the image.
        tarball = make_layer(host_files(["/bin/sh", "/bin/cat", "/bin/ls"]) +
                             [File("hello", b"imported\n", 0o640, 1000, 1000)], "gzip")
        r = pc.request("PUT", "/v1/images/push-imported", tarball, headers={"Content-Type": "application/x-tar"})
        assert r.status == 201, r
        request.addfinalizer(lambda: pc.delete("/v1/images/push-imported"))
        target = f"{reg.host}/team/imported:1"
        r = pc.post("/v1/images/push", {"image": "push-imported", "target": target, "auth": alice})
        assert r.status == 200, r
        digest = r.json()["digest"]
        r = pull(pc, target, auth=alice)
        assert r.status == 201 and r.json()["digest"] == digest
        sb = pc.create(image=target)
        request.addfinalizer(lambda: pc.remove(sb["id"]))
        assert run(pc, sb["id"], "cat /hello; ls -ln /hello").startswith("imported\n-rw-r----- 1 1000 1000 ")


def test_the_e2b_front_creates_from_a_registry_reference(pull_daemon, registry, request):
    image = build_image([make_layer(host_files(["/bin/sh", "/bin/cat"]) + [File("hello", b"from e2b\n")])], {})
    registry.put_image("e2b/app", "1", image)
    ref = f"{registry.host}/e2b/app:1"
    url = urllib.parse.urlsplit(pull_daemon.e2b_url)
    conn = harness.http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    conn.request("POST", "/sandboxes", body=json.dumps({"templateID": ref, "timeout": 60}),
                 headers={"X-API-KEY": pull_daemon.e2b_key, "Content-Type": "application/json"})
    response = conn.getresponse()
    created = json.loads(response.read())
    conn.close()
    assert response.status == 201, created
    assert created["templateID"] == ref
    pc = pull_daemon.client()
    request.addfinalizer(lambda: pc.remove(created["sandboxID"]))
    assert run(pc, created["sandboxID"], "cat /hello") == "from e2b\n"
