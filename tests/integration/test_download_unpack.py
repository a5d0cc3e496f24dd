"""Downloading a sandbox's directory onto this machine as root, with each client (the CLI's
`cp`, the Python SDK's download_dir, the TypeScript SDK's downloadDir): sandbox code plants a
setuid-root program, a setgid directory, a sticky file, a file of another owner and symlinks
leading out. On the host nothing may be setuid/setgid, owned as the archive says, or written
outside the target; the symlinks out are refused and everything else arrives."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness import BULKHEAD
from test_sdk_typescript import built_sdk, output_of, sdk_env  # noqa: F401 (built_sdk is a fixture)

SDK_DIR = Path(__file__).resolve().parents[2] / "sdk" / "python"
sys.path.insert(0, str(SDK_DIR))

from bulkhead import Bulkhead, UnsafeArchiveError  # noqa: E402

PLANT = r"""
set -e
mkdir -p /workspace/d/sub
printf '#!/bin/sh\nid -u\n' > /workspace/d/evil
chmod 4755 /workspace/d/evil
mkdir /workspace/d/shared
chmod 2775 /workspace/d/shared
echo inside > /workspace/d/shared/file
echo sticky > /workspace/d/sticky
chmod 1644 /workspace/d/sticky
echo theirs > /workspace/d/theirs
chown 1234:1234 /workspace/d/theirs
ln -s /etc /workspace/d/etc
ln -s ../../../../../../../../tmp /workspace/d/sub/up
ln -s ../sticky /workspace/d/sub/ok
echo fine > /workspace/d/sub/fine
stat -c '%n %a %u' /workspace/d/evil /workspace/d/shared /workspace/d/theirs
"""

DOWNLOAD_MJS = """\
import { Bulkhead, UnsafeArchiveError } from "SDK_URL";

const [id, dest] = process.argv.slice(2);
const bulkhead = new Bulkhead();
const sandbox = await bulkhead.sandboxes.get(id);
try {
  console.log(JSON.stringify({ entries: await sandbox.files.downloadDir("/workspace/d", dest) }));
} catch (error) {
  if (!(error instanceof UnsafeArchiveError)) throw error;
  console.log(JSON.stringify({ entries: error.entries, refused: error.refused.map((r) => r.name) }));
} finally {
  bulkhead.close();
}
"""


def test_sandbox_files_downloaded_as_root_cannot_plant_anything_on_the_host(daemon, built_sdk, tmp_path):  # noqa: F811
    assert os.geteuid() == 0
    base = tmp_path / "host"
    base.mkdir()
    with Bulkhead(url=f"http://127.0.0.1:{daemon.port}", api_key=daemon.key) as client:
        with client.sandboxes.create() as box:
            planted = box.exec(PLANT, user="root").check().stdout.split("\n")
            assert planted[:3] == ["/workspace/d/evil 4755 0", "/workspace/d/shared 2775 0",
                                   "/workspace/d/theirs 644 1234"], planted

            # The CLI: refused entries are reported and make the copy fail, the rest is there.
            env = {k: v for k, v in os.environ.items() if not k.startswith("BULKHEAD_")}
            env["BULKHEAD_STATE"] = str(daemon.state_dir)
            r = subprocess.run([str(BULKHEAD), "cp", f"{box.id}:/workspace/d", str(base / "cli")], env=env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 1 and "unsafe_entry" in r.stderr, r
            assert "refused tar entry 'etc'" in r.stderr and "refused tar entry 'sub/up'" in r.stderr, r

            # One file at a time, the CLI keeps permission bits the same way.
            single = tmp_path / "single"
            single.mkdir()
            for name in ("evil", "sticky"):
                r = subprocess.run([str(BULKHEAD), "cp", f"{box.id}:/workspace/d/{name}", str(single)], env=env,
                                   capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, r
            assert stat.S_IMODE(os.stat(single / "evil").st_mode) == 0o755
            assert stat.S_IMODE(os.stat(single / "sticky").st_mode) == 0o644

            # The Python SDK.
            with pytest.raises(UnsafeArchiveError) as python_refusal:
                box.files.download_dir("/workspace/d", base / "python")
            assert sorted(n for n, _ in python_refusal.value.refused) == ["etc", "sub/up"]

            # The TypeScript SDK, as a program of the user's would run it.
            script = tmp_path / "download.mjs"
            script.write_text(DOWNLOAD_MJS.replace("SDK_URL", (built_sdk / "dist" / "index.js").as_uri()))
            r = subprocess.run(["node", str(script), box.id, str(base / "typescript")], cwd=tmp_path,
                               env=sdk_env(daemon), capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, output_of(r)
            assert sorted(json.loads(r.stdout)["refused"]) == ["etc", "sub/up"], r.stdout

    assert sorted(p.name for p in base.iterdir()) == ["cli", "python", "typescript"]  # nothing beside them
    for client_dir in sorted(base.iterdir()):
        seen = {}
        for directory, dirs, files in os.walk(client_dir):
            for name in dirs + files:
                path = Path(directory) / name
                info = os.lstat(path)
                seen[str(path.relative_to(client_dir))] = info
                assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID), (client_dir.name, path, oct(info.st_mode))
                assert stat.S_ISDIR(info.st_mode) or not info.st_mode & stat.S_ISVTX, (client_dir.name, path)
                assert (info.st_uid, info.st_gid) == (0, 0), (client_dir.name, path, info.st_uid, info.st_gid)
                assert stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)
        assert sorted(seen) == ["evil", "shared", "shared/file", "sticky", "sub", "sub/fine", "sub/ok", "theirs"], \
            (client_dir.name, sorted(seen))
        assert stat.S_IMODE(seen["evil"].st_mode) == 0o755, client_dir.name
        assert stat.S_IMODE(seen["shared"].st_mode) == 0o775, client_dir.name
        assert stat.S_IMODE(seen["sticky"].st_mode) == 0o644, client_dir.name
        assert (client_dir / "theirs").read_text() == "theirs\n"
        assert os.readlink(client_dir / "sub" / "ok") == "../sticky"
