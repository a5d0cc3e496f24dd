"""The daemon's own /openapi.json, as served, passes two real OpenAPI 3.1 validators from npm
(tests/openapi/validate.mjs). Which routes it documents is checked against the router by the
unit tests (OpenApi.DocumentsEveryRoute and its converse)."""

import json
import subprocess

import harness
import tooling

VALIDATOR_DIR = harness.REPO_ROOT / "tests" / "openapi"


def test_served_openapi_document_passes_real_validators(client, session_dir):
    tooling.require_node_project(VALIDATOR_DIR)
    assert (VALIDATOR_DIR / "node_modules").is_dir(), "validators missing: run scripts/install-test-tools.sh"
    r = client.get("/openapi.json")
    assert r.status == 200
    served = session_dir / "served-openapi.json"
    served.write_bytes(r.body)
    json.loads(r.body)
    run = subprocess.run(["node", "validate.mjs", str(served)], cwd=VALIDATOR_DIR,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "openapi-schema-validator: valid OpenAPI 3.1" in run.stdout
    assert "openapi-parser: valid" in run.stdout


def test_validators_reject_a_broken_document(session_dir, client):
    """The check can fail: a path parameter nobody declares and a response without a
    description are both caught."""
    doc = client.get("/openapi.json").json()
    doc["paths"]["/v1/undeclared/{id}"] = {"get": {"responses": {"200": {"description": "ok"}}}}
    first_path = next(iter(doc["paths"]))
    first_method = next(iter(doc["paths"][first_path]))
    doc["paths"][first_path][first_method]["responses"] = {"200": {"content": {}}}
    broken = session_dir / "broken-openapi.json"
    broken.write_text(json.dumps(doc))
    tooling.require_node_project(VALIDATOR_DIR)
    run = subprocess.run(["node", "validate.mjs", str(broken)], cwd=VALIDATOR_DIR,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "openapi-schema-validator: INVALID" in run.stdout
    assert "openapi-parser: INVALID" in run.stdout
