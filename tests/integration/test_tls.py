"""TLS on the daemon's TCP listeners (serve --tls-cert/--tls-key, issue 24): the API and the E2B
front speak only TLS 1.2+ there, every route works through it (streams too), the audit names the
real client address, the CLI and the Python SDK talk https to it and check its certificate; bad
certificate settings stop the daemon with a clear message; a renewed certificate is served from
SIGHUP, or from the change to its files, without a restart; the unix socket stays plain."""
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from harness import BULKHEAD

SDK = Path(__file__).resolve().parents[2] / "sdk/python"


def make_cert(directory: Path, name: str, cn: str = "localhost") -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={cn}",
                    "-addext", f"subjectAltName=DNS:{cn},IP:127.0.0.1"],
                   check=True, capture_output=True)
    key.chmod(0o600)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    return directory, *make_cert(directory, "daemon")


@pytest.fixture(scope="module")
def tls_daemon(certs, session_dir):
    from conftest import _new_daemon
    _, cert, key = certs
    daemon = _new_daemon(session_dir)
    daemon.extra_args = ("--tls-cert", str(cert), "--tls-key", str(key))
    daemon.tls = ssl.create_default_context(cafile=str(cert))
    daemon.start()
    yield daemon
    daemon.destroy()


def test_the_api_is_served_over_tls_with_every_route_working(tls_daemon):
    client = tls_daemon.client()
    health = client.get("/healthz")
    assert health.status == 200, health
    sandbox = client.create()["id"]
    assert client.sh(sandbox, "echo over tls") == "over tls\n"
    payload = os.urandom(300_000)
    client.upload(sandbox, "/workspace/blob", payload)
    r = client.get(f"/v1/sandboxes/{sandbox}/files?path=/workspace/blob")
    assert r.status == 200 and r.body == payload
    # A streamed exec: its output arrives in pieces through the relay.
    conn, response = client.stream_exec(sandbox, "for i in 1 2 3; do echo $i; sleep 0.1; done")
    events = [json.loads(line) for line in response.read().splitlines() if line.strip()]
    conn.close()
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0, events
    assert "".join(e.get("data", "") for e in events if e["type"] == "stdout") == "1\n2\n3\n", events
    # The audit names the TCP peer, not the relay's socket.
    record = client.get(f"/v1/audit?target={sandbox}").json()["records"][-1]
    assert record["source"] == "127.0.0.1", record
    client.remove(sandbox)


def test_plain_http_and_old_tls_get_nothing_from_a_tls_listener(tls_daemon):
    with socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10) as plain:
        plain.sendall(f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tls_daemon.key}\r\n\r\n".encode())
        answer = plain.recv(4096)
    assert not answer.startswith(b"HTTP/"), answer
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname = False
    old.verify_mode = ssl.CERT_NONE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (what this test checks the daemon refuses)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # (so that this client offers TLS 1.1 at all)
    with pytest.raises(ssl.SSLError, match="PROTOCOL_VERSION"):
        conn = http.client.HTTPSConnection("localhost", tls_daemon.port, timeout=10, context=old)
        conn.request("GET", "/healthz")
    # A client that does not trust the certificate refuses it.
    untrusting = ssl.create_default_context()
    with pytest.raises(ssl.SSLCertVerificationError):
        conn = http.client.HTTPSConnection("localhost", tls_daemon.port, timeout=10, context=untrusting)
        conn.request("GET", "/healthz")
    # The unix socket stays plain HTTP.
    assert tls_daemon.unix_client().get("/healthz").status == 200


def test_the_e2b_front_is_tls_too(tls_daemon):
    address = tls_daemon.client().get("/healthz").json()["e2b_address"]
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPSConnection("localhost", int(port), timeout=30, context=tls_daemon.tls)
    conn.request("GET", "/sandboxes", headers={"X-API-KEY": tls_daemon.e2b_key})
    r = conn.getresponse()
    assert r.status == 200, (r.status, r.read())


def cli(daemon, *args, ca=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env["BULKHEAD_API_KEY"] = daemon.key
    if ca:
        env["BULKHEAD_CA_CERT"] = str(ca)
    return subprocess.run([str(BULKHEAD), "--url", f"https://localhost:{daemon.port}", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_cli_talks_https_and_checks_the_certificate(tls_daemon, certs):
    _, cert, _ = certs
    made = cli(tls_daemon, "create", ca=cert)
    assert made.returncode == 0, made.stderr
    sandbox = made.stdout.split()[0]
    ran = cli(tls_daemon, "exec", sandbox, "--", "sh", "-c", "echo streamed; echo err >&2; exit 3", ca=cert)
    assert ran.returncode == 3 and ran.stdout == "streamed\n" and "err" in ran.stderr, ran
    assert sandbox in cli(tls_daemon, "ls", ca=cert).stdout
    refused = cli(tls_daemon, "ls")  # the system's authorities do not know this certificate
    assert refused.returncode != 0 and "TLS" in refused.stderr, refused
    assert cli(tls_daemon, "rm", sandbox, ca=cert).returncode == 0


def test_the_python_sdk_talks_https(tls_daemon, certs):
    _, cert, _ = certs
    script = ("import sys; from bulkhead import Bulkhead\n"
              "with Bulkhead(url=sys.argv[1], api_key=sys.argv[2]) as bh:\n"
              "    with bh.sandboxes.create() as box:\n"
              "        print(box.exec('echo sdk').stdout, end='')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env.update(SSL_CERT_FILE=str(cert), PYTHONPATH=str(SDK))
    ran = subprocess.run([sys.executable, "-c", script, f"https://localhost:{tls_daemon.port}", tls_daemon.key],
                         env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stdout == "sdk\n", ran


def test_bad_tls_settings_stop_the_daemon_with_a_clear_message(daemon_factory, certs):
    directory, cert, key = certs
    other_cert, _ = make_cert(directory, "other")
    (directory / "garbage.pem").write_text("not a certificate\n")
    for args, says in [(("--tls-cert", str(cert)), "go together"),
                       (("--tls-cert", str(directory / "missing.pem"), "--tls-key", str(key)), "missing.pem"),
                       (("--tls-cert", str(directory / "garbage.pem"), "--tls-key", str(key)), "garbage.pem"),
                       (("--tls-cert", str(other_cert), "--tls-key", str(key)), "is not the key")]:
        daemon = daemon_factory()
        daemon.extra_args = args
        with pytest.raises(RuntimeError) as failed:
            daemon.start(timeout=20)
        assert says in str(failed.value), (args, str(failed.value)[-2000:])


def test_tls_connections_that_end_or_fail_leave_nothing_open(tls_daemon):
    client = tls_daemon.client()
    for _ in range(20):
        assert client.get("/healthz").status == 200
    for junk in (b"\x16\x03\x01\x00\x05hello", b"GET / HTTP/1.1\r\n\r\n", b""):
        with socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10) as raw:
            raw.sendall(junk)
    # A client that stops half-way through its handshake is cut off (within 10 s).
    stalled = socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if client.metric("bulkhead_http_connections_open") <= 1:  # this request's own
            break
        time.sleep(0.2)
    assert client.metric("bulkhead_http_connections_open") <= 1
    assert stalled.recv(1) == b""
    stalled.close()


def handshake(port: int, ca: Path) -> None:
    """A TLS handshake with the daemon, checking its certificate against `ca`."""
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost"):
            pass


def handshakes(port: int, ca: Path) -> bool:
    try:
        handshake(port, ca)
        return True
    except ssl.SSLError:
        return False


def until(done, seconds: float, daemon) -> None:
    """Waits for done() to hold, failing with the daemon's log after `seconds`."""
    deadline = time.time() + seconds
    while not done():
        assert time.time() < deadline, daemon.log_tail()
        time.sleep(0.1)


def test_a_renewed_certificate_is_served_without_a_restart(daemon_factory, tmp_path):
    first, first_key = make_cert(tmp_path, "first")
    served, served_key = tmp_path / "served.pem", tmp_path / "served-key.pem"

    def serve(cert: Path, key: Path):
        served_key.write_bytes(key.read_bytes())
        served.write_bytes(cert.read_bytes())

    serve(first, first_key)
    served_key.chmod(0o600)
    daemon = daemon_factory()
    daemon.extra_args = ("--tls-cert", str(served), "--tls-key", str(served_key))
    daemon.tls = ssl.create_default_context(cafile=str(first))
    daemon.start()
    port = daemon.client().port
    handshake(port, first)
    kept = http.client.HTTPSConnection("127.0.0.1", port, context=daemon.tls, timeout=10)
    kept.request("GET", "/healthz")
    assert kept.getresponse().read()

    # SIGHUP: the next handshake has the new certificate; a connection made before keeps going.
    second, second_key = make_cert(tmp_path, "second")
    serve(second, second_key)
    daemon.process.send_signal(signal.SIGHUP)
    until(lambda: handshakes(port, second), 10, daemon)
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(port, first)
    kept.request("GET", "/healthz")
    assert kept.getresponse().status == 200
    kept.close()

    # A file that does not load keeps the certificate in use, and says so.
    served.write_text("not a certificate\n")
    daemon.process.send_signal(signal.SIGHUP)
    until(lambda: "still serving the certificate loaded before" in daemon.log_tail(200), 10, daemon)
    handshake(port, second)

    # No signal: the files' change is seen within seconds.
    third, third_key = make_cert(tmp_path, "third")
    serve(third, third_key)
    until(lambda: handshakes(port, third), 30, daemon)
    daemon.tls = ssl.create_default_context(cafile=str(third))
    assert daemon.client().get("/healthz").status == 200
    daemon.stop()
