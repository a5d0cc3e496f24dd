"""The TypeScript SDK (sdk/typescript, npm package @bulkhead/sdk) against a real daemon: its
own node:test suite (npm test), and the packed tarball installed into a fresh project, where
a plain .mjs imports it by name and a TypeScript file type-checks against its declarations."""

import json
import os
import re
import subprocess
import tarfile

import pytest

import harness
import tooling

SDK = harness.REPO_ROOT / "sdk" / "typescript"


def run(argv, cwd, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def output_of(r: subprocess.CompletedProcess, limit: int = 30000) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-limit:]}\n--- stderr\n{r.stderr[-limit:]}"


def sdk_env(daemon) -> dict:
    """This environment without any BULKHEAD_* of the caller's, pointing at `daemon`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
    env.update(BULKHEAD_URL=f"http://127.0.0.1:{daemon.port}", BULKHEAD_API_KEY=daemon.key,
               BULKHEAD_STATE=str(daemon.state_dir))
    return env


@pytest.fixture(scope="module")
def built_sdk():
    tooling.require_node_project(SDK)
    # scripts/install-test-tools.sh runs `npm ci`; do it here too when that was skipped.
    if not (SDK / "node_modules" / "typescript").is_dir():
        r = run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], SDK)
        assert r.returncode == 0, f"npm ci failed:\n{output_of(r)}"
    r = run(["npm", "run", "build"], SDK)
    assert r.returncode == 0, f"npm run build failed:\n{output_of(r)}"
    assert (SDK / "dist" / "index.js").exists() and (SDK / "dist" / "index.d.ts").exists()
    return SDK


def test_typescript_sdk_suite(daemon, built_sdk):
    r = run(["npm", "test"], built_sdk, env=sdk_env(daemon), timeout=1800)
    assert r.returncode == 0, f"npm test failed:\n{output_of(r)}"
    # node's summary: tests ran, none failed and none were skipped (the env has everything).
    passed = re.search(r"^# pass (\d+)$", r.stdout, re.M)
    assert passed and int(passed.group(1)) > 0, output_of(r)
    for counter in ("fail", "cancelled", "skipped"):
        assert re.search(rf"^# {counter} 0$", r.stdout, re.M), output_of(r)
    assert daemon.running(), daemon.log_tail()


SMOKE_MJS = """\
import { Bulkhead, NotFoundError } from "@bulkhead/sdk";

const bulkhead = new Bulkhead();
const sandbox = await bulkhead.sandboxes.create({ metadata: { from: "npm-pack-smoke" } });
const result = await sandbox.exec(["sh", "-c", "echo smoke $((40 + 2))"]);
if (result.stdout !== "smoke 42\\n" || result.exitCode !== 0) throw new Error(JSON.stringify(result));
await sandbox.delete();
try {
  await bulkhead.sandboxes.get(sandbox.id);
  throw new Error("the sandbox is still there");
} catch (error) {
  if (!(error instanceof NotFoundError) || error.code !== "sandbox_not_found") throw error;
}
bulkhead.close();
console.log("smoke ok", sandbox.id);
"""

SMOKE_TS = """\
import { Bulkhead, type CommandResult, type SandboxInfo } from "@bulkhead/sdk";

export async function check(): Promise<string> {
  const bulkhead = new Bulkhead({ url: "http://127.0.0.1:1", apiKey: "k", timeoutMs: 1000 });
  await using sandbox = await bulkhead.sandboxes.create({ memoryMb: 256, network: { mode: "none" } });
  const info: SandboxInfo = sandbox.info;
  const result: CommandResult = await sandbox.exec("true", { onStdout: (text: string) => void text });
  const watch = await sandbox.files.watch("/workspace");
  for await (const event of watch) if (event.type === "create") watch.close();
  return `${info.id} ${result.exitCode}`;
}
"""


def test_typescript_sdk_packs_and_installs_into_a_fresh_project(daemon, built_sdk, tmp_path):
    r = run(["npm", "pack", "--pack-destination", str(tmp_path)], built_sdk)
    assert r.returncode == 0, f"npm pack failed:\n{output_of(r)}"
    tarballs = list(tmp_path.glob("bulkhead-sdk-*.tgz"))
    assert len(tarballs) == 1, (list(tmp_path.iterdir()), output_of(r))
    tarball = tarballs[0]

    # Only the built package: no sources, tests or node_modules.
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"package/package.json", "package/README.md", "package/dist/index.js", "package/dist/index.d.ts"} <= names
    assert not [n for n in names if n.startswith(("package/src/", "package/test/", "package/node_modules/"))], names

    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "smoke", "private": True, "type": "module"}))
    # --offline: the package has no dependencies, so nothing may need the registry.
    r = run(["npm", "install", "--offline", "--no-audit", "--no-fund", str(tarball)], project)
    assert r.returncode == 0, f"npm install of the tarball failed:\n{output_of(r)}"
    installed = json.loads((project / "node_modules" / "@bulkhead" / "sdk" / "package.json").read_text())
    assert installed["name"] == "@bulkhead/sdk" and not installed.get("dependencies")

    (project / "smoke.mjs").write_text(SMOKE_MJS)
    r = run(["node", "smoke.mjs"], project, env=sdk_env(daemon), timeout=300)
    assert r.returncode == 0 and "smoke ok" in r.stdout, output_of(r)

    # The declarations serve a TypeScript user (type-checked only, with the SDK's own tsc).
    (project / "smoke.ts").write_text(SMOKE_TS)
    (project / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext", "strict": True, "noEmit": True,
        "lib": ["ES2022", "ESNext.Disposable"], "types": ["node"],
        "typeRoots": [str(built_sdk / "node_modules" / "@types")]}, "files": ["smoke.ts"]}))
    r = run(["node", str(built_sdk / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "."], project)
    assert r.returncode == 0, f"type-checking against the installed package failed:\n{output_of(r)}"
