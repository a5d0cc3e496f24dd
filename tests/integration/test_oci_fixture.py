"""The test registry (oci_registry.py) and test images (oci_images.py) themselves, checked with
the standard library's HTTP client and no daemon: so a failing pull test is the client's doing,
not the fixture's. Plain http.client rather than urllib: urllib reads proxies from the
environment and follows redirects with the Authorization header, both wrong for these checks."""

import base64
import gzip
import hashlib
import http.client
import io
import json
import re
import ssl
import tarfile
import threading
import time

import pytest

import oci_images as oi
from oci_registry import OciRegistry, make_tls_cert


def call(registry: OciRegistry, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
         conn: http.client.HTTPConnection | None = None):
    """One request: (status, headers with lower-case names, body). A new connection unless given one."""
    c = conn or http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        if conn is None:
            c.close()


def error_code(body: bytes) -> str:
    return json.loads(body)["errors"][0]["code"]


def challenge(headers: dict) -> dict:
    return dict(re.findall(r'(\w+)="([^"]*)"', headers["www-authenticate"]))


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def registry():
    with OciRegistry() as r:
        yield r
        assert not r.errors, r.errors


@pytest.fixture(scope="module")
def image():
    base = oi.make_layer([oi.Dir("etc"), oi.File("etc/motd", b"base\n"), oi.File("etc/gone", b"x\n")])
    top = oi.make_layer([oi.Whiteout("etc/gone"), oi.File("etc/motd", b"top\n", mode=0o600, uid=7)], "zstd")
    return oi.build_image([base, top], {"Cmd": ["/bin/sh"], "Env": ["A=1"], "WorkingDir": "/srv",
                                        "User": "1000:1000", "ExposedPorts": {"80/tcp": {}}})


def members(layer: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(oi.uncompressed(layer))) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_layers_keep_every_name_and_kind_as_given():
    entries = [oi.Dir("d", mode=0o700), oi.Whiteout("d/old"), oi.Opaque("o"), oi.Symlink("s", "d"),
               oi.Hardlink("h", "lower/file"), oi.Device("null", "char", 1, 3), oi.Device("p", "fifo"),
               oi.File("suid", b"#!/bin/sh\n", mode=0o4755, uid=1000, gid=1000, mtime=12345),
               *oi.hostile_entries()]
    for compression, magic in (("gzip", oi.GZIP_MAGIC), ("zstd", oi.ZSTD_MAGIC), ("none", b"d/")):
        layer = oi.make_layer(entries, compression)
        assert layer.startswith(magic) and oi.compression_of(layer) == compression
        found = members(layer)
        assert set(found) == {"d", "d/.wh.old", "o/.wh..wh..opq", "s", "h", "null", "p", "suid", "../escape",
                              "/abs", "a/../../b", "link", "link/passwd", "hard"}, found
        assert found["h"].islnk() and found["h"].linkname == "lower/file"
        assert found["hard"].linkname == "../../x" and found["link"].linkname == "/etc"
        assert found["null"].ischr() and (found["null"].devmajor, found["null"].devminor) == (1, 3)
        assert found["p"].isfifo() and found["d"].mode == 0o700
        assert (found["suid"].mode, found["suid"].uid, found["suid"].mtime) == (0o4755, 1000, 12345)
    assert oi.make_layer(entries) == oi.make_layer(entries), "the same entries make the same blob"


def test_images_and_indexes_describe_their_blobs(image, tmp_path):
    manifest = json.loads(image.manifest)
    assert manifest["mediaType"] == oi.OCI_MANIFEST and manifest["schemaVersion"] == 2
    assert [l["mediaType"] for l in manifest["layers"]] == [oi.OCI_LAYER_GZIP, oi.OCI_LAYER_ZSTD]
    assert [l["digest"] for l in manifest["layers"]] == image.layer_digests()
    assert manifest["config"]["digest"] == image.config_digest == oi.digest_of(image.config)
    config = json.loads(image.config)
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"]["WorkingDir"] == "/srv" and config["config"]["ExposedPorts"] == {"80/tcp": {}}
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(oi.uncompressed(l)).hexdigest()
                                            for l in image.layers]
    assert config["rootfs"]["diff_ids"][0] != image.layer_digests()[0], "diff_ids name the uncompressed tar"
    assert "config" not in json.loads(oi.build_image([], None).config)

    docker = oi.build_image(image.layers[:1], {}, "docker", architecture="arm64")
    d = json.loads(docker.manifest)
    assert (docker.media_type, d["config"]["mediaType"], d["layers"][0]["mediaType"]) == \
        (oi.DOCKER_MANIFEST, oi.DOCKER_CONFIG, oi.DOCKER_LAYER_GZIP)
    for media, index_type in (("oci", oi.OCI_INDEX), ("docker", oi.DOCKER_MANIFEST_LIST)):
        index = oi.build_index([(docker, {"os": "linux", "architecture": "arm64"}),
                                (image, {"os": "linux", "architecture": "amd64"})], media)
        listed = json.loads(index.manifest)
        assert index.media_type == listed["mediaType"] == index_type
        assert [m["platform"]["architecture"] for m in listed["manifests"]] == ["arm64", "amd64"]
        assert [m["digest"] for m in listed["manifests"]] == [docker.digest, image.digest]
        assert set(index.manifests) == {index.digest, docker.digest, image.digest}

    root = oi.write_oci_layout(tmp_path / "layout", index, "v1")
    assert json.loads((root / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    top = json.loads((root / "index.json").read_text())["manifests"][0]
    assert top["digest"] == index.digest and top["annotations"]["org.opencontainers.image.ref.name"] == "v1"
    for blob in (root / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
    assert len(list((root / "blobs" / "sha256").iterdir())) == len(index.blobs) + 3


def test_push_then_pull_by_tag_and_digest_over_one_kept_alive_connection(registry, image):
    conn = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    base, top = image.layers
    # Chunked: POST, two PATCHes, PUT with the digest (added to a Location that has a query).
    status, h, _ = call(registry, "POST", "/v2/team/app/blobs/uploads/", b"", conn=conn)
    assert status == 202 and h["docker-upload-uuid"] and h["range"] == "0-0", h
    location = h["location"]
    status, h, _ = call(registry, "PATCH", location, base[:100], {"Content-Range": "0-99"}, conn=conn)
    assert (status, h["range"]) == (202, "0-99")
    status, h, body = call(registry, "PATCH", location, base[100:], {"Content-Range": "5-9"}, conn=conn)
    assert (status, error_code(body)) == (416, "BLOB_UPLOAD_INVALID"), "a chunk out of order"
    status, h, _ = call(registry, "PATCH", h["location"], base[100:], conn=conn)
    assert (status, h["range"]) == (202, f"0-{len(base) - 1}")
    status, h, body = call(registry, "PUT", h["location"] + "&digest=" + oi.digest_of(b"other"), b"", conn=conn)
    assert (status, error_code(body)) == (400, "DIGEST_INVALID")
    status, h, _ = call(registry, "POST", "/v2/team/app/blobs/uploads/", conn=conn)
    status, h, _ = call(registry, "PUT", h["location"] + "&digest=" + oi.digest_of(base), base, conn=conn)
    assert (status, h["docker-content-digest"]) == (201, oi.digest_of(base))
    # Monolithic, then a manifest pushed before its config is refused.
    status, h, _ = call(registry, "POST", "/v2/team/app/blobs/uploads/?digest=" + oi.digest_of(top), top, conn=conn)
    assert status == 201
    headers = {"Content-Type": image.media_type}
    status, _, body = call(registry, "PUT", "/v2/team/app/manifests/1.0", image.manifest, headers, conn=conn)
    assert (status, error_code(body)) == (400, "MANIFEST_BLOB_UNKNOWN")
    call(registry, "POST", "/v2/team/app/blobs/uploads/?digest=" + image.config_digest, image.config, conn=conn)
    status, h, _ = call(registry, "PUT", "/v2/team/app/manifests/1.0", image.manifest, headers, conn=conn)
    assert (status, h["docker-content-digest"]) == (201, image.digest)
    status, _, body = call(registry, "PUT", "/v2/team/app/manifests/bad", b'{"layers": ["x", {}]}', headers, conn=conn)
    assert (status, error_code(body)) == (400, "MANIFEST_BLOB_UNKNOWN"), "malformed references are refused"
    status, h, _ = call(registry, "POST", "/v2/team/app/blobs/uploads/", conn=conn)
    status, _, body = call(registry, "PATCH", h["location"], b"x", {"Content-Range": "junk"}, conn=conn)
    assert (status, error_code(body)) == (416, "BLOB_UPLOAD_INVALID")
    # A chunked request body, on the same connection.
    conn.request("POST", "/v2/team/chunked/blobs/uploads/?digest=" + oi.digest_of(base), body=iter([base[:7], base[7:]]),
                 encode_chunked=True)
    r = conn.getresponse()
    assert (r.status, r.read()) == (201, b"") and registry.blob(oi.digest_of(base)) == base
    # A cross-repository mount.
    status, h, _ = call(registry, "POST", f"/v2/team/copy/blobs/uploads/?mount={oi.digest_of(base)}&from=team/app",
                        conn=conn)
    assert status == 201 and registry.has_blob("team/copy", oi.digest_of(base))

    for reference in ("1.0", image.digest):
        status, h, body = call(registry, "GET", f"/v2/team/app/manifests/{reference}", conn=conn,
                               headers={"Accept": oi.OCI_MANIFEST})
        assert (status, h["content-type"], h["docker-content-digest"], body) == \
            (200, image.media_type, image.digest, image.manifest)
    status, h, body = call(registry, "HEAD", "/v2/team/app/manifests/1.0", conn=conn)
    assert (status, int(h["content-length"]), body) == (200, len(image.manifest), b"")
    for digest, data in image.blobs.items():
        status, h, body = call(registry, "GET", f"/v2/team/app/blobs/{digest}", conn=conn)
        assert (status, oi.digest_of(body), h["docker-content-digest"]) == (200, digest, digest)
    status, _, body = call(registry, "GET", "/v2/team/app/tags/list", conn=conn)
    assert json.loads(body) == {"name": "team/app", "tags": ["1.0"]}
    conn.close()
    assert len({r.peer_port for r in registry.requests()}) == 1, "every request on the one connection"
    assert registry.manifest("team/app", "1.0") == (image.media_type, image.manifest)

    # The spec's errors.
    for path, code in (("/v2/team/none/manifests/1.0", "NAME_UNKNOWN"), ("/v2/team/app/manifests/2.0", "MANIFEST_UNKNOWN"),
                       (f"/v2/team/app/blobs/{oi.digest_of(b'nothing')}", "BLOB_UNKNOWN"),
                       ("/v2/team/none/tags/list", "NAME_UNKNOWN")):
        status, h, body = call(registry, "GET", path)
        assert (status, h["content-type"], error_code(body)) == (404, "application/json", code), path


def test_an_index_is_served_whatever_accept_says(registry, image):
    index = oi.build_index([(image, {"os": "linux", "architecture": "arm64"}),
                            (image, {"os": "linux", "architecture": "amd64"})])
    registry.put_image("multi/app", "latest", index)
    status, h, body = call(registry, "GET", "/v2/multi/app/manifests/latest", headers={"Accept": oi.OCI_MANIFEST})
    assert (status, h["content-type"], body) == (200, oi.OCI_INDEX, index.manifest)
    assert call(registry, "GET", f"/v2/multi/app/manifests/{image.digest}")[2] == image.manifest
    assert registry.requests(kind="manifest")[0].accept == oi.OCI_MANIFEST


def test_the_token_dance_grants_only_the_scope_asked_and_allowed(image):
    with OciRegistry(auth="token", users={"alice": "pw", "rita": "ro"}, readonly={"rita"}, public={"open/app"}) as reg:
        reg.put_image("team/app", "1", image)
        reg.put_image("open/app", "1", image)
        status, h, _ = call(reg, "GET", "/v2/")
        assert status == 401 and h["www-authenticate"].startswith("Bearer ")
        status, h, body = call(reg, "GET", "/v2/team/app/manifests/1")
        c = challenge(h)
        assert (status, error_code(body)) == (401, "UNAUTHORIZED")
        assert c == {"realm": f"{reg.url}/token", "service": "registry.test", "scope": "repository:team/app:pull"}
        assert challenge(call(reg, "POST", "/v2/team/app/blobs/uploads/")[1])["scope"] == "repository:team/app:pull,push"

        def token(scope, headers=None):
            status, _, body = call(reg, "GET", f"/token?service={c['service']}&scope={scope}", headers=headers)
            return status, (json.loads(body) if status == 200 else body)

        assert token("repository:team/app:pull", basic("alice", "wrong"))[0] == 401
        assert call(reg, "GET", "/token?service=other.test&scope=repository:team/app:pull")[0] == 400
        status, anonymous = token("repository:team/app:pull")
        assert status == 200, "anonymous gets a token, with no access"
        status, h, _ = call(reg, "GET", "/v2/team/app/manifests/1", headers={"Authorization": f"Bearer {anonymous['token']}"})
        assert status == 401 and challenge(h)["error"] == "insufficient_scope"
        _, public = token("repository:open/app:pull")
        assert call(reg, "GET", "/v2/open/app/manifests/1", headers={"Authorization": f"Bearer {public['token']}"})[0] == 200

        status, granted = token("repository:team/app:pull", basic("alice", "pw"))
        assert granted["token"] == granted["access_token"] and granted["expires_in"] == 300
        bearer = {"Authorization": f"Bearer {granted['token']}"}
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers=bearer)[0] == 200
        assert call(reg, "GET", "/v2/open/app/manifests/1", headers=bearer)[0] == 401, "another repository"
        assert call(reg, "POST", "/v2/team/app/blobs/uploads/", headers=bearer)[0] == 401, "pull only was asked"
        _, ro = token("repository:team/app:pull,push", basic("rita", "ro"))
        assert call(reg, "POST", "/v2/team/app/blobs/uploads/", headers={"Authorization": f"Bearer {ro['token']}"})[0] == 401
        _, rw = token("repository:team/app:pull,push", basic("alice", "pw"))
        assert call(reg, "POST", "/v2/team/app/blobs/uploads/", headers={"Authorization": f"Bearer {rw['token']}"})[0] == 202

        reg.expire_tokens()
        status, h, _ = call(reg, "GET", "/v2/team/app/manifests/1", headers=bearer)
        assert status == 401 and challenge(h)["error"] == "invalid_token"
        reg.token_lifetime = 0.2
        _, short = token("repository:team/app:pull", basic("alice", "pw"))
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers={"Authorization": f"Bearer {short['token']}"})[0] == 200
        time.sleep(0.3)
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers={"Authorization": f"Bearer {short['token']}"})[0] == 401

        tokens = reg.requests(kind="token")
        assert [r.user for r in tokens if r.auth == "Basic"][:1] == ["alice"]
        assert all(r.auth in (None, "Bearer") for r in reg.requests(kind="manifest")), "no password to the registry"
        assert not reg.errors, reg.errors


def test_a_token_server_of_its_own_and_basic_auth(image):
    with OciRegistry(auth="token", users={"alice": "pw"}) as issuer, \
            OciRegistry(auth="token", token_server=issuer) as reg:
        reg.put_image("team/app", "1", image)
        c = challenge(call(reg, "GET", "/v2/team/app/manifests/1")[1])
        assert c["realm"] == f"{issuer.url}/token"
        body = json.loads(call(issuer, "GET", f"/token?service={c['service']}&scope={c['scope']}",
                               headers=basic("alice", "pw"))[2])
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers={"Authorization": f"Bearer {body['token']}"})[0] == 200
        assert not reg.requests(kind="token") and len(issuer.requests(kind="token")) == 1

    with OciRegistry(auth="basic", users={"bob": "pw", "rita": "ro"}, readonly={"rita"}) as reg:
        reg.put_image("team/app", "1", image)
        status, h, _ = call(reg, "GET", "/v2/team/app/manifests/1")
        assert status == 401 and h["www-authenticate"] == 'Basic realm="registry.test"'
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers=basic("bob", "no"))[0] == 401
        assert call(reg, "GET", "/v2/team/app/manifests/1", headers=basic("bob", "pw"))[0] == 200
        status, _, body = call(reg, "POST", "/v2/team/app/blobs/uploads/", headers=basic("rita", "ro"))
        assert (status, error_code(body)) == (403, "DENIED")
        assert reg.requests()[-1].user == "rita"


def test_range_requests_answer_206_and_are_logged(registry, image):
    registry.put_image("team/app", "1", image)
    digest = image.layer_digests()[0]
    data = registry.blob(digest)
    status, h, body = call(registry, "GET", f"/v2/team/app/blobs/{digest}", headers={"Range": "bytes=10-"})
    assert (status, h["content-range"], body) == (206, f"bytes 10-{len(data) - 1}/{len(data)}", data[10:])
    status, h, body = call(registry, "GET", f"/v2/team/app/blobs/{digest}", headers={"Range": "bytes=2-5"})
    assert (status, body) == (206, data[2:6])
    status, h, _ = call(registry, "GET", f"/v2/team/app/blobs/{digest}", headers={"Range": f"bytes={len(data)}-"})
    assert (status, h["content-range"]) == (416, f"bytes */{len(data)}")
    assert [r.range for r in registry.requests(kind="blob")] == ["bytes=10-", "bytes=2-5", f"bytes={len(data)}-"]
    assert [r.sent for r in registry.requests(kind="blob")] == [len(data) - 10, 4, len(json.dumps({
        "errors": [{"code": "UNSUPPORTED", "message": "range not satisfiable"}]}))]


def test_faults_spoil_what_they_say_and_a_dropped_download_resumes(registry, image):
    registry.put_image("team/app", "1", image)
    base, top = image.layer_digests()
    data = registry.blob(base)
    path = f"/v2/team/app/blobs/{base}"

    registry.fault(base, drop_after=50)
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    assert int(r.headers["Content-Length"]) == len(data)
    with pytest.raises(http.client.IncompleteRead) as cut:
        r.read()
    c.close()
    assert cut.value.partial == data[:50]
    status, _, rest = call(registry, "GET", path, headers={"Range": "bytes=50-"})
    assert status == 206 and cut.value.partial + rest == data, "the second time, nothing is dropped"
    assert [r.sent for r in registry.blob_downloads(base)] == [50, len(data) - 50]

    registry.fault(base, wrong_bytes=True)
    body = call(registry, "GET", path)[2]
    assert len(body) == len(data) and oi.digest_of(body) != base
    registry.fault(image.digest, wrong_bytes=True)
    status, h, body = call(registry, "GET", "/v2/team/app/manifests/1")
    assert h["docker-content-digest"] == image.digest and oi.digest_of(body) != image.digest

    registry.fault(base, status=429, headers={"Retry-After": "1"}, times=1)
    status, h, body = call(registry, "GET", path)
    assert (status, h["retry-after"], error_code(body)) == (429, "1", "TOOMANYREQUESTS")
    assert call(registry, "GET", path)[0] == 200, "times=1: the next answer is good"

    registry.fault(base, huge_length=1 << 40)
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    assert int(r.headers["Content-Length"]) == 1 << 40 and r.read(1 << 16) == bytes(1 << 16)
    c.close()

    registry.fault(base, extra_bytes=10)
    status, h, body = call(registry, "GET", path)
    assert int(h["content-length"]) == len(data) + 10 and body == data + bytes(10)

    registry.fault(base, rate=500)
    started = time.monotonic()
    assert call(registry, "GET", path)[2] == data
    assert len(data) / 500 * 0.9 <= time.monotonic() - started < 2

    # A redirect to storage that takes no registry credentials, with faults still applied there.
    registry.fault(base, redirect=True, truncate_at=3)
    status, h, _ = call(registry, "GET", path)
    assert status == 307 and h["location"].startswith(f"{registry.url}/storage/{base}?sig=")
    c = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    c.request("GET", h["location"][len(registry.url):])
    with pytest.raises(http.client.IncompleteRead):
        c.getresponse().read()
    c.close()
    registry.fault(base, redirect=True)
    assert call(registry, "GET", h["location"][len(registry.url):])[2] == data
    assert call(registry, "GET", f"/storage/{base}?sig=forged")[0] == 403
    assert all(r.auth is None for r in registry.requests(kind="storage"))
    registry.clear_faults()
    assert call(registry, "GET", path)[2] == data


def test_close_ends_stalled_and_kept_alive_connections_at_once(image):
    registry = OciRegistry()
    registry.put_image("team/app", "1", image)
    base = image.layer_digests()[0]
    registry.fault(base, stall=60, stall_at=5)
    idle = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
    assert call(registry, "GET", "/v2/", conn=idle)[0] == 200  # then left open
    results = []

    def stalled_get():
        try:
            results.append(call(registry, "GET", f"/v2/team/app/blobs/{base}"))
        except (http.client.HTTPException, OSError) as e:
            results.append(e)

    before = threading.active_count()
    getter = threading.Thread(target=stalled_get)
    getter.start()
    assert wait_for(lambda: registry.requests(kind="blob") and registry.requests(kind="blob")[0].sent == 5)
    started = time.monotonic()
    registry.close()
    assert time.monotonic() - started < 5
    getter.join(5)
    assert isinstance(results[0], http.client.IncompleteRead), results
    assert not [t for t in threading.enumerate() if "process_request_thread" in t.name], "handler threads left"
    assert threading.active_count() <= before
    idle.close()
    assert not registry.errors, registry.errors


def test_https_with_its_own_certificate(tmp_path):
    cert, key = make_tls_cert(tmp_path)
    with OciRegistry(tls=(cert, key), auth="token") as reg:
        assert reg.url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        c = http.client.HTTPSConnection("127.0.0.1", reg.port, context=context, timeout=10)
        c.request("GET", "/v2/")
        r = c.getresponse()
        assert r.status == 401 and f'realm="{reg.url}/token"' in r.headers["WWW-Authenticate"]
        r.read()
        c.close()
        with pytest.raises(ssl.SSLError):
            c = http.client.HTTPSConnection("127.0.0.1", reg.port, context=ssl.create_default_context(), timeout=10)
            c.request("GET", "/v2/")
        assert not reg.errors, reg.errors


def wait_for(predicate, timeout: float = 5):
    deadline = time.monotonic() + timeout
    while not (value := predicate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value
