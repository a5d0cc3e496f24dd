"""E2B's template build API on the E2B front (src/e2b/templates.cc) over raw HTTP, in the order
and with the shapes the SDKs use (the real SDKs run in tests/e2b/*/template*): a build
registered, its file sets asked for and uploaded to signed URLs without the API key, started,
polled; sandboxes from name[:tag]; the start command; restarts; and every kind of bad input."""
import gzip
import io
import json
import os
import signal
import tarfile
import time
import urllib.parse
import uuid

import pytest

import harness
from oci_images import Dir, File, build_image, host_files, make_layer
from oci_registry import OciRegistry
from test_e2b_control_plane import E2b, assert_e2b_error

HASH_A = "a" * 64


def files_tar(entries: list[tuple], compress=True) -> bytes:
    """entries: (name, bytes, mode) files, (name, None, mode) dirs, (name, "->target") symlinks."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data, *rest in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if isinstance(data, str):
                info.type, info.linkname = tarfile.SYMTYPE, data[2:]
                tar.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, rest[0] if rest else 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), rest[0] if rest else 0o644
                tar.addfile(info, io.BytesIO(data))
    return gzip.compress(out.getvalue()) if compress else out.getvalue()


def put(url: str, body: bytes, method="PUT") -> harness.Response:
    """The upload as the SDKs send it: to the URL as given, no API key."""
    import http.client
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request(method, parts.path + "?" + parts.query, body=body, headers={"Content-Length": str(len(body))})
        r = conn.getresponse()
        return harness.Response(r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read())
    finally:
        conn.close()


def request_build(e2b: E2b, name: str, **extra) -> dict:
    r = e2b.request("POST", "/v3/templates", {"name": name, **extra})
    assert r.status == 202, r
    return r.json()


def upload(e2b: E2b, template_id: str, files_hash: str, body: bytes) -> None:
    path = f"/templates/{urllib.parse.quote(template_id, safe='')}/files/{files_hash}"
    r = e2b.request("GET", path)
    assert r.status == 201, r
    link = r.json()
    if link["present"]:
        return
    assert put(link["url"], body).status in (200, 201, 204)
    assert e2b.request("GET", path).json() == {"present": True}


def wait_build(e2b: E2b, build: dict, within_s=240) -> tuple[dict, list]:
    """Polls as the SDKs do (logsOffset advancing): the last status and every entry."""
    entries, offset = [], 0
    path = f"/templates/{build['templateID']}/builds/{build['buildID']}/status"
    deadline = time.monotonic() + within_s
    while True:
        r = e2b.request("GET", f"{path}?logsOffset={offset}&limit=100")
        assert r.status == 200, r
        status = r.json()
        entries += status["logEntries"]
        offset += len(status["logEntries"])
        if status["status"] in ("ready", "error") and not status["logEntries"]:
            return status, entries
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def start_build(e2b: E2b, build: dict, definition: dict) -> harness.Response:
    return e2b.request("POST", f"/v2/templates/{build['templateID']}/builds/{build['buildID']}", definition)


def start_hanging_build(e2b: E2b, build: dict, seconds: int) -> str:
    """A build whose one RUN prints "begun" and sleeps `seconds` (a number to find its process
    by), started and seen to have begun. Answers its status path."""
    assert start_build(e2b, build, {"fromImage": "e2bdev/base",
                                    "steps": [{"type": "RUN", "args": [f"echo begun; sleep {seconds}"]}]}).status == 204
    path = f"/templates/{build['templateID']}/builds/{build['buildID']}/status?logsOffset=0"
    deadline = time.monotonic() + 60
    while not any(e["message"] == "begun" for e in e2b.request("GET", path).json()["logEntries"]):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    return path


@pytest.fixture
def e2b(daemon):
    front = E2b(daemon)
    made = []
    yield front, made
    for sandbox_id in made:
        front.request("DELETE", f"/sandboxes/{sandbox_id}")


def create(e2b, made, template_id) -> dict:
    r = e2b.request("POST", "/v2/sandboxes", {"templateID": template_id, "timeout": 300})
    assert r.status == 201, r
    made.append(r.json()["sandboxID"])
    return r.json()


def run(e2b, sandbox, command) -> str:
    """A command through the native API (the SDKs' envd path is tested by the SDK suites)."""
    r = e2b.daemon.client().exec(sandbox["sandboxID"], ["/bin/sh", "-c", command])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def test_a_template_builds_over_raw_http_in_the_sdks_order(e2b):
    front, made = e2b
    name = f"raw-{uuid.uuid4().hex[:8]}"
    build = request_build(front, f"{name}:v1", tags=["stable"], cpuCount=1, memoryMB=1024)
    assert build["templateID"] == name and build["aliases"] == [name] and build["names"] == [name]
    assert build["tags"] == ["v1", "stable"] and build["public"] is False
    uuid.UUID(build["buildID"])
    waiting = front.request("GET", f"/templates/{name}/builds/{build['buildID']}/status").json()
    assert waiting["status"] == "waiting" and waiting["logs"] == [] and "reason" not in waiting

    # A directory with a symlink inside it, gzip (as the SDKs send by default); a plain tar.
    upload(front, name, HASH_A, files_tar([("site", None), ("site/index.html", b"<h1>hi</h1>\n"),
                                           ("site/link", "->index.html")]))
    upload(front, name, "b" * 64, files_tar([("tool.sh", b"#!/bin/sh\necho tool\n", 0o600)], compress=False))
    r = start_build(front, build, {
        "fromImage": "e2bdev/base", "force": False,
        "steps": [
            {"type": "COPY", "args": ["site", "/srv/site", "", ""], "filesHash": HASH_A, "force": False},
            {"type": "COPY", "args": ["tool.sh", "bin/", "root", "0755"], "filesHash": "b" * 64, "force": False},
            {"type": "ENV", "args": ["PORT", "8000", "MOTD", "say \"hi\" $PORT"], "force": False},
            {"type": "RUN", "args": ["echo to-stdout; echo to-stderr >&2; id -un > /tmp/built-as"], "force": False},
            {"type": "WORKDIR", "args": ["/srv/site"], "force": False},
        ],
        "startCmd": "python3 -m http.server $PORT >/tmp/server.log 2>&1",
        "readyCmd": "[ -n \"$(ss -Htuln sport = :8000)\" ] || python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))'",
    })
    assert r.status == 204, r
    assert front.request("GET", f"/templates/{name}/builds/{build['buildID']}/status").json()["status"] in (
        "building", "ready")
    status, entries = wait_build(front, build)
    assert status["status"] == "ready" and "reason" not in status, (status, entries)
    messages = [e["message"] for e in entries]
    assert "to-stdout" in messages and "to-stderr" in messages, messages
    assert any(m.startswith("[builder 4/5] RUN echo to-stdout") for m in messages), messages
    for entry in entries:
        assert entry["level"] in ("debug", "info", "warn", "error") and isinstance(entry["step"], str), entry
        assert entry["timestamp"].endswith("Z"), entry
    assert {e["step"] for e in entries} >= {"base", "1", "4", "finalize"}, entries

    assert front.request("GET", f"/templates/aliases/{name}").json() == {"templateID": name, "public": False}
    tags = front.request("GET", f"/templates/{name}/tags").json()
    assert sorted(t["tag"] for t in tags) == ["stable", "v1"] and len({t["buildID"] for t in tags}) == 1
    assert front.request("GET", f"/templates/aliases/{name}%3Av1").status == 200
    # No default tag was built: the bare name starts nothing, as in E2B.
    assert front.request("POST", "/v2/sandboxes", {"templateID": name}).status == 404

    sandbox = create(front, made, f"{name}:stable")
    assert sandbox["templateID"]
    out = run(front, sandbox, "cat /srv/site/index.html; readlink /srv/site/link; ls -l /home/user/bin/tool.sh; "
                              "cat /tmp/built-as; echo \"$MOTD\"; wget -qO- http://127.0.0.1:8000/index.html || "
                              "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8000/index.html\").read().decode())'")
    assert "<h1>hi</h1>" in out and "index.html" in out, out
    assert "-rwxr-xr-x 1 root root" in out and "user" in out.splitlines(), out
    assert 'say "hi" 8000' in out, out


def test_bad_input_gets_clear_errors(e2b):
    front, made = e2b
    for body in [{}, {"name": ""}, {"name": "UPPER only?"}, {"name": "a:b:c"}, {"name": "x", "tags": ["no spaces"]},
                 {"name": "x", "cpuCount": 0}, {"name": "x", "memoryMB": "lots"}, {"name": 5}]:
        assert_e2b_error(front.request("POST", "/v3/templates", body), 400)
    assert_e2b_error(front.request("POST", "/v3/templates", "not json"), 400)
    name = f"bad-{uuid.uuid4().hex[:8]}"
    build = request_build(front, name)
    # Unknown templates, builds and hashes.
    assert_e2b_error(front.request("GET", f"/templates/nosuch-{name}/files/{HASH_A}"), 404)
    assert_e2b_error(front.request("GET", f"/templates/{name}/files/..%2f..%2fetc"), 400)
    assert_e2b_error(front.request("GET", f"/templates/{name}/builds/{uuid.uuid4()}/status"), 404)
    assert_e2b_error(front.request("GET", f"/templates/nosuch/builds/{build['buildID']}/status"), 404)
    assert_e2b_error(front.request("GET", f"/templates/{name}/builds/{build['buildID']}/status?logsOffset=-1"), 400)
    assert_e2b_error(start_build(front, {"templateID": name, "buildID": str(uuid.uuid4())}, {"fromImage": "x"}), 404)
    # Definitions refused before anything runs, naming the field.
    for definition, field in [({}, "fromImage"), ({"fromImage": "a", "fromTemplate": "b"}, "fromImage"),
                              ({"fromTemplate": f"nosuch-{name}"}, "fromTemplate"),
                              ({"fromImage": "a", "steps": [{"type": "ADD", "args": []}]}, "steps[0].type"),
                              ({"fromImage": "a", "steps": [{"type": "RUN"}]}, "steps[0]"),
                              ({"fromImage": "a", "steps": [{"type": "WORKDIR", "args": ["/x\nRUN id"]}]}, "line break"),
                              ({"fromImage": "a", "steps": [{"type": "USER", "args": ["root;id"]}]}, "user name"),
                              ({"fromImage": "a", "steps": [{"type": "COPY", "args": ["../../etc/shadow", "/x"],
                                                             "filesHash": HASH_A}]}, "context"),
                              ({"fromImage": "a", "steps": [{"type": "COPY", "args": ["a", "/x"],
                                                             "filesHash": "c" * 64}]}, "uploaded"),
                              ({"fromImage": "a", "fromImageRegistry": {"type": "gcp"}}, "not supported")]:
        r = start_build(front, build, definition)
        assert_e2b_error(r, 400)
        assert field in r.json()["message"], (definition, r.json())
    assert front.request("GET", f"/templates/{name}/builds/{build['buildID']}/status").json()["status"] == "waiting"
    assert start_build(front, build, {"fromImage": "e2bdev/base"}).status == 204
    assert_e2b_error(start_build(front, build, {"fromImage": "e2bdev/base"}), 400)  # not waiting any more
    assert wait_build(front, build)[0]["status"] == "ready"

    # The signed upload URL: no key needed, but its token is; not another hash, not expired.
    link = front.request("GET", f"/templates/{name}/files/{'d' * 64}").json()
    assert link["present"] is False
    url = urllib.parse.urlsplit(link["url"])
    query = dict(urllib.parse.parse_qsl(url.query))
    base = f"http://{url.netloc}"
    for path in [url.path.replace("d" * 64, "e" * 64) + "?" + url.query,
                 url.path + "?" + urllib.parse.urlencode({**query, "token": "0" * 64}),
                 url.path + "?" + urllib.parse.urlencode({**query, "expires": str(int(query["expires"]) + 1)}),
                 url.path + "?expires=1&token=" + query["token"], url.path]:
        assert_e2b_error(put(base + path, b"x"), 401)
    assert_e2b_error(put(link["url"], b"", method="GET"), 405)
    assert_e2b_error(put(link["url"], b""), 400)
    assert front.request("GET", f"/templates/{name}/files/{'d' * 64}").json()["present"] is False
    # Tags: unknown targets and tags, the default tag kept.
    assert_e2b_error(front.request("POST", "/templates/tags", {"target": f"nosuch-{name}", "tags": ["x"]}), 404)
    assert_e2b_error(front.request("POST", "/templates/tags", {"target": name, "tags": ["bad tag"]}), 400)
    assert_e2b_error(front.request("DELETE", "/templates/tags", {"name": name, "tags": ["default"]}), 400)
    assert_e2b_error(front.request("DELETE", "/templates/tags", {"name": name, "tags": ["nosuch"]}), 404)
    assert_e2b_error(front.request("GET", f"/templates/nosuch-{name}/tags"), 404)
    assert front.request("DELETE", f"/templates/{name}").status == 204
    assert_e2b_error(front.request("DELETE", f"/templates/{name}"), 404)
    assert_e2b_error(front.request("GET", f"/templates/aliases/{name}"), 404)


def test_an_upload_cannot_reach_outside_its_build(e2b, tmp_path):
    """Entries with .. and absolute or escaping symlinks: the build fails or keeps them inside."""
    front, made = e2b
    name = f"evil-{uuid.uuid4().hex[:8]}"
    build = request_build(front, name)
    marker = tmp_path / "outside"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../../../../" + str(marker).lstrip("/"))
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    upload(front, name, HASH_A, raw.getvalue())
    assert start_build(front, build, {"fromImage": "e2bdev/base", "steps": [
        {"type": "COPY", "args": ["x", "/x"], "filesHash": HASH_A}]}).status == 204
    status, _ = wait_build(front, build)
    # The entry is refused or kept inside the build's context: nothing lands outside.
    assert status["status"] == "error" and "x" in status["reason"]["message"], status
    assert status["reason"]["step"] == "1", status  # the COPY's own step, not the one before it
    assert not marker.exists()

    build = request_build(front, name)
    upload(front, name, "f" * 64, files_tar([("dir", None), ("dir/escape", "->/etc/shadow"), ("dir/up", "->../../..")]))
    assert start_build(front, build, {"fromImage": "e2bdev/base", "steps": [
        {"type": "COPY", "args": ["dir", "/copied/"], "filesHash": "f" * 64},
        {"type": "RUN", "args": ["cat /copied/escape 2>&1 || true; ls /copied/up/ | head -3"]}]}).status == 204
    status, entries = wait_build(front, build)
    assert status["status"] == "ready", (status, entries)
    assert not any("root:" in e["message"] for e in entries), "the host's shadow file never shows"
    sandbox = create(front, made, name)
    assert run(front, sandbox, "readlink /copied/escape").strip() == "/etc/shadow"  # a link, kept as one


def test_a_template_from_an_ordinary_image_gets_e2bs_default_user(daemon_factory, request):
    """fromImage of a registry image without useradd: the default user is made by hand."""
    programs = ["/bin/sh", "/bin/cat", "/bin/ls", "/bin/mkdir", "/bin/chown", "/bin/grep", "/usr/bin/id",
                "/usr/bin/env", "/bin/echo", "/usr/bin/whoami"]
    base = make_layer(host_files(programs) + [Dir("etc", 0o755), File("etc/passwd", b"root:x:0:0::/root:/bin/sh\n"),
                                              File("etc/group", b"root:x:0:\n"), Dir("tmp", 0o1777)])
    with OciRegistry() as reg:
        reg.put_image("e2b/plain", "1", build_image([base], {"Env": ["PATH=/usr/bin:/bin"], "User": "root"}))
        d = daemon_factory()
        d.extra_args = ("--insecure-registry", "127.0.0.1")
        d.start()
        front = E2b(d)
        made = []
        request.addfinalizer(lambda: [front.request("DELETE", f"/sandboxes/{i}") for i in made])
        build = request_build(front, "plain-tpl")
        assert start_build(front, build, {"fromImage": f"{reg.host}/e2b/plain:1", "steps": [
            {"type": "RUN", "args": ["id -un > /tmp/step-user"]},
            {"type": "RUN", "args": ["echo root-step > /root-file", "root"]}],
            "startCmd": "echo up > /tmp/up", "readyCmd": "cat /tmp/up"}).status == 204
        status, entries = wait_build(front, build)
        assert status["status"] == "ready", (status, entries)
        sandbox = create(front, made, "plain-tpl")
        r = d.client().exec(sandbox["sandboxID"], ["/bin/sh", "-c", "whoami; pwd; cat /tmp/step-user /root-file /tmp/up"])
        assert r["exit_code"] == 0, r
        assert r["stdout"].split() == ["user", "/home/user", "user", "root-step", "up"], r


def test_templates_outlive_a_restart_and_a_start_command_that_fails_fails_create(daemon_factory, request):
    d = daemon_factory()
    d.start()
    front = E2b(d)
    made = []
    request.addfinalizer(lambda: [front.request("DELETE", f"/sandboxes/{i}") for i in made])
    good = request_build(front, "keeps")
    assert start_build(front, good, {"fromImage": "e2bdev/base", "steps": [{"type": "WORKDIR", "args": ["/srv"]}],
                                     "startCmd": "sleep 0.3; touch /tmp/ready-now; sleep infinity",
                                     "readyCmd": "test -f /tmp/ready-now"}).status == 204
    assert wait_build(front, good)[0]["status"] == "ready"
    bad = request_build(front, "fails-start")
    assert start_build(front, bad, {"fromImage": "e2bdev/base", "startCmd": "exit 3",
                                    "readyCmd": "false"}).status == 204
    assert wait_build(front, bad)[0]["status"] == "ready"
    before = {s["sandboxID"] for s in front.request("GET", "/v2/sandboxes").json()}
    r = front.request("POST", "/v2/sandboxes", {"templateID": "fails-start"})
    assert_e2b_error(r, 422)
    assert "start command failed" in r.json()["message"], r.json()
    assert {s["sandboxID"] for s in front.request("GET", "/v2/sandboxes").json()} == before, "no sandbox is left"

    d.stop()
    d.start()
    front = E2b(d)
    assert front.request("GET", "/templates/aliases/keeps").status == 200
    assert [t["tag"] for t in front.request("GET", "/templates/keeps/tags").json()] == ["default"]
    sandbox = create(front, made, "keeps")
    r = d.client().exec(sandbox["sandboxID"], ["/bin/sh", "-c", "test -f /tmp/ready-now && pwd && whoami"])
    assert r["exit_code"] == 0 and r["stdout"].split() == ["/srv", "user"], r
    # A template in use keeps its image: deleting it then is refused, and it still starts sandboxes.
    assert_e2b_error(front.request("DELETE", "/templates/keeps"), 409)
    assert front.request("GET", "/templates/aliases/keeps").status == 200
    front.request("DELETE", f"/sandboxes/{sandbox['sandboxID']}")
    assert front.request("DELETE", "/templates/keeps").status == 204


def test_a_builds_status_outlives_a_restart_and_one_cut_short_by_it_reads_as_interrupted(daemon_factory):
    """What the SDKs poll (GET .../builds/{buildID}/status) is kept on disk: after a restart a
    finished build answers as before, with its log and its buildID on the template's tags; one
    the daemon was running when it was killed answers error, saying so. A purge takes them."""
    d = daemon_factory()
    d.start()
    front = E2b(d)
    name = f"kept-{uuid.uuid4().hex[:8]}"
    done = request_build(front, name)
    assert start_build(front, done, {"fromImage": "e2bdev/base",
                                     "steps": [{"type": "RUN", "args": ["echo made it"]}]}).status == 204
    status, entries = wait_build(front, done)
    assert status["status"] == "ready" and any(e["message"] == "made it" for e in entries), entries
    tags = front.request("GET", f"/templates/{name}/tags").json()
    assert [t["buildID"] for t in tags] == [done["buildID"]]
    cut = request_build(front, f"cut-{uuid.uuid4().hex[:8]}")
    start_hanging_build(front, cut, 6019)

    d.stop(signal.SIGKILL)
    d.start()
    front = E2b(d)
    status, again = wait_build(front, done)
    assert status["status"] == "ready"
    assert [e["message"] for e in again] == [e["message"] for e in entries]
    assert front.request("GET", f"/templates/{name}/tags").json() == tags
    status, cut_entries = wait_build(front, cut)
    assert status["status"] == "error" and "interrupted" in status["reason"]["message"], status
    assert "begun" in [e["message"] for e in cut_entries]
    assert harness.wait_until(lambda: not list((d.state_dir / "tmp" / "e2b-builds").glob("*.new")), timeout=5)
    # Deleting the template forgets its builds, on disk too.
    assert front.request("DELETE", f"/templates/{name}").status == 204
    assert_e2b_error(front.request("GET", f"/templates/{name}/builds/{done['buildID']}/status"), 404)
    assert not (d.state_dir / "tmp" / "e2b-builds" / f"{done['buildID']}.json").exists()


def test_deleting_a_template_cancels_its_running_build(e2b):
    front, made = e2b
    name = f"hung-{uuid.uuid4().hex[:8]}"
    build = request_build(front, name)
    path = start_hanging_build(front, build, 6017)
    assert front.request("DELETE", f"/templates/{name}").status == 204
    assert_e2b_error(front.request("GET", path), 404)  # forgotten with its template

    def sleeping() -> bool:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if b"6017" in open(f"/proc/{pid}/cmdline", "rb").read():
                    return True
            except OSError:
                pass
        return False
    deadline = time.monotonic() + 30
    while sleeping():
        assert time.monotonic() < deadline, "the step's sandbox outlived its cancelled build"
        time.sleep(0.2)
    assert_e2b_error(front.request("GET", f"/templates/aliases/{name}"), 404)


def test_pruning_the_build_cache_drops_uploaded_file_sets(e2b):
    front, made = e2b
    name = f"prune-{uuid.uuid4().hex[:8]}"
    request_build(front, name)
    upload(front, name, "9" * 64, files_tar([("a.txt", b"a\n")]))
    pruned = front.daemon.client().delete("/v1/images/build/cache")
    assert pruned.status == 200 and pruned.json()["file_sets_deleted"] >= 1, pruned
    assert front.request("GET", f"/templates/{name}/files/{'9' * 64}").json()["present"] is False
