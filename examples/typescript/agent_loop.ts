// An agent-style loop with the bulkhead TypeScript SDK (the same loop as
// examples/python/agent_loop.py).
//
// It copies a small project (examples/project) into a sandbox, runs its tests, patches a
// file and reruns them, then forks three copies of the sandbox, tries a different fix in each
// in parallel, keeps the copy whose tests pass and deletes the others. Where a real agent
// would ask a model for patches, this one has three candidates written down.
//
// Build and run against a running daemon (scripts/start.sh), as root or with BULKHEAD_URL
// and BULKHEAD_API_KEY set:
//   (cd sdk/typescript && npm ci && npm run build)
//   sdk/typescript/node_modules/.bin/tsc -p examples/typescript && node examples/typescript/agent_loop.js
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Bulkhead, type Sandbox } from "../../sdk/typescript/dist/index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const project = path.resolve(here, "../project");
const testCommand = "python3 -m unittest discover -s tests -v";
const source = "/workspace/project/textstats.py";
// What the "model" proposes: a first patch applied directly (skip empty words), then three
// rewrites of the same expression, each tried in a fork of its own.
const firstPatch: [string, string] = ['for w in text.split(" ")]', 'for w in text.split(" ") if w]'];
const candidates = ['text.replace("\\t", " ").split(" ")', "text.split()", 'text.strip().split(" ")'];

async function runTests(sandbox: Sandbox, label: string): Promise<boolean> {
  const result = await sandbox.exec(testCommand, { cwd: "/workspace/project", timeoutS: 60 });
  const lines = result.stderr.trim().split("\n");
  console.log(`[${label}] tests: exit ${result.exitCode}, ${lines[lines.length - 1] || "(no output)"}`);
  return result.exitCode === 0;
}

async function patch(sandbox: Sandbox, from: string, to: string): Promise<void> {
  const text = await sandbox.files.readText(source);
  if (!text.includes(from)) throw new Error(`patch does not apply: ${JSON.stringify(from)} is not in ${source}`);
  await sandbox.files.write(source, text.replace(from, to));
}

/** Prints streamed output line by line with a prefix (pieces arrive cut anywhere). */
function linePrinter(prefix: string): { write: (text: string) => void; flush: () => void } {
  let pending = "";
  return {
    write(text) {
      const lines = (pending + text).split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) console.log(prefix + line);
    },
    flush() {
      if (pending) console.log(prefix + pending);
      pending = "";
    },
  };
}

async function main(): Promise<number> {
  const client = new Bulkhead();
  const sandbox = await client.sandboxes.create({ metadata: { example: "agent-loop" }, timeoutS: 600 });
  const forks: Sandbox[] = [];
  try {
    console.log(`sandbox ${sandbox.id}`);
    await sandbox.files.uploadDir(project, "/workspace/project");
    const listing = await sandbox.files.list("/workspace/project", { depth: 2 });
    console.log("files:", listing.map((e) => e.path).join(", "));

    if (await runTests(sandbox, "original")) {
      console.log("the tests already pass: nothing to do");
      return 1;
    }
    // Stream the failing run so the "agent" sees what broke as it happens.
    const printer = linePrinter("  | ");
    await sandbox.exec(testCommand, { cwd: "/workspace/project", onStderr: printer.write });
    printer.flush();

    await patch(sandbox, ...firstPatch);
    if (await runTests(sandbox, "patched")) {
      console.log("the first patch was enough");
      return 0;
    }

    // Three attempts at once: each fork is a copy-on-write copy of the sandbox as it is now.
    forks.push(...(await sandbox.fork(candidates.length)));
    const passed = await Promise.all(
      forks.map(async (fork, i) => {
        await patch(fork, 'text.split(" ") if w', candidates[i]);
        return runTests(fork, `fork ${fork.id.slice(0, 8)}: ${candidates[i]}`);
      }),
    );
    const winner = passed.indexOf(true);
    if (winner < 0) {
      console.log("no attempt passed");
      return 1;
    }
    const keep = forks[winner];
    console.log(`keeping ${keep.id} (fix: ${candidates[winner]}); deleting the other forks`);
    await Promise.all(forks.filter((f) => f !== keep).map((f) => f.delete()));
    console.log(await keep.files.readText(source));
    return 0; // a real agent would go on working in `keep`; this one cleans up below
  } finally {
    await Promise.allSettled([sandbox, ...forks].map((s) => s.delete()));
  }
}

process.exitCode = await main();
