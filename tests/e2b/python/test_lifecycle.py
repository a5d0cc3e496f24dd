"""Sandbox lifecycle details through the Python SDK, as E2B's API behaves: the list's order
(newest first, in the order the sandboxes were made, even within one second), connect that
only ever extends a running sandbox's timeout, a filesystem-only pause that reboots the
sandbox on connect, and metrics over a time range."""

import datetime
import time

import pytest
from e2b import Sandbox, SandboxException, SandboxQuery, SandboxState

from conftest import RUN_ID, list_all, wait_until_paused


def test_list_is_newest_first_in_the_order_they_were_made(new_sandbox):
    group = f"made-{RUN_ID}"
    made = [new_sandbox(metadata={"group": group}).sandbox_id for _ in range(3)]
    query = SandboxQuery(metadata={"run": RUN_ID, "group": group})

    listed = list_all(query=query)
    assert [i.sandbox_id for i in listed] == list(reversed(made))
    assert [i.sandbox_id for i in list_all(query=query, order="asc")] == made
    # Page by page, the same order.
    paginator = Sandbox.list(query=query, limit=1)
    paged = []
    while paginator.has_next:
        paged.extend(i.sandbox_id for i in paginator.next_items())
    assert paged == list(reversed(made))

    # startedAt tells them apart (sub-second times) and startedAfter is "at or after".
    started = [i.started_at for i in reversed(listed)]
    assert started == sorted(started) and len(set(started)) == 3
    assert [i.sandbox_id for i in list_all(query=SandboxQuery(metadata=query.metadata, started_after=started[1]),
                                           order="asc")] == made[1:]
    later = started[2] + datetime.timedelta(milliseconds=1)
    assert list_all(query=SandboxQuery(metadata=query.metadata, started_after=later)) == []


def test_connect_extends_a_running_sandboxs_timeout_and_never_shortens_it(new_sandbox):
    sbx = new_sandbox(timeout=300)
    before = Sandbox.get_info(sbx.sandbox_id).end_at
    Sandbox.connect(sbx.sandbox_id, timeout=10)
    assert Sandbox.get_info(sbx.sandbox_id).end_at == before
    Sandbox.connect(sbx.sandbox_id, timeout=900)
    after = Sandbox.get_info(sbx.sandbox_id).end_at
    assert after - before >= datetime.timedelta(seconds=500)
    # Without a timeout the API's default (300 s) applies, which is not later either.
    sbx.connect()
    assert Sandbox.get_info(sbx.sandbox_id).end_at == after


BOOT_ID = "/proc/sys/kernel/random/boot_id"


def boot_id(sbx) -> str:
    text = sbx.files.read(BOOT_ID).strip()  # procfs says 0 bytes: read to its end
    assert len(text) == 36 and text.count("-") == 4, text
    return text


def test_a_pause_without_memory_reboots_the_sandbox_on_connect(new_sandbox):
    sbx = new_sandbox()
    sbx.files.write("/home/user/fs-only.txt", "persisted")
    before = boot_id(sbx)
    sleeper = sbx.commands.run("sleep 600", background=True, timeout=0)

    assert sbx.pause(mode="filesystem") is True
    assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
    assert Sandbox.pause(sbx.sandbox_id, keep_memory=False) is False  # already paused

    resumed = sbx.connect()
    assert resumed.sandbox_id == sbx.sandbox_id
    assert resumed.get_info().state == SandboxState.RUNNING
    # The files are kept; the sandbox booted again: a new boot id, its processes gone.
    assert resumed.files.read("/home/user/fs-only.txt") == "persisted"
    assert boot_id(resumed) != before
    assert sleeper.pid not in {p.pid for p in resumed.commands.list()}


def test_connect_with_reboot_boots_a_paused_sandbox_from_its_files(new_sandbox):
    sbx = new_sandbox()
    sbx.files.write("/home/user/kept.txt", "on disk")
    before = boot_id(sbx)
    sleeper = sbx.commands.run("sleep 600", background=True, timeout=0)
    assert sbx.pause() is True  # memory kept, but the resume asks for a reboot

    resumed = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
    assert resumed.files.read("/home/user/kept.txt") == "on disk"
    assert boot_id(resumed) != before
    assert sleeper.pid not in {p.pid for p in resumed.commands.list()}


def test_a_filesystem_auto_pause_reboots_on_connect(new_sandbox):
    sbx = new_sandbox(lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
    assert sbx.get_info().lifecycle["on_timeout"] == "pause"
    sbx.files.write("/home/user/kept.txt", "through the auto-pause")
    before = boot_id(sbx)
    sbx.set_timeout(1)
    wait_until_paused(sbx.sandbox_id)
    resumed = Sandbox.connect(sbx.sandbox_id, timeout=120)
    assert resumed.files.read("/home/user/kept.txt") == "through the auto-pause"
    assert boot_id(resumed) != before


def test_metrics_honour_start_and_end(new_sandbox):
    sbx = new_sandbox()
    started = Sandbox.get_info(sbx.sandbox_id).started_at
    # A range before the sandbox existed has no samples.
    hour = datetime.timedelta(hours=1)
    assert sbx.get_metrics(start=started - 2 * hour, end=started - hour) == []

    # The history grows by a sample about every 5 s: wait for a second one.
    metrics = sbx.get_metrics()
    deadline = time.monotonic() + 60
    while len(metrics) < 2 and time.monotonic() < deadline:
        time.sleep(1)
        metrics = sbx.get_metrics()
    times = [m.timestamp for m in metrics]
    assert len(times) >= 2 and times == sorted(times), times
    first, last = times[0], times[-1]
    assert first < last

    # start and end are whole seconds, both inclusive.
    assert {m.timestamp for m in sbx.get_metrics(start=first, end=first)} == {first}
    later = [m.timestamp for m in sbx.get_metrics(start=last)]
    assert last in later and first not in later
    with pytest.raises(SandboxException, match="400"):
        sbx.get_metrics(start=last, end=first)
