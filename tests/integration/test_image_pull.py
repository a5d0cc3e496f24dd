"""Images pulled from a registry (issue 22): a registry the test starts on loopback
(oci_registry.py), a daemon told it is insecure, and real sandboxes running what was pulled.
The layers' whiteouts and opaque directories, the image config, multi-platform indexes, auth,
the blob store's sharing and resume, and hostile registries and layers."""

import json
import os
import signal
import time
import urllib.parse
from pathlib import Path

import pytest

import harness
from oci_registry import Entry, Fault, Registry, build_image, build_index, digest_of, host_files, make_layer

PROGRAMS = ["/bin/sh", "/bin/cat", "/usr/bin/id", "/usr/bin/env", "/bin/ls"]


@pytest.fixture(scope="module")
def base_layer():
    return make_layer(host_files(PROGRAMS) + [
        Entry("etc", "dir", mode=0o755),
        Entry("etc/motd", data=b"from the base\n"),
        Entry("etc/gone", data=b"whited out above\n"),
        Entry("cache", "dir", mode=0o755),
        Entry("cache/old", data=b"lower\n"),
        Entry("srv", "dir", mode=0o755),
        Entry("srv/kept", data=b"kept\n"),
        Entry("bin/suid", data=b"#!/bin/sh\n", mode=0o4755),
        Entry("dev", "dir", mode=0o755),
        Entry("dev/null", "chardev", mode=0o666),
    ])


@pytest.fixture(scope="module")
def top_layer():
    return make_layer([
        Entry("etc/motd", data=b"from the top\n"),
        Entry("etc/gone", "whiteout"),
        Entry("cache/new", data=b"upper\n"),  # before the marker in the tar: kept all the same
        Entry("cache", "opaque"),
        Entry("srv/link", "hardlink", target="srv/kept"),
        Entry("home", "dir", mode=0o755),
        Entry("home/app", "dir", mode=0o755, uid=1000, gid=1000),
    ])


CONFIG = {"Env": ["GREETING=hello from the image", "PATH=/usr/local/bin:/usr/bin:/bin"],
          "WorkingDir": "/home/app", "User": "1000:1000", "Cmd": ["/bin/cat", "/etc/motd"],
          "ExposedPorts": {"8080/tcp": {}}, "Labels": {"team": "py"}}


@pytest.fixture(scope="module")
def registry(base_layer, top_layer):
    with Registry() as r:
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
    base = digest_of(base_layer[0])
    before = len(registry.requests("GET", base[7:]))
    again = pull_events(pc, ref)
    assert again[-1]["status"] == "done"
    assert len(registry.requests("GET", base[7:])) == before, "a stored layer is not fetched again"


def test_images_sharing_a_layer_store_it_once_and_rm_collects_what_none_uses(pull_daemon, pc, registry, base_layer):
    other = build_image([base_layer, make_layer([Entry("etc/motd", data=b"other\n")])], {"Cmd": ["/bin/sh"]})
    registry.put_image("team/other", "v1", other)
    base = digest_of(base_layer[0])
    fetched_before = len(registry.requests("GET", base[7:]))
    assert pull(pc, f"{registry.host}/team/app:1.0").status == 201
    r = pull(pc, f"{registry.host}/team/other:v1")
    assert r.status == 201, r
    assert len(registry.requests("GET", base[7:])) == fetched_before, "the shared base layer came from the store"
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
    arm = build_image([make_layer([Entry("arch", data=b"arm64\n")])], {}, architecture="arm64")
    amd = build_image([make_layer(host_files(["/bin/cat"]) + [Entry("arch", data=b"amd64\n")], "zstd")],
                      {"Cmd": ["/bin/cat", "/arch"]}, compression="zstd")
    registry.put_image("multi/app", "latest", build_index([(arm, {"os": "linux", "architecture": "arm64"}),
                                                           (amd, {"os": "linux", "architecture": "amd64"})]))
    r = pull(pc, f"{registry.host}/multi/app")
    assert r.status == 201, r
    assert r.json()["digest"] == amd.digest, "the amd64 manifest, though arm64 is listed first"
    r = pull(pc, f"{registry.host}/multi/app", platform="linux/s390x")
    harness.assert_error_shape(r, 404)
    assert "linux/arm64" in r.json()["error"]["message"]

    docker = build_image([make_layer(host_files(["/bin/cat"]) + [Entry("kind", data=b"docker\n")])],
                         {"Cmd": ["/bin/cat", "/kind"]}, media="docker")
    registry.put_image("docker/app", "1", docker)
    r = pull(pc, f"{registry.host}/docker/app:1")
    assert r.status == 201, r
    # By digest, as well as by tag.
    r = pull(pc, f"{registry.host}/docker/app@{docker.digest}")
    assert r.status == 201 and r.json()["digest"] == docker.digest


def test_create_pulls_on_first_use_unless_told_never(pc, registry, request):
    image = build_image([make_layer(host_files(["/bin/sh", "/bin/cat"]) + [Entry("hello", data=b"lazy\n")])], {})
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
    with Registry(auth="token", users={"alice": "s3cret"}, public=("open/app",)) as reg:
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
        assert reg.requests("GET", "/token"), "the token dance happened"
    with Registry(auth="basic", users={"bob": "pw"}) as reg:
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

    def refused(image, want, code=None, blob_checked=True, **fault):
        repo = "hostile/" + str(len(registry.manifests))
        registry.put_image(repo, "1", image)
        if fault:
            registry.faults[image.layer_digests()[0]] = Fault(**fault)
        r = pull(pc, f"{registry.host}/{repo}:1")
        err = harness.assert_error_shape(r, want)
        if code:
            assert err["code"] == code, r
        assert {i["name"] for i in pc.get("/v1/images").json()["images"]} == images_before
        if blob_checked:
            assert image.layer_digests()[0] not in blobs_on_disk(pull_daemon), "a bad blob never enters the store"
        return err

    layer = lambda text: make_layer(host_files(["/bin/cat"]) + [Entry("f", data=text.encode() * 1000)])
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
    registry.faults[liar.digest] = Fault(wrong_bytes=True)
    r = pull(pc, f"{registry.host}/hostile/liar@{liar.digest}")
    assert harness.assert_error_shape(r, 502)["code"] == "digest_mismatch"

    # Layers that try to write outside the image.
    sentinel = Path("/tmp/bulkhead-escape-sentinel")
    sentinel.unlink(missing_ok=True)
    for entries in ([Entry("../../../../tmp/bulkhead-escape-sentinel", data=b"x")],
                    [Entry("/tmp/bulkhead-escape-sentinel", data=b"x")],
                    [Entry("a/../../tmp/bulkhead-escape-sentinel", data=b"x")],
                    [Entry("h", "hardlink", target="../../../etc/passwd")]):
        # (the blob itself is what the registry meant to send: it stays until collected)
        err = refused(build_image([make_layer(entries)], {}), 422, "invalid_image", blob_checked=False)
        assert "escape" in err["message"] or "out of the image" in err["message"] or "absolute" in err["message"]
    # A symlink out, then a write through it: refused (as an import refuses it), never on the host.
    r = pull_through_symlink(pc, registry)
    assert "symlink" in harness.assert_error_shape(r, 422)["message"]
    assert not sentinel.exists()
    assert not list(state.glob("images/*.tmp-*")), "no half-made image is left"


def pull_through_symlink(pc, registry):
    image = build_image([make_layer([Entry("tmp", "dir", mode=0o1777),
                                     Entry("out", "symlink", target="/tmp"),
                                     Entry("out/bulkhead-escape-sentinel", data=b"inside\n")])], {})
    registry.put_image("hostile/symlink", "1", image)
    return pull(pc, f"{registry.host}/hostile/symlink:1")


def test_a_dropped_download_resumes_with_range_and_a_redirect_gets_no_credentials(pc, registry):
    big = make_layer([Entry("big", data=os.urandom(3 << 20))], "none")
    image = build_image([big], {})
    registry.put_image("resume/app", "1", image)
    registry.faults[digest_of(big[0])] = Fault(drop_after=1 << 20)
    r = pull(pc, f"{registry.host}/resume/app:1")
    assert r.status == 201, r
    ranges = [q["range"] for q in registry.requests("GET", digest_of(big[0])[7:])]
    assert ranges[0] is None and len(ranges) == 2, ranges
    resumed_at = int(ranges[1][len("bytes="):-1])
    assert 0 < resumed_at <= 1 << 20, "the second request went on from what the first delivered"

    moved = build_image([make_layer([Entry("moved", data=b"storage\n")])], {})
    registry.put_image("redirect/app", "1", moved)
    registry.faults[moved.layer_digests()[0]] = Fault(redirect=True)
    r = pull(pc, f"{registry.host}/redirect/app:1")
    assert r.status == 201, r
    storage = [q for q in registry.requests("GET", "/storage/")]
    assert storage and all(q["auth"] == "" for q in storage)


def test_a_daemon_killed_mid_pull_leaves_a_store_the_next_pull_completes(session_dir):
    layer = make_layer([Entry("big", data=os.urandom(4 << 20))], "none")
    image = build_image([layer], {})
    with Registry() as reg:
        reg.put_image("kill/app", "1", image)
        reg.faults[digest_of(layer[0])] = Fault(stall_at=2 << 20, stall_s=30)
        d = harness.Daemon(state_dir=session_dir / "pull-kill", log_path=session_dir / "daemon-pull-kill.log")
        d.extra_args = ("--insecure-registry", "127.0.0.1")
        try:
            d.start()
            c = d.client()
            conn = c.connection(timeout=60)
            conn.request("POST", "/v1/images/pull", body=json.dumps({"image": f"{reg.host}/kill/app:1"}),
                         headers={"Authorization": f"Bearer {d.key}", "Content-Type": "application/json"})
            partial = d.state_dir / "blobs" / "partial" / digest_of(layer[0])[7:]
            assert harness.wait_until(lambda: partial.exists() and partial.stat().st_size >= 1 << 20, 20)
            time.sleep(0.5)  # the stall: nothing more arrives
            d.stop(signal.SIGKILL)
            conn.close()
            kept = partial.stat().st_size
            reg.faults.clear()
            d.start()
            r = pull(d.client(), f"{reg.host}/kill/app:1")
            assert r.status == 201, r
            ranges = [q["range"] for q in reg.requests("GET", digest_of(layer[0])[7:])]
            assert ranges[-1] == f"bytes={kept}-", ranges
            assert not partial.exists()
        finally:
            d.destroy()


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
