"""The Python SDK's async client (AsyncSandbox) over the same front: its own HTTP code path, and
the streaming WatchDir RPC that the sync client does not use."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, FilesystemEventType

from conftest import run_metadata


async def scenario():
    sbx = await AsyncSandbox.create(timeout=120, metadata=run_metadata(purpose="async"))
    try:
        out = []
        r = await sbx.commands.run("echo a; echo b", on_stdout=out.append)
        assert (r.stdout, "".join(out)) == ("a\nb\n", "a\nb\n")
        with pytest.raises(CommandExitException) as failed:
            await sbx.commands.run("exit 4")
        assert failed.value.exit_code == 4

        data = bytes(range(256)) * 8
        await sbx.files.write("/tmp/async/all.bin", data)
        assert bytes(await sbx.files.read("/tmp/async/all.bin", format="bytes")) == data

        events = []
        await sbx.files.make_dir("/tmp/async/watched")
        handle = await sbx.files.watch_dir("/tmp/async/watched", events.append)
        await sbx.files.write("/tmp/async/watched/x.txt", "x")
        await sbx.files.remove("/tmp/async/watched/x.txt")
        wanted = {("x.txt", FilesystemEventType.CREATE), ("x.txt", FilesystemEventType.REMOVE)}
        for _ in range(100):  # bounded: up to ~20 s
            if wanted <= {(e.name, e.type) for e in events}:
                break
            await asyncio.sleep(0.2)
        await handle.stop()
        assert wanted <= {(e.name, e.type) for e in events}, events

        background = await sbx.commands.run("sleep 600", background=True, timeout=0)
        assert await sbx.commands.kill(background.pid) is True
        with pytest.raises(CommandExitException):
            await background.wait()
    finally:
        assert await sbx.kill() is True
    assert await sbx.is_running() is False


def test_async_sandbox():
    asyncio.run(scenario())
