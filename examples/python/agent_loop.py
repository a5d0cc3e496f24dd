#!/usr/bin/env python3
"""An agent-style loop with the bulkhead Python SDK.

It copies a small project (examples/project) into a sandbox, runs its tests, patches a
file and reruns them, then forks three copies of the sandbox, tries a different fix in each
in parallel, keeps the copy whose tests pass and deletes the others. Where a real agent
would ask a model for patches, this one has three candidates written down.

Run it against a running daemon (scripts/start.sh), as root or with BULKHEAD_URL and
BULKHEAD_API_KEY set:  python3 examples/python/agent_loop.py
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "sdk" / "python"))  # the SDK from this checkout, if not installed

from bulkhead import Bulkhead, Sandbox  # noqa: E402

PROJECT = HERE.parent / "project"
TEST_COMMAND = "python3 -m unittest discover -s tests -v"
# What the "model" proposes: a first patch applied directly (skip empty words), then three
# rewrites of the same expression, each tried in a fork of its own.
FIRST_PATCH = ('for w in text.split(" ")]', 'for w in text.split(" ") if w]')
CANDIDATES = ['text.replace("\\t", " ").split(" ")', "text.split()", 'text.strip().split(" ")']


class LinePrinter:
    """Prints streamed output line by line with a prefix (pieces arrive cut anywhere)."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.pending = prefix, ""

    def __call__(self, text: str) -> None:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            print(self.prefix + line)

    def flush(self) -> None:
        if self.pending:
            print(self.prefix + self.pending)
        self.pending = ""


def run_tests(sandbox: Sandbox, label: str) -> bool:
    result = sandbox.exec(TEST_COMMAND, cwd="/workspace/project", timeout_s=60)
    summary = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "(no output)"
    print(f"[{label}] tests: exit {result.exit_code}, {summary}")
    return result.exit_code == 0


def patch(sandbox: Sandbox, old: str, new: str) -> None:
    path = "/workspace/project/textstats.py"
    source = sandbox.files.read_text(path)
    if old not in source:
        raise SystemExit(f"patch does not apply: {old!r} is not in {path}")
    sandbox.files.write(path, source.replace(old, new, 1))


def main() -> int:
    client = Bulkhead()
    with client.sandboxes.create(metadata={"example": "agent-loop"}, timeout_s=600) as sandbox:
        print(f"sandbox {sandbox.id}")
        sandbox.files.upload_dir(PROJECT, "/workspace/project")
        print("files:", ", ".join(e.path for e in sandbox.files.list("/workspace/project", depth=2)))

        if run_tests(sandbox, "original"):
            print("the tests already pass: nothing to do")
            return 1
        # Stream the failing run so the "agent" sees what broke as it happens.
        printer = LinePrinter("  | ")
        sandbox.exec(TEST_COMMAND, cwd="/workspace/project", on_stderr=printer)
        printer.flush()

        patch(sandbox, *FIRST_PATCH)
        if run_tests(sandbox, "patched"):
            print("the first patch was enough")
            return 0

        # Three attempts at once: each fork is a copy-on-write copy of the sandbox as it is now.
        forks = sandbox.fork(count=len(CANDIDATES))
        try:
            def attempt(pair: tuple[Sandbox, str]) -> bool:
                fork, candidate = pair
                patch(fork, 'text.split(" ") if w', candidate)
                return run_tests(fork, f"fork {fork.id[:8]}: {candidate}")

            with ThreadPoolExecutor(len(forks)) as pool:
                passed = list(pool.map(attempt, zip(forks, CANDIDATES)))
            winners = [(fork, candidate) for fork, candidate, ok in zip(forks, CANDIDATES, passed) if ok]
            if not winners:
                print("no attempt passed")
                return 1
            keep, fix = winners[0]
            print(f"keeping {keep.id} (fix: {fix}); deleting the other forks")
            for fork in forks:
                if fork is not keep:
                    fork.delete()
            print(keep.files.read_text("/workspace/project/textstats.py"))
            keep.delete()  # a real agent would go on working in it
            return 0
        finally:
            for fork in forks:
                try:
                    fork.delete()
                except Exception:  # already deleted
                    pass


if __name__ == "__main__":
    sys.exit(main())
