"""schemathesis (pinned in tests/requirements.txt, run from .tools/venv) against a test
daemon's own GET /openapi.json: a bounded number of generated requests per operation, valid
and invalid, with the API key. Checks:
  not_a_server_error            no 5xx, and no crash (the daemon must still run afterwards)
  status_code_conformance       every status is one the spec lists for that operation
  content_type_conformance      every Content-Type is one the spec lists for that status
  response_schema_conformance   every JSON body validates against the spec's schema (NDJSON,
                                tar and octet-stream bodies are not parsed: schemathesis has
                                no deserializer for them; their status and type are checked)
  response_headers_conformance  headers the spec declares are there and valid
Not run: negative_data_rejection and positive_data_acceptance (they assume a 2xx means
"valid input" and a 4xx "invalid": here a valid request can be refused for state, e.g. 404 for
a path that does not exist in the sandbox or 409 for a stopped sandbox, and unknown request
fields are deliberately ignored, as the spec says); the stateful checks (use_after_free,
ensure_resource_availability) and the auth checks (ignored_auth, which other tests cover).
Operations that cannot be exercised statelessly are left out: the WebSocket attach, the raw
TCP forward and the port proxy (whose answers are the sandbox's own app's), and the file
watch (a stream that only ends when the client leaves). Sandbox-, process- and
snapshot-scoped operations get real ids (seeded path parameters), so they reach their
handlers instead of answering 404; operations that change a sandbox's state get a second one.
BULKHEAD_SCHEMATHESIS_EXAMPLES sets the examples per operation (default 40)."""

import os
import subprocess
import time
from pathlib import Path

import tooling

HOOKS = Path(__file__).resolve().parent / "schemathesis_hooks.py"
EXAMPLES = int(os.environ.get("BULKHEAD_SCHEMATHESIS_EXAMPLES", "40"))
SEED = int(os.environ.get("BULKHEAD_SCHEMATHESIS_SEED", "7"))
CHECKS = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance", "response_headers_conformance"]
EXCLUDED = ["attachProcess", "forwardTcpPort", "watchFiles", "proxyPortGet", "proxyPortPut", "proxyPortPost",
            "proxyPortDelete", "proxyPortPatch", "proxyPortOptions", "proxyPortHead"]
# These change the state of the sandbox they name: they get a second sandbox; the ones that
# end it (a delete, a short timeout) get one each, so the others keep a live one longer.
STATE_CHANGING = ["pauseSandbox", "resumeSandbox", "stopSandbox", "startSandbox", "setSandboxNetwork"]
ENDING = ["deleteSandbox", "setSandboxTimeout"]


def toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path, base_url, key, main_id, other_id, ending_ids, pid, signalled_pid, snapshot_id):
    lines = [
        f"base-url = {toml_string(base_url)}",
        "request-timeout = 60",
        "workers = 1",
        f"seed = {SEED}",
        f"headers = {{ Authorization = {toml_string('Bearer ' + key)} }}",
        "[generation]",
        f"max-examples = {EXAMPLES}",
        "[checks]",
        *(f"{name}.enabled = {'true' if name in CHECKS else 'false'}" for name in
          ["not_a_server_error", "status_code_conformance", "content_type_conformance",
           "response_schema_conformance", "response_headers_conformance", "negative_data_rejection",
           "positive_data_acceptance", "use_after_free", "ensure_resource_availability", "ignored_auth",
           "missing_required_header", "unsupported_method"]),
        "[parameters]",
        f'"path.id" = {toml_string(main_id)}',
        f'"path.pid" = {toml_string(str(pid))}',
        f'"path.snapshot_id" = {toml_string(snapshot_id)}',
        # A followed output stream of a process that runs on would never end. The text itself:
        # a TOML false would go out as "False", which the daemon rightly refuses (422).
        '"query.follow" = "false"',
    ]
    for operation_id in EXCLUDED:
        lines += ["[[operations]]", f"include-operation-id = {toml_string(operation_id)}", "enabled = false"]
    # A signal ends the process it is sent to: the other process operations keep theirs.
    lines += ["[[operations]]", 'include-operation-id = "signalProcess"',
              f'parameters = {{ "path.pid" = {toml_string(str(signalled_pid))} }}']
    for operation_id, sandbox_id in [*((o, other_id) for o in STATE_CHANGING), *zip(ENDING, ending_ids)]:
        lines += ["[[operations]]", f"include-operation-id = {toml_string(operation_id)}",
                  f'parameters = {{ "path.id" = {toml_string(sandbox_id)} }}']
    path.write_text("\n".join(lines) + "\n")


def test_schemathesis_finds_no_server_error_and_no_response_off_the_spec(daemon_factory, tmp_path):
    schemathesis = tooling.require_pypi_tools() / "schemathesis"
    daemon = daemon_factory()
    daemon.start()
    client = daemon.client()
    main_id = client.create()["id"]
    other_id = client.create()["id"]
    ending_ids = [client.create()["id"] for _ in ENDING]
    client.sh(main_id, "mkdir -p /workspace/dir && echo hello > /workspace/a.txt")
    r = client.post(f"/v1/sandboxes/{main_id}/processes", {"cmd": "sleep 100000", "tag": "sleeper"})
    assert r.status == 201, r
    pid = r.json()["pid"]
    r = client.post(f"/v1/sandboxes/{main_id}/processes", {"cmd": "sleep 100000", "tag": "signalled"})
    assert r.status == 201, r
    signalled_pid = r.json()["pid"]
    r = client.post(f"/v1/sandboxes/{main_id}/snapshots", {"name": "seed"})
    assert r.status == 201, r
    snapshot_id = r.json()["id"]

    config = tmp_path / "schemathesis.toml"
    write_config(config, f"http://127.0.0.1:{daemon.port}", daemon.key, main_id, other_id, ending_ids, pid,
                 signalled_pid, snapshot_id)
    started = time.monotonic()
    done = subprocess.run(
        [str(schemathesis), "--config-file", str(config), "run", "--no-color",
         "--phases", "examples,coverage,fuzzing", f"http://127.0.0.1:{daemon.port}/openapi.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)})
    took = time.monotonic() - started
    # Generated values can be megabytes long: each line of the report is cut for reading.
    report = "\n".join(line if len(line) < 400 else line[:400] + " [...]"
                       for line in (done.stdout + done.stderr).splitlines())
    (tmp_path / "report.txt").write_text(report)
    print(f"\nschemathesis took {took:.0f} s; its summary:\n" + report.split("SUMMARY")[-1])
    assert daemon.running(), f"the daemon died under schemathesis:\n{daemon.log_tail()}"
    assert done.returncode == 0, report[-30000:]
