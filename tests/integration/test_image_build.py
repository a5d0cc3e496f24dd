"""Images built from Dockerfiles (issue 22): the real daemon runs each step in a sandbox of the
build's tier, caches steps by what they depend on, and stores the result as an image that
sandboxes run. Contexts are made by the tests; base images come from the host image, from a
registry the test starts on loopback (oci_registry.py) and from other stages."""

import io
import json
import os
import signal
import subprocess
import tarfile
import tempfile
import urllib.parse
from pathlib import Path

import pytest

import harness
from oci_images import Dir, File, build_image, host_files, make_layer
from oci_registry import OciRegistry

PROGRAMS = ["/bin/sh", "/bin/cat", "/bin/ls", "/bin/mkdir", "/bin/echo", "/usr/bin/id", "/usr/bin/env", "/bin/chmod"]


def context_tar(files: dict, links: dict | None = None, extra=None) -> bytes:
    """A build context: {path: bytes | (bytes, mode)}, {path: symlink target}."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in files.items():
            data, mode = content if isinstance(content, tuple) else (content, 0o644)
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1700000000
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for info, data in (extra or []):
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def build(client, context: bytes, stream=True, **params):
    """POST /v1/images/build: (status, events or JSON body)."""
    query = []
    for key, value in params.items():
        for item in value if isinstance(value, list) else [value]:
            query.append((key, str(item).lower() if isinstance(item, bool) else str(item)))
    target = "/v1/images/build" + ("?" + urllib.parse.urlencode(query) if query else "")
    headers = {"Content-Type": "application/x-tar"}
    if stream:
        headers["Accept"] = "application/x-ndjson"
    r = client.request("POST", target, context, headers=headers, timeout=300)
    if stream and r.status == 200:
        return r.status, [json.loads(line) for line in r.body.decode().splitlines() if line]
    return r.status, r.json() if r.body else None


def steps(events) -> list[tuple[str, bool | None]]:
    return [(e["instruction"], e.get("cached")) for e in events if e["status"] == "step"]


def output(events) -> str:
    return "".join(e["data"] for e in events if e["status"] == "output")


def run(client, sandbox_id, script) -> str:
    r = client.exec(sandbox_id, ["/bin/sh", "-c", script])
    assert r["exit_code"] == 0, r
    return r["stdout"]


APP_DOCKERFILE = b"""# syntax=docker/dockerfile:1
FROM host
ARG GREETING=hello
ENV APP_HOME=/srv/app \\
    MODE=test
LABEL team=tools
WORKDIR $APP_HOME
COPY src/ ./
COPY --chmod=0750 tool.sh /opt/bin/
COPY --chown=daemon:daemon owned.txt notes/
RUN echo "$GREETING in $MODE" > built.txt && id -u && ls /srv/app
EXPOSE 8080/tcp
ENTRYPOINT ["/bin/sh", "-c"]
CMD ["cat built.txt"]
"""


def app_context(main=b"print('v1')\n"):
    return context_tar({
        "Dockerfile": APP_DOCKERFILE,
        "src/main.py": main,
        "src/lib/util.py": b"x = 1\n",
        "tool.sh": (b"#!/bin/sh\necho tool\n", 0o644),
        "owned.txt": b"mine\n",
        ".env": b"SECRET=1\n",
        "src/debug.log": b"noise\n",
        ".dockerignore": b".env\n**/*.log\n",
    })


def test_a_dockerfile_builds_an_image_that_runs_and_caches_its_steps(daemon, client, request):
    status, events = build(client, app_context(), tag="app", build_arg="GREETING=hey")
    assert status == 200 and events[-1]["status"] == "done", events[-3:]
    image = events[-1]["image"]
    assert image["source"] == "build" and image["references"] == ["app"]
    assert image["config"]["env"] == ["APP_HOME=/srv/app", "MODE=test"]
    assert image["config"]["workdir"] == "/srv/app"
    assert image["config"]["entrypoint"] == ["/bin/sh", "-c"] and image["config"]["cmd"] == ["cat built.txt"]
    assert image["config"]["exposed_ports"] == ["8080/tcp"] and image["config"]["labels"] == {"team": "tools"}
    ran = [s for s in steps(events) if s[1] is not None]
    assert all(cached is False for _, cached in ran), ran
    assert output(events).splitlines()[0] == "0", "RUN runs as root and its output streams"
    assert "main.py" in output(events)

    sb = client.create(image="app")
    request.addfinalizer(lambda: client.remove(sb["id"]))
    assert sb["workdir"] == "/srv/app" and sb["env"]["MODE"] == "test"
    out = run(client, sb["id"], "cat built.txt; ls -a; ls lib; ls -l /opt/bin/tool.sh; ls -ln notes/owned.txt; "
                                 "test -e .env || echo no-env; test -e debug.log || echo no-log")
    lines = out.splitlines()
    assert lines[0] == "hey in test"
    assert "main.py" in lines and "util.py" in lines
    assert any(l.startswith("-rwxr-x---") and l.endswith("/opt/bin/tool.sh") for l in lines), out
    assert any(" 1 1 " in l and l.endswith("notes/owned.txt") for l in lines), "--chown=daemon:daemon: 1:1"
    assert "no-env" in lines and "no-log" in lines, ".dockerignore leaves them out"

    # Built again: every step from the cache, the image the same one.
    status, again = build(client, app_context(), tag="app", build_arg="GREETING=hey")
    assert status == 200 and again[-1]["image"]["name"] == image["name"]
    assert all(cached for _, cached in steps(again) if cached is not None)
    assert any(e["status"] == "exporting" and e["cached"] for e in again)

    # A changed source: its COPY and what follows run again, what comes before does not.
    status, changed = build(client, app_context(main=b"print('v2')\n"), tag="app", build_arg="GREETING=hey")
    assert status == 200
    by_step = dict(steps(changed))
    assert by_step["WORKDIR $APP_HOME"] is True
    assert by_step["COPY src/ ./"] is False and by_step['RUN echo "$GREETING in $MODE" > built.txt && id -u && ls /srv/app'] is False
    assert "image" in changed[-1], changed[-3:]
    assert changed[-1]["image"]["name"] != image["name"]
    # The name moved to the new image; the old one keeps none, and goes when removed.
    assert client.get("/v1/images/app").json()["name"] == changed[-1]["image"]["name"]
    assert client.get("/v1/images/" + image["name"]).json()["references"] == []
    # The cache is made of snapshots, named for what they are; emptied, the images stay and the
    # next build runs every step again.
    names = [s["name"] for s in client.get("/v1/snapshots").json()["snapshots"]]
    assert any(n.startswith("bulkhead-build:") for n in names)
    pruned = client.delete("/v1/images/build/cache")
    assert pruned.status == 200 and pruned.json()["deleted"] >= 4
    assert not any(s["name"].startswith("bulkhead-build:") for s in client.get("/v1/snapshots").json()["snapshots"])
    assert client.get("/v1/images/app").status == 200
    status, rebuilt = build(client, app_context(main=b"print('v2')\n"), tag="app", build_arg="GREETING=hey")
    assert status == 200 and not any(cached for _, cached in steps(rebuilt))
    assert rebuilt[-1]["image"]["name"] == changed[-1]["image"]["name"], "the same steps make the same image"


def test_multi_stage_builds_from_a_pulled_image_and_copy_between_stages(daemon, client, session_dir, request):
    base = make_layer(host_files(PROGRAMS) + [Dir("etc", 0o755),
                                              File("etc/passwd", b"root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"),
                                              File("etc/group", b"root:x:0:\napp:x:1000:\n"),
                                              Dir("tmp", 0o1777)])
    with OciRegistry() as reg:
        reg.put_image("build/base", "1", build_image([base], {"Env": ["PATH=/usr/bin:/bin", "FROM_BASE=yes"]}))
        ref = f"{reg.host}/build/base:1"
        d = harness.Daemon(state_dir=session_dir / "build-pull", log_path=session_dir / "daemon-build-pull.log")
        d.extra_args = ("--insecure-registry", "127.0.0.1")
        request.addfinalizer(d.destroy)
        d.start()
        c = d.client()
        dockerfile = f"""
FROM {ref} AS builder
RUN mkdir -p /out && echo "artifact from $FROM_BASE" > /out/artifact && chmod 0600 /out/artifact
FROM scratch AS empty
COPY --from=builder /out/artifact /artifact
FROM {ref}
USER app
WORKDIR /home/app/work
COPY --from=builder /out /opt/out
COPY --from=builder /out/artifact ./renamed
RUN id -u > whoami && ls -ln /home/app
""".encode()
        status, events = build(c, context_tar({"Dockerfile": dockerfile}), tag="multi")
        assert status == 200 and events[-1]["status"] == "done", events[-3:]
        assert any(e["status"] == "resolved" for e in events), "the base was pulled for the build"
        assert not any(e.get("stage") == 1 and e["status"] == "step" for e in events), "an unneeded stage is skipped"
        sb = c.create(image="multi")
        request.addfinalizer(lambda: c.remove(sb["id"]))
        assert sb["user"] == "app" and sb["workdir"] == "/home/app/work" and sb["env"]["FROM_BASE"] == "yes"
        r = c.exec(sb["id"], ["/bin/sh", "-c", "cat /opt/out/artifact renamed whoami; ls -ln /home/app"], user="root")
        assert r["exit_code"] == 0, r
        lines = r["stdout"].splitlines()
        assert lines[:3] == ["artifact from yes", "artifact from yes", "1000"], r
        assert " 1000 1000 " in lines[-1], "WORKDIR makes its directory for USER"
        # The copied file keeps its mode (0600, root's): the image's user cannot read it.
        assert c.exec(sb["id"], ["/bin/cat", "/opt/out/artifact"])["exit_code"] != 0

        # FROM scratch with a file copied in: the image holds exactly that.
        status, events = build(c, context_tar({"Dockerfile": dockerfile}), tag="empty", target="empty")
        assert status == 200, events
        rootfs = d.state_dir / "images" / events[-1]["image"]["name"] / "rootfs"
        assert (rootfs / "artifact").read_text() == "artifact from yes\n"
        assert {p.name for p in rootfs.iterdir()} <= {"artifact", "proc", "dev", "sys", "workspace", "tmp", "run"}


def test_a_failing_step_says_which_with_its_output_and_names_nothing(client):
    dockerfile = b"FROM host\nRUN echo before\nRUN echo 'it broke' >&2; exit 3\nRUN echo never\n"
    status, events = build(client, context_tar({"Dockerfile": dockerfile}), tag="broken")
    assert status == 200
    last = events[-1]
    assert last["status"] == "error" and last["error"]["code"] == "build_failed"
    assert "step 2/3" in last["error"]["message"] and "exited with 3" in last["error"]["message"]
    assert "it broke" in last["error"]["message"]
    assert not any(e["status"] == "step" and e["instruction"] == "RUN echo never" for e in events)
    assert client.get("/v1/images/broken").status == 404
    # Without streaming: the same error as the answer.
    status, body = build(client, context_tar({"Dockerfile": dockerfile}), stream=False, tag="broken")
    assert status == 422 and body["error"]["code"] == "build_failed"


def test_the_platform_args_are_the_hosts(client):
    """BuildKit's automatic platform ARGs: FROM --platform=$BUILDPLATFORM, and a stage that
    declares TARGETARCH, see the host's platform."""
    machine = os.uname().machine
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    dockerfile = (b"FROM --platform=$BUILDPLATFORM host AS tools\nARG TARGETARCH\nARG TARGETPLATFORM\n"
                  b"RUN echo \"arch=$TARGETARCH platform=$TARGETPLATFORM\"\n")
    status, events = build(client, context_tar({"Dockerfile": dockerfile}))
    assert status == 200 and events[-1]["status"] == "done", events[-1]
    assert f"arch={arch} platform=linux/{arch}" in output(events), output(events)


def test_run_steps_reach_no_network_unless_the_build_allows(client):
    """Without an allowlist a step has no egress at all (no proxy, no resolver); with one it
    reaches the allowed destinations through the sandbox's egress proxy, as any sandbox does."""
    dockerfile = b"FROM host\nRUN echo \"proxy=${HTTP_PROXY:-none}\"; cat /etc/resolv.conf 2>/dev/null || echo no-resolver\n"
    status, events = build(client, context_tar({"Dockerfile": dockerfile}))
    assert status == 200 and events[-1]["status"] == "done"
    assert output(events).splitlines()[0] == "proxy=none", output(events)
    status, events = build(client, context_tar({"Dockerfile": dockerfile}), allow="example.test", no_cache=True)
    assert status == 200 and events[-1]["status"] == "done", events[-1]
    assert output(events).startswith("proxy=http://127.0.0.1:"), output(events)


def test_bad_builds_are_clear_4xx_and_hostile_contexts_stay_inside(client, daemon):
    def expect(status_code, code_part, context, **params):
        status, body = build(client, context, stream=False, **params)
        assert status == status_code, (status, body)
        assert code_part in json.dumps(body), body

    ok = context_tar({"Dockerfile": b"FROM host\n"})
    expect(400, "HEALTHCHECK is not supported", context_tar({"Dockerfile": b"FROM host\nHEALTHCHECK CMD true\n"}))
    expect(400, "line 2", context_tar({"Dockerfile": b"FROM host\nFROBNICATE x\n"}))
    expect(400, "ADD from a URL", context_tar({"Dockerfile": b"FROM host\nADD https://example.com/x /x\n"}))
    expect(400, "no Dockerfile", context_tar({"other": b"x"}))
    expect(400, "not a tar", b"this is not a tar archive, not even close" * 20)
    expect(400, "tag", ok, tag="Bad Name")
    expect(400, "unknown parameter", ok, colour="blue")
    expect(400, "network", ok, allow="not a host!")
    expect(404, "not_found", context_tar({"Dockerfile": b"FROM nothing-stored-here\n"}), pull="never")
    expect(400, "not found in the build context", context_tar({"Dockerfile": b"FROM host\nCOPY missing.txt /x\n"}))
    expect(400, "leaves the build context", context_tar({"Dockerfile": b"FROM host\nCOPY ../../etc/passwd /x\n"}))
    expect(400, "has \\\"..\\\"", context_tar({"Dockerfile": b"FROM host\n", "../escape": b"x"}))
    expect(409, "image_exists", ok, tag="host")
    expect(400, "at most 500", context_tar({"Dockerfile": b"FROM host\n" + b"WORKDIR /a\n" * 501}))
    expect(400, "only (nothing is emulated)", context_tar({"Dockerfile": b"FROM --platform=linux/s390x host\n"}))

    # A symlink in the context resolves inside it: "/etc/shadow" there is the context's own
    # etc/shadow (absent here), never the host's; a link copied within a tree stays a link.
    links = context_tar({"Dockerfile": b"FROM host\nCOPY secret /stolen\n"}, links={"secret": "/etc/shadow"})
    expect(400, "not found in the build context", links)
    dockerfile = b"FROM host\nCOPY tree/ /tree/\nRUN cat /tree/link || echo unreadable\n"
    status, events = build(client, context_tar({"Dockerfile": dockerfile, "tree/a": b"a"}, links={"tree/link": "/etc/shadow"}))
    assert status == 200 and events[-1]["status"] == "done"
    assert "root:" not in output(events), "the host's file never travels"

    # Set-id bits and device nodes of a context never land on the host.
    dev = tarfile.TarInfo("null")
    dev.type, dev.devmajor, dev.devminor = tarfile.CHRTYPE, 1, 3
    suid = tarfile.TarInfo("suid")
    suid.mode, suid.size = 0o4755, 2
    status, events = build(client, context_tar({"Dockerfile": b"FROM host\nCOPY suid /suid\nRUN ls -l /suid\n"},
                                               extra=[(dev, None), (suid, b"#!")]))
    assert status == 200 and events[-1]["status"] == "done", events[-1]
    assert output(events).startswith("-rwxr-xr-x"), output(events)
    leftovers = list((daemon.state_dir / "tmp").glob("build-*"))
    assert leftovers == [], "a build's directory goes when it ends"


def test_the_cli_builds_with_its_flags(daemon, tmp_path):
    (tmp_path / "ctx" / "app").mkdir(parents=True)
    (tmp_path / "ctx" / "app" / "hello.txt").write_text("hello\n")
    (tmp_path / "ctx" / "node_modules").mkdir()
    (tmp_path / "ctx" / "node_modules" / "big").write_bytes(b"0" * 1024)
    (tmp_path / "ctx" / ".dockerignore").write_text("node_modules\n")
    (tmp_path / "ctx" / "docker").mkdir()
    (tmp_path / "ctx" / "docker" / "app.Dockerfile").write_text(
        "FROM host\nARG WHO\nCOPY app/ /app/\nRUN test ! -e /app/node_modules && echo \"built for $WHO\"\n")
    env = {**os.environ, "BULKHEAD_URL": f"http://127.0.0.1:{daemon.port}", "BULKHEAD_API_KEY": daemon.key}
    r = subprocess.run([str(harness.BULKHEAD), "build", "-t", "cli-app", "-f", str(tmp_path / "ctx/docker/app.Dockerfile"),
                        "--build-arg", "WHO=the cli", str(tmp_path / "ctx")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "cli-app\n"
    assert "Step 2/3 : COPY app/ /app/" in r.stderr and "built for the cli" in r.stderr
    r = subprocess.run([str(harness.BULKHEAD), "image", "prune-cache"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("deleted "), r
    r = subprocess.run([str(harness.BULKHEAD), "build", "-f", "/etc/hostname", str(tmp_path / "ctx")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "inside the build context" in r.stderr
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM host\nRUN exit 7\n")
    r = subprocess.run([str(harness.BULKHEAD), "build", str(tmp_path / "ctx")],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and "exited with 7" in r.stderr


def test_the_e2b_front_takes_a_built_image_as_a_template(daemon, client, request):
    dockerfile = b"FROM host\nRUN echo 'from a build' > /opt/hello\n"
    status, events = build(client, context_tar({"Dockerfile": dockerfile}), tag="e2b-built")
    assert status == 200 and events[-1]["status"] == "done"
    url = urllib.parse.urlsplit(daemon.e2b_url)

    def e2b(method, path, body=None):
        conn = harness.http.client.HTTPConnection(url.hostname, url.port, timeout=120)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"X-API-KEY": daemon.e2b_key, "Content-Type": "application/json"})
        response = conn.getresponse()
        answer = response.status, json.loads(response.read() or b"null")
        conn.close()
        return answer

    status, listed = e2b("GET", "/snapshots")
    assert status == 200 and not any(n.startswith("bulkhead-build:") for s in listed for n in s["names"]), \
        "a build's cache is no E2B template"
    status, alias = e2b("GET", "/templates/aliases/e2b-built")
    assert status == 200 and alias["templateID"] == "e2b-built"
    assert e2b("GET", "/templates/aliases/never-built")[0] == 404
    status, created = e2b("POST", "/sandboxes", {"templateID": "e2b-built", "timeout": 60})
    assert status == 201, created
    request.addfinalizer(lambda: client.remove(created["sandboxID"]))
    assert run(client, created["sandboxID"], "cat /opt/hello") == "from a build\n"


def test_an_image_built_on_host_shows_the_host_images_current_additions(daemon, client, request):
    """The host image's own files under /usr (bulkhead's sudo, ...) are read at each boot, not
    copied into what is built on it: an upgraded host image reaches images built before it."""
    status, events = build(client, context_tar({"Dockerfile": b"FROM host\nRUN echo built > /opt/mark\n"}),
                           tag="on-host")
    assert status == 200 and events[-1]["status"] == "done", events[-3:]
    stored = daemon.state_dir / "images" / events[-1]["image"]["name"] / "rootfs"
    assert list((stored / "usr").iterdir()) == [], "nothing of the host image is copied in"

    host_usr_bin = (daemon.state_dir / "images" / "host" / "rootfs").resolve() / "usr" / "bin"
    marker = host_usr_bin / "bulkhead-test-upgrade"
    marker.write_text("#!/bin/sh\necho upgraded\n")
    marker.chmod(0o755)
    request.addfinalizer(lambda: marker.unlink(missing_ok=True))
    sb = client.create(image="on-host", sudo_users=["user"])
    request.addfinalizer(lambda: client.remove(sb["id"]))
    out = client.sh(sb["id"], "cat /opt/mark; bulkhead-test-upgrade; sudo id -u; test -x /usr/bin/env && echo host-usr",
                    user="user")
    assert out.splitlines() == ["built", "upgraded", "0", "host-usr"], out


def build_sandboxes(client) -> list:
    return [s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]
            if "bulkhead.build" in (s.get("metadata") or {})]


def test_a_client_gone_mid_step_cancels_the_build_at_once(daemon, client):
    dockerfile = b"FROM host\nRUN echo started; sleep 300\n"
    conn = harness.http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    conn.request("POST", "/v1/images/build?tag=cancelled", body=context_tar({"Dockerfile": dockerfile}),
                 headers={"Authorization": f"Bearer {daemon.key}", "Accept": "application/x-ndjson",
                          "Content-Type": "application/x-tar"})
    response = conn.getresponse()
    while True:
        event = json.loads(response.readline())
        if event["status"] == "output" and "started" in event["data"]:
            break
    assert build_sandboxes(client), "the step runs in a sandbox of the build's"
    conn.close()
    assert harness.wait_until(lambda: not build_sandboxes(client), timeout=20), build_sandboxes(client)
    assert harness.wait_until(lambda: not list((daemon.state_dir / "tmp").glob("build-*")), timeout=20)
    assert client.get("/v1/images/cancelled").status == 404


def test_a_build_past_its_timeout_ends_with_the_step_it_was_at_and_leaves_nothing(daemon, client):
    """A RUN that never ends holds nothing past the build's timeout_s: its sandbox goes at once,
    the answer names the step. Bad values are 400; the CLI's --timeout sends it."""
    dockerfile = b"FROM host\nRUN echo first\nRUN echo started; sleep 300\nRUN echo never\n"
    started = harness.time.monotonic()
    status, events = build(client, context_tar({"Dockerfile": dockerfile}), tag="too-slow", timeout_s=3)
    elapsed = harness.time.monotonic() - started
    assert status == 200
    last = events[-1]
    assert last["status"] == "error" and last["error"]["code"] == "build_timeout", last
    message = last["error"]["message"]
    assert "timeout of 3 s" in message and "step 2/3 (RUN echo started; sleep 300)" in message, message
    assert "started" in output(events)
    assert elapsed < 120, "it ended at its timeout, not when the step did"
    assert harness.wait_until(lambda: not build_sandboxes(client), timeout=20), build_sandboxes(client)
    assert client.get("/v1/images/too-slow").status == 404
    # Without streaming: the same error as the answer.
    status, body = build(client, context_tar({"Dockerfile": dockerfile}), stream=False, tag="too-slow", timeout_s=2)
    assert status == 422 and body["error"]["code"] == "build_timeout", body
    # timeout_s=0: no limit (the build of quick steps just finishes).
    status, events = build(client, context_tar({"Dockerfile": b"FROM host\nRUN echo quick\n"}), timeout_s=0)
    assert status == 200 and events[-1]["status"] == "done", events[-1]
    for bad in ("-1", "soon", "604801", ""):
        status, body = build(client, context_tar({"Dockerfile": b"FROM host\n"}), stream=False, timeout_s=bad)
        assert status == 400 and "timeout_s" in body["error"]["message"], (bad, body)
    with tempfile.TemporaryDirectory() as context:
        Path(context, "Dockerfile").write_bytes(dockerfile)
        env = {**os.environ, "BULKHEAD_URL": f"http://127.0.0.1:{daemon.port}", "BULKHEAD_API_KEY": daemon.key}
        r = subprocess.run([str(harness.BULKHEAD), "build", "--timeout", "2", context],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode != 0 and "within its timeout of 2 s" in r.stderr, r


def test_a_daemon_killed_mid_build_leaves_nothing_of_it_after_its_restart(daemon_factory):
    d = daemon_factory()
    d.start()
    c = d.client()
    conn = harness.http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    conn.request("POST", "/v1/images/build?tag=killed",
                 body=context_tar({"Dockerfile": b"FROM host\nRUN echo started; sleep 300\n"}),
                 headers={"Authorization": f"Bearer {d.key}", "Accept": "application/x-ndjson",
                          "Content-Type": "application/x-tar"})
    response = conn.getresponse()
    while "started" not in json.loads(response.readline()).get("data", ""):
        pass
    assert build_sandboxes(c) and list((d.state_dir / "tmp").glob("build-*"))
    d.stop(signal.SIGKILL)
    conn.close()
    d.start()
    c = d.client()
    assert build_sandboxes(c) == [], "a build's step sandbox does not outlive its build"
    assert list((d.state_dir / "tmp").glob("build-*")) == []
    assert c.get("/v1/images/killed").status == 404
