"""Service endpoints (/healthz, /metrics, /openapi.json) and the API over the unix socket."""

import re

import harness

from harness import assert_error_shape

SERVED_PATHS = ["/healthz", "/metrics", "/openapi.json", "/v1/sandboxes", "/v1/sandboxes/{id}",
                "/v1/sandboxes/{id}/exec", "/v1/sandboxes/{id}/timeout", "/v1/images", "/v1/images/{name}"]


def metric_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in metrics:\n{text[:2000]}")


def test_healthz_answers_without_key(client):
    r = client.get("/healthz", key=None)
    assert r.status == 200
    body = r.json()
    assert body["status"] == "ok" and isinstance(body["version"], str) and body["version"]


def test_metrics_is_prometheus_text_with_running_sandboxes(client, sandbox_factory):
    sandbox_factory()
    r = client.get("/metrics")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("text/plain"), r.headers
    text = r.body.decode()
    assert "# TYPE bulkhead_sandboxes_running gauge" in text
    label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
    sample = re.compile(rf"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{{{label}(,{label})*,?\}})? ([-+]?[0-9.eE+-]+|[+-]Inf|NaN)$")
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert sample.match(line), f"not a Prometheus sample line: {line!r}"
    assert metric_value(text, "bulkhead_sandboxes_running") >= 1

    # The gauge follows reality: it counts the sandboxes the API lists. (Compared with the
    # list rather than a remembered number: an earlier test's sandbox may expire meanwhile.)
    def gauge_matches_list():
        gauge = metric_value(client.get("/metrics").body.decode(), "bulkhead_sandboxes_running")
        return gauge == len(client.list())

    extra = sandbox_factory()
    assert harness.wait_until(gauge_matches_list, timeout=10)
    client.remove(extra["id"])
    assert harness.wait_until(gauge_matches_list, timeout=10)


def test_openapi_document_describes_every_served_path(client):
    r = client.get("/openapi.json")
    assert r.status == 200, r
    doc = r.json()
    assert re.fullmatch(r"3\.1\.\d+", doc["openapi"]), doc["openapi"]
    assert doc["info"]["title"] and doc["info"]["version"]
    missing = [p for p in SERVED_PATHS if p not in doc["paths"]]
    assert not missing, f"paths missing from openapi.json: {missing}"
    sandboxes = doc["paths"]["/v1/sandboxes"]
    assert "post" in sandboxes and "get" in sandboxes
    assert {"get", "delete"} <= doc["paths"]["/v1/sandboxes/{id}"].keys()
    assert "post" in doc["paths"]["/v1/sandboxes/{id}/exec"]


def test_unix_socket_serves_the_same_api_with_key(daemon):
    unix = daemon.unix_client()
    assert daemon.socket_path.is_socket()
    assert unix.get("/healthz", key=None).json()["status"] == "ok"
    assert_error_shape(unix.get("/v1/sandboxes", key=None), 401)
    sandbox = unix.create(metadata={"via": "unix"})
    try:
        assert unix.sh(sandbox["id"], "echo over-unix") == "over-unix\n"
        # the TCP side sees the same sandbox
        assert daemon.client().sandbox(sandbox["id"])["metadata"] == {"via": "unix"}
        assert sandbox["id"] in {s["id"] for s in unix.list("metadata.via=unix")}
    finally:
        unix.remove(sandbox["id"])
    assert_error_shape(unix.get(f"/v1/sandboxes/{sandbox['id']}"), 404)
