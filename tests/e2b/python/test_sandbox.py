"""Sandbox lifecycle through the Python SDK: create, get_info, is_running, list (metadata and
state filters, pagination), set_timeout, pause and connect (resume), kill, the errors of a dead
sandbox and of a bad key, fork, snapshots and network settings."""

import datetime
import os
import time

import pytest
from e2b import (
    AuthenticationException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
)

from conftest import RUN_ID, list_all, run_metadata, wait_until_paused


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def ids_of(infos) -> set:
    return {info.sandbox_id for info in infos}


def test_create_info_and_is_running(new_sandbox):
    before = now().replace(microsecond=0)
    sbx = new_sandbox(metadata={"purpose": "info", "spaced": "v w&x=y"}, envs={"GLOBAL_A": "from-create"})
    assert sbx.sandbox_id
    assert sbx.is_running() is True

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id
    assert info.metadata == run_metadata(purpose="info", spaced="v w&x=y")
    assert info.state == SandboxState.RUNNING
    assert info.envd_version == "0.6.4"
    assert info.cpu_count >= 1 and info.memory_mb >= 1
    assert before - datetime.timedelta(seconds=1) <= info.started_at <= now() + datetime.timedelta(seconds=1)
    # timeout=300 from the factory: the end is 300 s after the start.
    assert abs((info.end_at - info.started_at).total_seconds() - 300) <= 2

    # The static form answers the same.
    assert Sandbox.get_info(sbx.sandbox_id).sandbox_id == sbx.sandbox_id

    # Sandbox-wide env vars from create reach commands.
    assert sbx.commands.run("echo $GLOBAL_A").stdout == "from-create\n"
    # A command's own envs win over the sandbox's.
    assert sbx.commands.run("echo $GLOBAL_A", envs={"GLOBAL_A": "per-command"}).stdout == "per-command\n"


def test_default_user_and_home(new_sandbox):
    sbx = new_sandbox()
    r = sbx.commands.run("id -un; id -u; echo $HOME; pwd")
    assert r.stdout == "user\n1000\n/home/user\n/home/user\n"


def test_list_metadata_filter_and_pagination(new_sandbox):
    group = f"list-{RUN_ID}"
    made = {new_sandbox(metadata={"group": group}).sandbox_id for _ in range(3)}
    other = new_sandbox(metadata={"group": group + "-other"}).sandbox_id

    query = SandboxQuery(metadata={"run": RUN_ID, "group": group})
    assert ids_of(list_all(query=query)) == made

    # Two per page: 2 + 1, and the paginator says when it is done.
    paginator = Sandbox.list(query=query, limit=2)
    assert paginator.has_next
    first = paginator.next_items()
    assert len(first) == 2 and paginator.has_next
    second = paginator.next_items()
    assert len(second) == 1
    assert not paginator.has_next
    assert ids_of(first) | ids_of(second) == made

    # Metadata values with characters that need encoding match exactly.
    spaced = new_sandbox(metadata={"group": group + " spaced", "k": "a b/c?d=e"}).sandbox_id
    assert ids_of(list_all(query=SandboxQuery(metadata={"run": RUN_ID, "k": "a b/c?d=e"}))) == {spaced}
    assert ids_of(list_all(query=SandboxQuery(metadata={"run": RUN_ID, "k": "a b"}))) == set()
    assert other not in ids_of(list_all(query=query))

    listed = [i for i in list_all(query=query) if i.sandbox_id in made]
    for info in listed:
        assert info.state == SandboxState.RUNNING
        assert info.metadata["group"] == group


def test_pause_then_connect_resumes(new_sandbox):
    group = f"pause-{RUN_ID}"
    sbx = new_sandbox(metadata={"group": group})
    stays = new_sandbox(metadata={"group": group})
    sbx.files.write("/home/user/before-pause.txt", "kept across pause")
    sleeper = sbx.commands.run("sleep 600", background=True, timeout=0)

    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED
    # Pausing a paused sandbox answers False (409 from the API).
    assert Sandbox.pause(sbx.sandbox_id) is False

    query = {"run": RUN_ID, "group": group}
    paused = list_all(query=SandboxQuery(metadata=query, state=[SandboxState.PAUSED]))
    running = list_all(query=SandboxQuery(metadata=query, state=[SandboxState.RUNNING]))
    both = list_all(query=SandboxQuery(metadata=query, state=[SandboxState.RUNNING, SandboxState.PAUSED]))
    default = list_all(query=SandboxQuery(metadata=query))
    assert ids_of(paused) == {sbx.sandbox_id}
    assert [i.state for i in paused] == [SandboxState.PAUSED]
    assert ids_of(running) == {stays.sandbox_id}
    assert ids_of(both) == ids_of(default) == {sbx.sandbox_id, stays.sandbox_id}

    resumed = Sandbox.connect(sbx.sandbox_id)
    assert resumed.sandbox_id == sbx.sandbox_id
    assert resumed.get_info().state == SandboxState.RUNNING
    assert resumed.files.read("/home/user/before-pause.txt") == "kept across pause"
    # A full pause keeps processes: the sleeper is still there.
    assert sleeper.pid in {p.pid for p in resumed.commands.list()}
    assert resumed.commands.kill(sleeper.pid) is True


def test_connect_to_running_sandbox(new_sandbox):
    sbx = new_sandbox()
    sbx.files.write("/home/user/marker.txt", "same sandbox")
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.files.read("/home/user/marker.txt") == "same sandbox"
    assert again.connect() is again


def test_set_timeout_moves_end(new_sandbox):
    sbx = new_sandbox()
    t0 = now()
    sbx.set_timeout(900)
    t1 = now()
    end = sbx.get_info().end_at
    assert t0 + datetime.timedelta(seconds=898) <= end <= t1 + datetime.timedelta(seconds=902)

    Sandbox.set_timeout(sbx.sandbox_id, 120)
    end = Sandbox.get_info(sbx.sandbox_id).end_at
    assert end <= now() + datetime.timedelta(seconds=122)


def test_timeout_expiry_kills_sandbox(new_sandbox):
    sbx = new_sandbox()
    sbx.set_timeout(1)
    # The default on-timeout action is kill: the sandbox goes away (bounded wait, not a
    # timing assertion).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            Sandbox.get_info(sbx.sandbox_id)
        except SandboxNotFoundException:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the sandbox outlived its 1 s timeout by a minute")
    assert sbx.is_running() is False


def test_kill_and_dead_sandbox_errors(new_sandbox):
    sbx = new_sandbox()
    sandbox_id = sbx.sandbox_id
    assert sbx.kill() is True
    assert Sandbox.kill(sandbox_id) is False
    assert sbx.is_running() is False
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.set_timeout(sandbox_id, 60)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox_id)
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read("/etc/hostname")
    assert sandbox_id not in ids_of(list_all(query=SandboxQuery(metadata={"run": RUN_ID})))


def test_unknown_sandbox_id():
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info("sbx-does-not-exist")
    assert Sandbox.kill("sbx-does-not-exist") is False


def test_bad_api_key():
    bad = "e2b_" + "0" * 40
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key=bad, metadata=run_metadata())
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key=bad).next_items()
    assert os.environ["E2B_API_KEY"] != bad


def test_fork(new_sandbox):
    sbx = new_sandbox()
    sbx.files.write("/home/user/forked.txt", "from the parent")
    results = sbx.fork(count=2, timeout=120)
    forks = [r for r in results if isinstance(r, Sandbox)]
    try:
        assert len(results) == 2 and len(forks) == 2, results
        ids = {f.sandbox_id for f in forks}
        assert len(ids) == 2 and sbx.sandbox_id not in ids
        for fork in forks:
            assert fork.files.read("/home/user/forked.txt") == "from the parent"
            fork.files.write("/home/user/forked.txt", f"changed in {fork.sandbox_id}")
        # The parent keeps running, untouched by its forks' writes.
        assert sbx.is_running() is True
        assert sbx.files.read("/home/user/forked.txt") == "from the parent"
    finally:
        for fork in forks:
            fork.kill()


def test_snapshot_create_list_use_delete(new_sandbox):
    sbx = new_sandbox()
    sbx.files.write("/home/user/snap.txt", "in the snapshot")
    snapshot = sbx.create_snapshot()
    assert snapshot.snapshot_id
    try:
        # The source keeps running.
        assert sbx.get_info().state == SandboxState.RUNNING
        listed = []
        paginator = sbx.list_snapshots()
        while paginator.has_next:
            listed.extend(paginator.next_items())
        assert snapshot.snapshot_id in {s.snapshot_id for s in listed}

        from_snapshot = new_sandbox(template=snapshot.snapshot_id)
        assert from_snapshot.files.read("/home/user/snap.txt") == "in the snapshot"
        from_snapshot.kill()
    finally:
        assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(snapshot.snapshot_id) is False


def test_network_settings_in_info(new_sandbox):
    # No traffic leaves the sandbox here: only what the API reports is checked.
    closed = new_sandbox(allow_internet_access=False)
    assert closed.get_info().allow_internet_access is False
    # Read, not probed: a network namespace with only loopback has no way out.
    assert closed.commands.run("ls /sys/class/net").stdout == "lo\n"

    default = new_sandbox()
    assert default.get_info().allow_internet_access in (True, None)

    ruled = new_sandbox(network={"allow_out": ["198.51.100.7"], "deny_out": ["0.0.0.0/0"]})
    network = ruled.get_info().network
    assert network is not None
    assert network.get("allow_out") == ["198.51.100.7"]
    assert network.get("deny_out") == ["0.0.0.0/0"]

    ruled.update_network({"allow_out": ["203.0.113.9"], "deny_out": ["0.0.0.0/0"]})
    network = ruled.get_info().network
    assert network.get("allow_out") == ["203.0.113.9"]
    assert network.get("deny_out") == ["0.0.0.0/0"]


def test_paused_sandbox_is_not_running_until_connect(new_sandbox):
    """As E2B's proxy: without auto_resume a paused sandbox answers its envd traffic 502 (not
    found), so the SDK reports it not running, and nothing resumes it but connect."""
    sbx = new_sandbox()
    sbx.files.write("/home/user/paused.txt", "kept")
    assert sbx.pause() is True
    assert sbx.is_running() is False
    with pytest.raises(SandboxNotRunningException):
        sbx.commands.run("true")
    with pytest.raises(SandboxNotRunningException):
        sbx.files.read("/home/user/paused.txt")
    assert sbx.get_info().state == SandboxState.PAUSED
    assert sbx.get_info().lifecycle["auto_resume"] is False
    sbx.connect()
    assert sbx.is_running() is True
    assert sbx.files.read("/home/user/paused.txt") == "kept"


def test_auto_resume_resumes_on_traffic(new_sandbox):
    """lifecycle auto_resume: any envd traffic, the health probe included, resumes it."""
    sbx = new_sandbox(lifecycle={"on_timeout": "pause", "auto_resume": True})
    assert sbx.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
    sbx.files.write("/home/user/auto.txt", "auto")
    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED
    assert sbx.files.read("/home/user/auto.txt") == "auto"
    assert sbx.get_info().state == SandboxState.RUNNING
    assert sbx.pause() is True
    assert sbx.is_running() is True
    assert sbx.get_info().state == SandboxState.RUNNING


def test_lifecycle_pause_on_timeout(new_sandbox):
    sbx = new_sandbox(lifecycle={"on_timeout": "pause"})
    info = sbx.get_info()
    assert info.lifecycle is not None and info.lifecycle["on_timeout"] == "pause"
    sbx.files.write("/home/user/kept.txt", "through the auto-pause")
    sbx.set_timeout(1)
    wait_until_paused(sbx.sandbox_id)
    resumed = Sandbox.connect(sbx.sandbox_id, timeout=120)
    assert resumed.get_info().state == SandboxState.RUNNING
    assert resumed.files.read("/home/user/kept.txt") == "through the auto-pause"


def test_get_metrics(new_sandbox):
    sbx = new_sandbox()
    metrics = sbx.get_metrics()
    assert len(metrics) >= 1
    m = metrics[-1]
    assert m.cpu_count >= 1
    assert 0 <= m.cpu_used_pct
    assert 0 < m.mem_used <= m.mem_total
    assert abs((m.timestamp - now()).total_seconds()) < 120


def test_list_order_template_started_after(new_sandbox):
    group = f"order-{RUN_ID}"
    first = new_sandbox(metadata={"group": group})
    second = new_sandbox(metadata={"group": group})
    metadata = {"run": RUN_ID, "group": group}
    asc = list_all(query=SandboxQuery(metadata=metadata), order="asc")
    desc = list_all(query=SandboxQuery(metadata=metadata), order="desc")
    assert [i.started_at for i in asc] == sorted(i.started_at for i in asc)
    assert [i.sandbox_id for i in desc] == [i.sandbox_id for i in reversed(asc)]
    assert ids_of(asc) == {first.sandbox_id, second.sandbox_id}

    assert ids_of(list_all(query=SandboxQuery(metadata=metadata, template="base"))) == ids_of(asc)
    assert ids_of(list_all(query=SandboxQuery(metadata=metadata, template="no-such-template"))) == set()
    later = now() + datetime.timedelta(hours=1)
    assert ids_of(list_all(query=SandboxQuery(metadata=metadata, started_after=later))) == set()
    earlier = now() - datetime.timedelta(hours=1)
    assert ids_of(list_all(query=SandboxQuery(metadata=metadata, started_after=earlier))) == ids_of(asc)


def test_unknown_template():
    with pytest.raises(SandboxException):
        Sandbox.create(template="no-such-template", metadata=run_metadata())
