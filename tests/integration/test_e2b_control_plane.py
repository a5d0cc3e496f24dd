"""The E2B front's control plane (src/e2b/control_plane.cc) over raw HTTP, as E2B's OpenAPI
spec and the SDKs' generated clients shape it: create, get, list with its filters and
pagination, kill, timeout, pause and connect, metrics, network rules, fork, snapshots, the
error body {"code", "message"}, and envd routing by E2b-Sandbox-Id. The real SDKs run in
test_e2b_sdk_*.py; these pin the wire shapes and the error cases."""
import http.client
import io
import json
import tarfile
import time
import urllib.parse
import uuid

import pytest

import fakenet as fn
import harness


class NetnsConnection(http.client.HTTPConnection):
    """HTTP over a socket made in network namespace `netns` (a daemon inside fakenet)."""

    def __init__(self, netns: str, host: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.netns = netns

    def connect(self):
        self.sock = fn.socket_in_netns(self.netns)
        self.sock.settimeout(self.timeout)
        self.sock.connect((self.host, self.port))


class E2b:
    """Raw requests to a daemon's E2B front."""

    def __init__(self, daemon: harness.Daemon, key: str | None = None):
        self.daemon = daemon
        self.address = daemon.client().get("/healthz").json()["e2b_address"]
        self.key = daemon.e2b_key if key is None else key
        # The sandboxes' "domain": getHost(port) names this front.
        self.domain = "localhost:" + self.address.rsplit(":", 1)[1]

    def request(self, method, path, body=None, headers=None):
        host, port = self.address.rsplit(":", 1)
        if self.daemon.netns:
            conn = NetnsConnection(self.daemon.netns, host, int(port), timeout=120)
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
        all_headers = {"X-API-KEY": self.key}
        if body is not None:
            body = body if isinstance(body, (bytes, str)) else json.dumps(body)
            all_headers["Content-Type"] = "application/json"
        all_headers.update(headers or {})
        try:
            conn.request(method, path, body=body, headers=all_headers)
            r = conn.getresponse()
            data = r.read()
            return harness.Response(r.status, dict((k.lower(), v) for k, v in r.getheaders()), data)
        finally:
            conn.close()

    def create(self, **body):
        body.setdefault("templateID", "base")
        r = self.request("POST", "/v2/sandboxes", body)
        assert r.status == 201, r
        return r.json()

    def envd(self, sandbox, method, path, body=None, headers=None):
        all_headers = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": "49983",
                       "X-Access-Token": sandbox["envdAccessToken"]}
        all_headers.update(headers or {})
        return self.request(method, path, body, all_headers)

    def by_host(self, sandbox, port=8000, path="/index.html", headers=None) -> harness.Response:
        """GET `path` at getHost(port), without the API key, as the SDKs' users reach a port."""
        host, front_port = self.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(front_port), timeout=30)
        try:
            conn.request("GET", path, headers={"Host": f"{port}-{sandbox['sandboxID']}.{sandbox['domain']}",
                                               **(headers or {})})
            r = conn.getresponse()
            return harness.Response(r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read())
        finally:
            conn.close()


def assert_e2b_error(r, status):
    assert r.status == status, r
    assert r.headers["content-type"] == "application/json", r
    body = r.json()
    assert body["code"] == status and isinstance(body["message"], str) and body["message"], body


@pytest.fixture
def e2b(daemon):
    front = E2b(daemon)
    made = []
    create = front.create

    def tracked(**body):
        sandbox = create(**body)
        made.append(sandbox["sandboxID"])
        return sandbox

    front.create = tracked
    yield front
    for sandbox_id in made:
        front.request("DELETE", f"/sandboxes/{sandbox_id}")


def test_create_answers_a_sandbox_the_sdks_accept(e2b, client):
    sandbox = e2b.create(timeout=120, metadata={"k": "v"}, envVars={"A": "1"})
    assert sandbox["templateID"] == "base" and sandbox["clientID"] and sandbox["envdVersion"] == "0.6.4"
    assert len(sandbox["envdAccessToken"]) == 64
    assert sandbox["domain"] == e2b.domain
    assert e2b.request("GET", f"/sandboxes/{sandbox['sandboxID']}").json()["domain"] == e2b.domain
    # A bulkhead sandbox underneath, running as E2B's "user" in its home, with the env.
    sid = sandbox["sandboxID"]
    assert client.sh(sid, "id -un; pwd; echo $A") == "user\n/home/user\n1\n"
    bulkhead = client.sandbox(sid)
    assert bulkhead["timeout_s"] == 120 and bulkhead["metadata"] == {"k": "v"}
    assert bulkhead["network"]["mode"] == "open"


def test_get_answers_the_detail_and_an_unknown_id_is_404(e2b):
    sandbox = e2b.create(metadata={"team": "a"})
    r = e2b.request("GET", f"/sandboxes/{sandbox['sandboxID']}")
    assert r.status == 200, r
    detail = r.json()
    for field in ("templateID", "sandboxID", "clientID", "startedAt", "endAt", "envdVersion", "cpuCount",
                  "memoryMB", "diskSizeMB", "state"):
        assert field in detail, field
    assert detail["state"] == "running" and detail["metadata"] == {"team": "a"}
    assert detail["lifecycle"] == {"onTimeout": "kill", "autoResume": False}
    assert_e2b_error(e2b.request("GET", "/sandboxes/nosuchsandbox0000000"), 404)
    assert_e2b_error(e2b.request("GET", "/sandboxes/..%2f..%2fetc"), 404)


def test_list_filters_by_metadata_as_the_sdks_encode_it_and_by_state(e2b):
    tag = f"t{time.monotonic_ns()}"
    a = e2b.create(metadata={"tag": tag, "k": "v w"})
    b = e2b.create(metadata={"tag": tag, "k": "other"})
    # {"tag": tag, "k": "v w"}: each key and value encoded, the pairs form-encoded, and the
    # whole encoded again as the parameter, as both SDKs send it.
    inner = urllib.parse.urlencode({urllib.parse.quote(k): urllib.parse.quote(v)
                                    for k, v in {"tag": tag, "k": "v w"}.items()})
    r = e2b.request("GET", "/v2/sandboxes?metadata=" + urllib.parse.quote(inner, safe=""))
    assert r.status == 200, r
    assert [s["sandboxID"] for s in r.json()] == [a["sandboxID"]]

    assert e2b.request("POST", f"/sandboxes/{b['sandboxID']}/pause").status == 204
    only_tag = "metadata=" + urllib.parse.quote(f"tag={tag}", safe="")
    paused = e2b.request("GET", f"/v2/sandboxes?{only_tag}&state=paused").json()
    running = e2b.request("GET", f"/v2/sandboxes?{only_tag}&state=running").json()
    both = e2b.request("GET", f"/v2/sandboxes?{only_tag}&state=running%2Cpaused").json()
    assert [s["sandboxID"] for s in paused] == [b["sandboxID"]] and paused[0]["state"] == "paused"
    assert [s["sandboxID"] for s in running] == [a["sandboxID"]]
    assert {s["sandboxID"] for s in both} == {a["sandboxID"], b["sandboxID"]}
    assert_e2b_error(e2b.request("GET", "/v2/sandboxes?state=starting"), 400)


def test_list_pages_with_x_next_token(e2b):
    tag = f"p{time.monotonic_ns()}"
    made = {e2b.create(metadata={"tag": tag})["sandboxID"] for _ in range(3)}
    query = "metadata=" + urllib.parse.quote(f"tag={tag}", safe="")
    seen = []
    token = None
    pages = 0
    while True:
        path = f"/v2/sandboxes?{query}&limit=2" + (f"&nextToken={urllib.parse.quote(token)}" if token else "")
        r = e2b.request("GET", path)
        assert r.status == 200, r
        pages += 1
        seen += [s["sandboxID"] for s in r.json()]
        token = r.headers.get("x-next-token")
        if not token:
            break
    assert pages == 2 and sorted(seen) == sorted(made) and len(seen) == 3
    desc = [s["sandboxID"] for s in e2b.request("GET", f"/v2/sandboxes?{query}&order=desc").json()]
    asc = [s["sandboxID"] for s in e2b.request("GET", f"/v2/sandboxes?{query}&order=asc").json()]
    assert desc == list(reversed(asc))
    assert_e2b_error(e2b.request("GET", "/v2/sandboxes?limit=0"), 400)
    assert_e2b_error(e2b.request("GET", "/v2/sandboxes?limit=101"), 400)
    assert_e2b_error(e2b.request("GET", "/v2/sandboxes?nextToken=garbage"), 400)


def assert_sandbox_not_found(r, sid):
    """E2B's proxy's answer for a sandbox it cannot reach, on envd's port and every other."""
    assert r.status == 502 and r.headers["content-type"] == "application/json", r
    assert r.json() == {"sandboxId": sid, "message": "The sandbox was not found", "code": 502}, r


def test_kill_is_204_then_404_and_its_traffic_answers_502_not_found(e2b):
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    assert e2b.envd(sandbox, "GET", "/health").status == 204
    assert e2b.request("DELETE", f"/sandboxes/{sid}").status == 204
    assert_e2b_error(e2b.request("DELETE", f"/sandboxes/{sid}"), 404)
    assert_sandbox_not_found(e2b.envd(sandbox, "GET", "/health"), sid)
    assert_sandbox_not_found(e2b.envd(sandbox, "GET", "/", headers={"E2b-Sandbox-Port": "3000"}), sid)
    assert_sandbox_not_found(e2b.envd({**sandbox, "sandboxID": "nosuchsandbox0000000"}, "GET", "/health"),
                             "nosuchsandbox0000000")
    # Its host names too: getHost(port) is the front's, which answers as E2B's proxy.
    assert_sandbox_not_found(e2b.by_host(sandbox, 3000, "/"), sid)
    assert_sandbox_not_found(e2b.by_host(sandbox, 49983, "/health"), sid)
    assert_sandbox_not_found(e2b.by_host({**sandbox, "sandboxID": "nosuchsandbox0000000"}, 3000, "/"),
                             "nosuchsandbox0000000")


def test_set_timeout_moves_the_end(e2b):
    sandbox = e2b.create(timeout=60)
    sid = sandbox["sandboxID"]
    before = e2b.request("GET", f"/sandboxes/{sid}").json()["endAt"]
    assert e2b.request("POST", f"/sandboxes/{sid}/timeout", {"timeout": 3600}).status == 204
    after = e2b.request("GET", f"/sandboxes/{sid}").json()["endAt"]
    assert after > before
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/timeout", {}), 400)
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/timeout", {"timeout": "x"}), 400)
    assert_e2b_error(e2b.request("POST", "/sandboxes/nosuchsandbox0000000/timeout", {"timeout": 5}), 404)


def test_a_timeout_of_zero_ends_the_sandbox_now_as_its_lifecycle_says(e2b, client):
    # E2B sets the end to now: killed, or paused with lifecycle onTimeout "pause".
    killed = e2b.create(timeout=600)["sandboxID"]
    assert e2b.request("POST", f"/sandboxes/{killed}/timeout", {"timeout": 0}).status == 204
    assert_e2b_error(e2b.request("GET", f"/sandboxes/{killed}"), 404)
    paused = e2b.create(timeout=600, autoPause=True)["sandboxID"]
    assert e2b.request("POST", f"/sandboxes/{paused}/timeout", {"timeout": 0}).status == 204
    assert e2b.request("GET", f"/sandboxes/{paused}").json()["state"] == "paused"
    assert client.sandbox(paused)["state"] == "paused"


def test_pause_then_connect_resumes_and_keeps_processes(e2b, client):
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    client.sh(sid, "echo kept > /tmp/f")
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    assert client.sandbox(sid)["state"] == "paused"
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/pause", {}), 409)  # the SDK's "already paused"
    r = e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 300})
    assert r.status == 201, r  # resumed
    assert r.json()["sandboxID"] == sid and r.json()["envdAccessToken"] == sandbox["envdAccessToken"]
    assert client.sandbox(sid)["state"] == "running"
    assert client.sh(sid, "cat /tmp/f") == "kept\n"
    r = e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {})
    assert r.status == 200, r  # was running
    # A running sandbox's end only moves later: not with a shorter timeout, nor with 0.
    end = e2b.request("GET", f"/sandboxes/{sid}").json()["endAt"]
    for body in ({"timeout": 5}, {"timeout": 0}):
        assert e2b.request("POST", f"/v2/sandboxes/{sid}/connect", body).status == 200
        assert e2b.request("GET", f"/sandboxes/{sid}").json()["endAt"] == end
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes/nosuchsandbox0000000/connect", {}), 404)


def test_pause_without_memory_stops_and_connect_boots_it_again(e2b, client):
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    client.sh(sid, "echo kept > /home/user/f")
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/pause", {"memory": "no"}), 400)
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {"memory": False}).status == 204
    assert client.sandbox(sid)["state"] == "stopped"  # bulkhead's stop: files kept, processes gone
    detail = e2b.request("GET", f"/sandboxes/{sid}").json()
    assert detail["state"] == "paused" and detail["pauseMode"] == "filesystem", detail
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/pause", {"memory": False}), 409)
    r = e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 60})
    assert r.status == 201, r
    assert client.sandbox(sid)["state"] == "running"
    assert client.sh(sid, "cat /home/user/f") == "kept\n"
    assert "pauseMode" not in e2b.request("GET", f"/sandboxes/{sid}").json()
    # A full pause says so; connect with "memory": false boots it again all the same.
    boot_id = client.sh(sid, "cat /proc/sys/kernel/random/boot_id")
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    assert e2b.request("GET", f"/sandboxes/{sid}").json()["pauseMode"] == "full"
    r = e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {"memory": False})
    assert r.status == 201, r
    assert client.sh(sid, "cat /proc/sys/kernel/random/boot_id") != boot_id


def test_a_paused_sandbox_answers_its_traffic_as_e2bs_proxy(e2b, client):
    """Without autoResume: envd and port traffic answer 502 (not found) and leave it paused.
    With it: traffic carrying its credentials resumes it, other traffic gets 403."""
    port = {"E2b-Sandbox-Port": "8000"}
    plain = e2b.create()
    serve_port_8000(client, plain["sandboxID"])
    assert e2b.request("POST", f"/sandboxes/{plain['sandboxID']}/pause", {}).status == 204
    for r in (e2b.envd(plain, "GET", "/health"), e2b.envd(plain, "GET", "/index.html", headers=port),
              e2b.envd(plain, "POST", "/process.Process/List", {}), e2b.by_host(plain)):
        assert_sandbox_not_found(r, plain["sandboxID"])
    assert client.sandbox(plain["sandboxID"])["state"] == "paused"
    assert e2b.request("GET", f"/sandboxes/{plain['sandboxID']}").json()["lifecycle"]["autoResume"] is False

    auto = e2b.create(autoPause=True, autoResume={"enabled": True}, network={"allowPublicTraffic": False})
    sid = auto["sandboxID"]
    assert e2b.request("GET", f"/sandboxes/{sid}").json()["lifecycle"] == {"onTimeout": "pause", "autoResume": True}
    serve_port_8000(client, sid)
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    denied = {"sandboxId": sid, "code": 403,
              "message": "This sandbox can't be resumed with the credentials provided. Check your access token and "
                         "try again."}
    for r in (e2b.envd(auto, "GET", "/health", headers={"X-Access-Token": "wrong"}),
              e2b.envd(auto, "GET", "/index.html", headers=port),
              e2b.envd(auto, "GET", "/index.html", headers={**port, "e2b-traffic-access-token": "0" * 64}),
              e2b.by_host(auto)):
        assert r.status == 403 and r.json() == denied, r
    assert client.sandbox(sid)["state"] == "paused"
    r = e2b.envd(auto, "GET", "/index.html", headers={**port, "e2b-traffic-access-token": auto["trafficAccessToken"]})
    assert r.status == 200 and r.body == b"served\n", r
    assert client.sandbox(sid)["state"] == "running"
    # By host name alike.
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    r = e2b.by_host(auto, headers={"e2b-traffic-access-token": auto["trafficAccessToken"]})
    assert r.status == 200 and r.body == b"served\n", r
    assert client.sandbox(sid)["state"] == "running"
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    assert e2b.envd(auto, "GET", "/health").status == 204
    assert client.sandbox(sid)["state"] == "running"
    # Stopped (E2B's filesystem-only pause) it is E2B's "paused", which only connect resumes.
    assert client.post(f"/v1/sandboxes/{sid}/stop", {}).status == 200
    assert e2b.request("GET", f"/sandboxes/{sid}").json()["state"] == "paused"
    assert_sandbox_not_found(e2b.envd(auto, "GET", "/health"), sid)
    assert client.sandbox(sid)["state"] == "stopped"
    assert e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 300}).status == 201
    assert e2b.envd(auto, "GET", "/health").status == 204

    for bad in (True, {"enabled": "yes"}, {}):
        assert_e2b_error(e2b.request("POST", "/v2/sandboxes", {"templateID": "base", "autoResume": bad}), 400)


def test_metrics_answer_samples_with_every_field(e2b):
    sandbox = e2b.create()
    r = e2b.request("GET", f"/sandboxes/{sandbox['sandboxID']}/metrics")
    assert r.status == 200, r
    sample = r.json()[-1]
    for field in ("timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache",
                  "diskUsed", "diskTotal"):
        assert field in sample, field
    assert sample["memTotal"] == 1024 * 1024 * 1024 and sample["memUsed"] > 0


def test_metrics_honour_start_and_end(e2b):
    sid = e2b.create()["sandboxID"]
    at = e2b.request("GET", f"/sandboxes/{sid}/metrics").json()[-1]["timestampUnix"]
    # A range before the sandbox existed has none; one around the sample has it.
    assert e2b.request("GET", f"/sandboxes/{sid}/metrics?start={at - 7200}&end={at - 3600}").json() == []
    around = e2b.request("GET", f"/sandboxes/{sid}/metrics?start={at}&end={at}").json()
    assert {s["timestampUnix"] for s in around} == {at}
    assert e2b.request("GET", f"/sandboxes/{sid}/metrics?start={at + 3600}").json() == []
    for query in ("start=soon", "end=-1", f"start={at}&end={at - 1}", "start=99999999999999999999"):
        assert_e2b_error(e2b.request("GET", f"/sandboxes/{sid}/metrics?{query}"), 400)
    assert_e2b_error(e2b.request("GET", "/sandboxes/inoexistent0000000000/metrics?start=0"), 404)


def test_sandboxes_metrics_answer_the_latest_sample_of_each(e2b):
    sid = e2b.create()["sandboxID"]
    r = e2b.request("GET", f"/sandboxes/metrics?sandbox_ids={sid},inoexistent0000000000")
    assert r.status == 200, r
    sandboxes = r.json()["sandboxes"]
    assert list(sandboxes) == [sid]
    assert sandboxes[sid]["memUsed"] > 0 and sandboxes[sid]["cpuCount"] >= 1
    assert e2b.request("GET", "/sandboxes/metrics?sandbox_ids=").json() == {"sandboxes": {}}
    assert_e2b_error(e2b.request("GET", "/sandboxes/metrics"), 400)
    too_many = ",".join(f"i{n:020d}" for n in range(101))
    assert_e2b_error(e2b.request("GET", f"/sandboxes/metrics?sandbox_ids={too_many}"), 400)


def test_network_rules_map_onto_egress_modes(e2b, client):
    closed = e2b.create(allow_internet_access=False)
    assert client.sandbox(closed["sandboxID"])["network"]["mode"] == "none"
    listed = e2b.create(network={"denyOut": ["0.0.0.0/0"], "allowOut": ["example.com"]})
    assert client.sandbox(listed["sandboxID"])["network"] == {"mode": "allowlist", "allow": ["example.com"], "deny": []}
    detail = e2b.request("GET", f"/sandboxes/{listed['sandboxID']}").json()
    assert detail["allowInternetAccess"] is True and detail["network"]["allowOut"] == ["example.com"]

    sid = closed["sandboxID"]
    assert e2b.request("PUT", f"/sandboxes/{sid}/network", {"allowOut": ["10.0.0.0/8"], "denyOut": ["0.0.0.0/0"]}).status == 204
    assert client.sandbox(sid)["network"] == {"mode": "allowlist", "allow": ["10.0.0.0/8"], "deny": []}
    assert e2b.request("PUT", f"/sandboxes/{sid}/network", {}).status == 204
    assert client.sandbox(sid)["network"]["mode"] == "open"
    # Deny entries without ALL_TRAFFIC: open but for them, as E2B.
    assert e2b.request("PUT", f"/sandboxes/{sid}/network", {"denyOut": ["192.0.2.1", "198.51.100.0/24"]}).status == 204
    assert client.sandbox(sid)["network"] == {"mode": "open", "allow": [], "deny": ["192.0.2.1", "198.51.100.0/24"]}
    detail = e2b.request("GET", f"/sandboxes/{sid}").json()
    assert detail["allowInternetAccess"] is True and detail["network"]["denyOut"] == ["192.0.2.1", "198.51.100.0/24"]
    # What E2B refuses, in its words (400).
    for network, message in (({"denyOut": ["example.com"]}, "invalid denied CIDR example.com"),
                             ({"denyOut": ["0.0.0.0"]}, "invalid denied CIDR 0.0.0.0"),
                             ({"allowOut": ["example.com"]}, "When specifying allowed domains in allow out, you must "
                                                             "include 'ALL_TRAFFIC' in deny out to block all other traffic.")):
        r = e2b.request("PUT", f"/sandboxes/{sid}/network", network)
        assert_e2b_error(r, 400)
        assert r.json()["message"] == message, r
        assert_e2b_error(e2b.request("POST", "/v2/sandboxes", {"templateID": "base", "network": network}), 400)
    assert_e2b_error(e2b.request("PUT", f"/sandboxes/{sid}/network", {"allowOut": ["not a host!"], "denyOut": ["0.0.0.0/0"]}), 422)


CURL = ["curl", "-sS", "--fail", "--max-time", "15"]
UDP = "import socket, sys; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); " \
      "s.sendto(b'ping', (sys.argv[1], int(sys.argv[2]))); s.recv(100)"


def test_deny_out_of_one_address_leaves_the_rest_reachable(net_daemon, fakenet):
    """E2B's denyOut without ALL_TRAFFIC: everything stays reachable but what it names; allowOut
    takes addresses back out of it (allowed entries win over denied ones). Against fakenet."""
    e2b, client = E2b(net_daemon), net_daemon.client()
    r = e2b.request("POST", "/v2/sandboxes", {"templateID": "base", "network": {"denyOut": [fn.OTHER_TEST]}})
    assert r.status == 201, r
    sid = r.json()["sandboxID"]

    def works(*argv) -> bool:
        return client.exec(sid, list(argv), timeout=120)["exit_code"] == 0

    try:
        assert e2b.request("GET", f"/sandboxes/{sid}").json()["network"]["denyOut"] == [fn.OTHER_TEST]
        mark = fakenet.mark()
        for extra in ([], ["--noproxy", "*"]):
            assert works(*CURL, *extra, f"http://{fn.A_TEST}/"), extra
            assert works(*CURL, *extra, "http://b.test/"), extra
            assert not works(*CURL, *extra, f"http://{fn.OTHER_TEST}/"), extra
        assert works("python3", "-c", UDP, fn.A_TEST, str(fn.UDP_ECHO_PORT))
        assert not works("python3", "-c", UDP, fn.OTHER_TEST, str(fn.UDP_ECHO_PORT))
        time.sleep(0.5)  # a connection made wrongly would show in the logs by now
        assert [str(e) for e in fakenet.events_since(mark, ("http", "https", "udp")) if e.local_ip == fn.OTHER_TEST] == []

        # A /24 denied, one address of it allowed back.
        r = e2b.request("PUT", f"/sandboxes/{sid}/network", {"denyOut": ["198.18.0.0/24"], "allowOut": [fn.A_TEST]})
        assert r.status == 204, r
        assert works(*CURL, f"http://{fn.A_TEST}/")
        assert works("python3", "-c", UDP, fn.A_TEST, str(fn.UDP_ECHO_PORT))
        for address in (fn.B_TEST, fn.NAMELESS):
            assert not works(*CURL, f"http://{address}/"), address
            assert not works("python3", "-c", UDP, address, str(fn.UDP_ECHO_PORT)), address
    finally:
        e2b.request("DELETE", f"/sandboxes/{sid}")


def test_fork_and_snapshots_carry_the_files(e2b, client):
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    client.sh(sid, "echo original > /home/user/note")
    r = e2b.request("POST", f"/sandboxes/{sid}/fork", {"count": 2})
    assert r.status == 201, r
    forks = [item["sandbox"] for item in r.json()]
    assert len(forks) == 2
    for fork in forks:
        assert client.sh(fork["sandboxID"], "cat /home/user/note") == "original\n"
        assert fork["envdAccessToken"] != sandbox["envdAccessToken"]
        e2b.request("DELETE", f"/sandboxes/{fork['sandboxID']}")

    r = e2b.request("POST", f"/sandboxes/{sid}/snapshots", {"name": "before"})
    assert r.status == 201, r
    snapshot = r.json()
    assert snapshot["names"] == ["before"]
    listed = e2b.request("GET", f"/snapshots?sandboxID={sid}").json()
    assert [s["snapshotID"] for s in listed] == [snapshot["snapshotID"]]
    # The snapshot id is a template: a new sandbox starts with its files.
    started = e2b.create(templateID=snapshot["snapshotID"])
    assert started["templateID"] == snapshot["snapshotID"]
    assert client.sh(started["sandboxID"], "cat /home/user/note; id -un") == "original\nuser\n"
    e2b.request("DELETE", f"/sandboxes/{started['sandboxID']}")
    quoted = urllib.parse.quote(snapshot["snapshotID"], safe="")
    assert e2b.request("DELETE", f"/templates/{quoted}").status == 204
    assert_e2b_error(e2b.request("DELETE", f"/templates/{quoted}"), 404)
    assert_e2b_error(e2b.request("POST", "/sandboxes/nosuchsandbox0000000/fork", {}), 404)
    assert_e2b_error(e2b.request("POST", f"/sandboxes/{sid}/fork", {"count": 0}), 422)


def test_template_aliases_name_base_images_and_snapshots(e2b, client):
    """GET /templates/aliases/{alias}: TemplateAliasResponse {"templateID", "public"} for what
    create takes as a templateID, else 404 (Template.exists answers False)."""
    r = e2b.request("GET", "/templates/aliases/base")
    assert r.status == 200 and r.json() == {"templateID": "base", "public": True}, r
    r = e2b.request("GET", "/templates/aliases/no-such-template")
    assert_e2b_error(r, 404)
    assert r.json()["message"] == "template 'no-such-template' not found"

    name = f"alias-{uuid.uuid4().hex[:8]}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("etc")
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    r = client.request("PUT", f"/v1/images/{name}", buf.getvalue(), headers={"Content-Type": "application/x-tar"})
    assert r.status in (200, 201), r
    try:
        r = e2b.request("GET", f"/templates/aliases/{name}")
        assert r.status == 200 and r.json() == {"templateID": name, "public": False}, r
    finally:
        client.delete(f"/v1/images/{name}")
    assert_e2b_error(e2b.request("GET", f"/templates/aliases/{name}"), 404)

    sandbox = e2b.create()
    r = e2b.request("POST", f"/sandboxes/{sandbox['sandboxID']}/snapshots", {})
    assert r.status == 201, r
    quoted = urllib.parse.quote(r.json()["snapshotID"], safe="")
    r = e2b.request("GET", f"/templates/aliases/{quoted}")
    assert r.status == 200 and r.json()["templateID"] == urllib.parse.unquote(quoted), r
    assert e2b.request("DELETE", f"/templates/{quoted}").status == 204
    assert_e2b_error(e2b.request("GET", f"/templates/aliases/{quoted}"), 404)


def test_a_port_of_the_sandbox_is_reached_by_header_and_by_host(e2b, daemon, client):
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    client.sh(sid, "mkdir -p /tmp/www && echo served > /tmp/www/index.html")
    r = client.post(f"/v1/sandboxes/{sid}/processes",
                    {"cmd": ["python3", "-m", "http.server", "8000", "--directory", "/tmp/www"]})
    assert r.status == 201, r
    harness.wait_until(lambda: e2b.envd(sandbox, "GET", "/index.html", headers={"E2b-Sandbox-Port": "8000"}).status == 200,
                       timeout=30)
    assert e2b.envd(sandbox, "GET", "/index.html", headers={"E2b-Sandbox-Port": "8000"}).body == b"served\n"
    # getHost(8000) is "8000-<id>.<domain>", a host name of the front, which serves it.
    r = e2b.by_host(sandbox)
    assert r.status == 200 and r.body == b"served\n", r
    # envd's port by host name is envd, with its own access token.
    assert e2b.by_host(sandbox, 49983, "/health", {"X-Access-Token": sandbox["envdAccessToken"]}).status == 204
    assert_e2b_error(e2b.by_host(sandbox, 49983, "/health"), 401)
    # The main port does not take the front's host names (it has its own preview domain).
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    conn.request("GET", "/index.html", headers={"Host": f"8000-{sid}.{sandbox['domain']}"})
    assert conn.getresponse().status == 401
    conn.close()


def test_a_closed_port_answers_e2bs_port_is_not_open(e2b):
    """As E2B's proxy: 502 {"sandboxId", "message", "port", "code"}; the SDKs match the message."""
    sandbox = e2b.create()
    sid = sandbox["sandboxID"]
    closed = {"sandboxId": sid, "message": "The sandbox is running but port is not open", "port": 8001, "code": 502}
    for r in (e2b.by_host(sandbox, 8001), e2b.envd(sandbox, "GET", "/", headers={"E2b-Sandbox-Port": "8001"})):
        assert r.status == 502 and r.headers["content-type"] == "application/json", r
        assert r.json() == closed, r
    for bad in ("0", "70000", "web"):
        assert_e2b_error(e2b.by_host(sandbox, bad, "/"), 400)
        assert_e2b_error(e2b.envd(sandbox, "GET", "/", headers={"E2b-Sandbox-Port": bad}), 400)


def serve_port_8000(client, sid):
    client.sh(sid, "mkdir -p /tmp/www && echo served > /tmp/www/index.html")
    r = client.post(f"/v1/sandboxes/{sid}/processes",
                    {"cmd": ["python3", "-m", "http.server", "8000", "--directory", "/tmp/www"]})
    assert r.status == 201, r
    probe = "import socket; socket.create_connection(('127.0.0.1', 8000)).close()"
    harness.wait_until(lambda: client.exec(sid, ["python3", "-c", probe])["exit_code"] == 0, timeout=30)


def assert_traffic_token_refused(r, sandbox, missing: bool):
    """E2B's proxy's answer: 403 {"sandboxId", "message", "code": 403}."""
    assert r.status == 403 and r.headers["content-type"] == "application/json", r
    body = r.json()
    assert body["sandboxId"] == sandbox["sandboxID"] and body["code"] == 403, body
    assert body["message"] == ("Sandbox is secured with traffic access token. " +
                               ("Token header 'e2b-traffic-access-token' is missing" if missing else
                                "Provided token in header 'e2b-traffic-access-token' is invalid")), body


def test_allow_public_traffic_false_gives_a_traffic_access_token_that_the_ports_need(e2b, client):
    sandbox = e2b.create(network={"allowPublicTraffic": False})
    sid, token = sandbox["sandboxID"], sandbox["trafficAccessToken"]
    assert isinstance(token, str) and len(token) == 64 and token != sandbox["envdAccessToken"]
    assert client.sandbox(sid)["preview"] == {"public": False, "token": token}
    detail = e2b.request("GET", f"/sandboxes/{sid}").json()
    assert detail["network"]["allowPublicTraffic"] is False
    connected = e2b.request("POST", f"/sandboxes/{sid}/connect", {"timeout": 60})
    assert connected.status == 200 and connected.json()["trafficAccessToken"] == token, connected
    serve_port_8000(client, sid)

    port = {"E2b-Sandbox-Port": "8000"}
    assert_traffic_token_refused(e2b.envd(sandbox, "GET", "/index.html", headers=port), sandbox, missing=True)
    r = e2b.envd(sandbox, "GET", "/index.html", headers={**port, "e2b-traffic-access-token": "0" * 64})
    assert_traffic_token_refused(r, sandbox, missing=False)
    r = e2b.envd(sandbox, "GET", "/index.html", headers={**port, "e2b-traffic-access-token": token})
    assert r.status == 200 and r.body == b"served\n", r
    # envd itself keeps its own access token, as in E2B.
    assert e2b.envd(sandbox, "GET", "/health").status == 204
    # getHost(8000): the same token in the same header, the same answers.
    assert_traffic_token_refused(e2b.by_host(sandbox), sandbox, missing=True)
    assert_traffic_token_refused(e2b.by_host(sandbox, headers={"e2b-traffic-access-token": "0" * 64}), sandbox,
                                 missing=False)
    r = e2b.by_host(sandbox, headers={"e2b-traffic-access-token": token})
    assert r.status == 200 and r.body == b"served\n", r

    r = e2b.request("POST", f"/sandboxes/{sid}/fork", {"count": 1})
    assert r.status == 201, r
    fork = r.json()[0]["sandbox"]
    e2b.request("DELETE", f"/sandboxes/{fork['sandboxID']}")
    assert fork["trafficAccessToken"] not in (None, token)


def test_allow_public_traffic_true_or_absent_opens_the_ports_without_a_token(e2b, client):
    for network in ({"allowPublicTraffic": True}, {}, None):
        sandbox = e2b.create(**({} if network is None else {"network": network}))
        assert sandbox["trafficAccessToken"] is None
        detail = e2b.request("GET", f"/sandboxes/{sandbox['sandboxID']}").json()
        assert detail["network"]["allowPublicTraffic"] is True
        serve_port_8000(client, sandbox["sandboxID"])
        r = e2b.envd(sandbox, "GET", "/index.html", headers={"E2b-Sandbox-Port": "8000"})
        assert r.status == 200, r
        assert e2b.by_host(sandbox).status == 200
    r = e2b.request("POST", "/v2/sandboxes", {"templateID": "base", "network": {"allowPublicTraffic": "no"}})
    assert_e2b_error(r, 400)
    assert "allowPublicTraffic" in r.json()["message"]


def test_bad_requests_get_e2b_shaped_errors(e2b, daemon):
    assert_e2b_error(E2b(daemon, key="e2b_" + "0" * 40).request("GET", "/v2/sandboxes"), 401)
    assert_e2b_error(E2b(daemon, key="").request("GET", "/v2/sandboxes"), 401)
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", "{not json"), 400)
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", "[]"), 400)
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", {"templateID": 5}), 400)
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", {"templateID": "no-such-image"}), 404)  # as E2B: template not found
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", {"timeout": 10**12}), 400)
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", b"x" * (2 * 1024 * 1024)), 413)
    # Nested past the parser's depth bound (copying such a document would overflow the stack).
    deep = b'{"metadata": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert_e2b_error(e2b.request("POST", "/v2/sandboxes", deep), 400)
    envd = {"E2b-Sandbox-Id": "x", "Content-Type": "application/json"}
    assert e2b.request("POST", "/process.Process/List", b"[" * 200_000, envd).status >= 400
    assert_e2b_error(e2b.request("GET", "/nothing/here"), 404)
    sandbox = e2b.create()
    r = e2b.request("GET", "/health", headers={"E2b-Sandbox-Id": sandbox["sandboxID"], "X-Access-Token": "wrong"})
    assert_e2b_error(r, 401)
    r = e2b.request("GET", "/health", headers={"E2b-Sandbox-Id": sandbox["sandboxID"],
                                               "X-Access-Token": sandbox["envdAccessToken"],
                                               "Authorization": "Bearer x"})
    assert_e2b_error(r, 401)
    assert_e2b_error(e2b.request("GET", "/health", headers={"E2b-Sandbox-Id": "../../etc"}), 502)
    assert daemon.running()


def test_cli_prints_the_three_variables(daemon):
    import subprocess
    out = subprocess.run([str(harness.BULKHEAD), "--state-dir", str(daemon.state_dir), "e2b", "env"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (f"export E2B_API_URL={daemon.e2b_url}\nexport E2B_SANDBOX_URL={daemon.e2b_url}\n"
                          f"export E2B_API_KEY={daemon.e2b_key}\n")
    assert daemon.e2b_key.startswith("e2b_") and len(daemon.e2b_key) == 44


def test_e2b_domain_option_names_the_sandboxes_domain(daemon_factory):
    d = daemon_factory()
    d.extra_args = ("--e2b-domain", "sandboxes.example.test:8443")
    d.start()
    front = E2b(d)
    sandbox = front.create()
    try:
        assert sandbox["domain"] == "sandboxes.example.test:8443"
        r = front.by_host(sandbox, 49983, "/health", {"X-Access-Token": sandbox["envdAccessToken"]})
        assert r.status == 204, r
        # The address-derived name is no host name of this front then: the control plane's, keyed.
        r = front.by_host({**sandbox, "domain": front.domain}, 49983, "/v2/sandboxes")
        assert_e2b_error(r, 401)
        assert "API key" in r.json()["message"]
    finally:
        front.request("DELETE", f"/sandboxes/{sandbox['sandboxID']}")


def test_on_gvisor_pause_snapshots_and_forks_keep_memory_and_processes(daemon_factory):
    """E2B's pause keeps memory and processes for as long as the sandbox is paused, and its
    snapshots and forks carry them: on a gvisor sandbox (serve --default-runtime gvisor) pause
    goes to disk (no RAM held) and connect restores it; a snapshot or fork resumes the process."""
    daemon = daemon_factory()
    daemon.runtime = "gvisor"
    daemon.start()
    client = daemon.client()
    if not client.get("/healthz").json()["runtimes"]["gvisor"]["available"]:
        pytest.skip("this host has no gvisor runtime")
    e2b = E2b(daemon)
    sid = e2b.create()["sandboxID"]
    r = client.post(f"/v1/sandboxes/{sid}/processes", {"cmd": "i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done"})
    assert r.status == 201, r
    pid = r.json()["pid"]
    assert e2b.request("POST", f"/sandboxes/{sid}/pause", {}).status == 204
    sandbox = client.sandbox(sid)
    assert (sandbox["state"], sandbox["runtime"], sandbox["paused_to_disk"]) == ("paused", "gvisor", True), sandbox
    assert e2b.request("GET", f"/sandboxes/{sid}").json()["state"] == "paused"
    snapshot = e2b.request("POST", f"/sandboxes/{sid}/snapshots", {}).json()["snapshotID"]
    assert client.get(f"/v1/snapshots/{snapshot}").json()["memory"] is True
    assert e2b.request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 300}).status == 201
    assert client.get(f"/v1/sandboxes/{sid}/processes/{pid}").json()["state"] == "running"
    r = e2b.request("POST", f"/sandboxes/{sid}/fork", {"count": 1})
    assert r.status == 201, r
    fork = r.json()[0]["sandbox"]["sandboxID"]
    started = e2b.create(templateID=snapshot)["sandboxID"]
    for copy in (fork, started):
        assert client.get(f"/v1/sandboxes/{copy}/processes/{pid}").json()["state"] == "running"
        e2b.request("DELETE", f"/sandboxes/{copy}")
    e2b.request("DELETE", f"/sandboxes/{sid}")
