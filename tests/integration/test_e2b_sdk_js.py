"""The official `e2b` npm SDK (exact version in tests/e2b/js/package-lock.json), unmodified,
against a real daemon's E2B front: runs tests/e2b/js with `node --test` and only the E2B
environment variables pointing at the daemon."""

import re

import tooling
from e2b_suites import SUITES, leftovers, output_of, run_suite, started_daemon, suite_env

PROJECT = SUITES / "js"


def test_e2b_js_sdk_suite(daemon_factory):
    tooling.require_node_project(PROJECT)
    # scripts/install-test-tools.sh runs `npm ci`; do it here too when that was skipped.
    if not (PROJECT / "node_modules" / "e2b").is_dir():
        r = run_suite(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], PROJECT, None)
        assert r.returncode == 0, f"npm ci failed:\n{output_of(r)}"
    daemon = started_daemon(daemon_factory)
    tests = sorted(str(p.name) for p in PROJECT.glob("*.test.mjs"))
    r = run_suite(["node", "--test", "--test-concurrency=1", *tests], PROJECT, suite_env(daemon))
    problems = leftovers(daemon)  # checked whether the suite passed or not
    assert r.returncode == 0, f"{problems}\nthe E2B JS SDK suite failed:\n{output_of(r)}"
    # node's summary: tests ran, none failed, none were cancelled or skipped.
    passed = re.search(r"^# pass (\d+)$", r.stdout, re.M)
    assert passed and int(passed.group(1)) > 0, output_of(r)
    for counter in ("fail", "cancelled", "skipped"):
        assert re.search(rf"^# {counter} 0$", r.stdout, re.M), output_of(r)
    assert not problems, problems
