"""Open mode switches net.ipv4.ip_forward on in the daemon's network namespace and puts back
what it found once the last open sandbox there is gone, whichever daemon it belonged to, also
after a daemon was killed (issue 17, finding 10). The daemons run in fakenet's host namespace,
so the host's own switch is never touched; the test sets the namespace's switch to the value
it starts from and puts the namespace's value back afterwards."""

import signal

import pytest


def ip_forward(fakenet) -> str:
    return fakenet.host_run(["cat", "/proc/sys/net/ipv4/ip_forward"]).stdout.strip()


def set_ip_forward(fakenet, value: str):
    result = fakenet.host_run(["sysctl", "-qw", f"net.ipv4.ip_forward={value}"])
    assert result.returncode == 0, result.stderr


@pytest.fixture
def found_value(fakenet, request):
    """ip_forward in fakenet's host namespace before the test: the parameter; restored after."""
    before = ip_forward(fakenet)
    set_ip_forward(fakenet, request.param)
    yield request.param
    set_ip_forward(fakenet, before)


def open_sandbox(daemon) -> str:
    return daemon.client().create(network={"mode": "open"})["id"]


@pytest.mark.parametrize("found_value", ["0", "1"], indirect=True)
def test_the_last_open_sandbox_puts_ip_forward_back(found_value, net_daemon_factory, fakenet):
    daemon = net_daemon_factory().start()
    client = daemon.client()
    assert ip_forward(fakenet) == found_value
    first, second = open_sandbox(daemon), open_sandbox(daemon)
    assert ip_forward(fakenet) == "1"
    client.remove(first)
    assert ip_forward(fakenet) == "1", "switched back while an open sandbox still runs"
    client.remove(second)
    assert ip_forward(fakenet) == found_value
    # Switched on again with the next one, and back again.
    third = open_sandbox(daemon)
    assert ip_forward(fakenet) == "1"
    client.remove(third)
    assert ip_forward(fakenet) == found_value


@pytest.mark.parametrize("found_value", ["0"], indirect=True)
def test_ip_forward_stays_on_until_every_daemons_last_open_sandbox_is_gone(found_value, net_daemon_factory, fakenet):
    a, b = net_daemon_factory().start(), net_daemon_factory().start()
    on_a = open_sandbox(a)
    on_b = open_sandbox(b)
    assert ip_forward(fakenet) == "1"
    a.client().remove(on_a)
    assert ip_forward(fakenet) == "1", "daemon a switched ip_forward off under daemon b's open sandbox"
    b.client().remove(on_b)
    assert ip_forward(fakenet) == "0"
    # The other order: b's first, a last.
    on_b, on_a = open_sandbox(b), open_sandbox(a)
    b.client().remove(on_b)
    assert ip_forward(fakenet) == "1"
    a.client().remove(on_a)
    assert ip_forward(fakenet) == "0"


@pytest.mark.parametrize("found_value", ["0"], indirect=True)
def test_a_daemon_start_puts_back_what_a_killed_daemon_left_on(found_value, net_daemon_factory, fakenet):
    killed = net_daemon_factory().start()
    open_sandbox(killed)
    assert ip_forward(fakenet) == "1"
    killed.stop(signal.SIGKILL)
    assert ip_forward(fakenet) == "1"  # nothing ran to put it back
    # Another daemon's start finds the dead daemon's claim and the value it recorded.
    other = net_daemon_factory().start()
    assert ip_forward(fakenet) == "0"
    sandbox_id = open_sandbox(other)
    assert ip_forward(fakenet) == "1"
    other.client().remove(sandbox_id)
    assert ip_forward(fakenet) == "0"
    # The killed daemon, back, makes its sandbox's link again and claims the switch again.
    killed.start()
    assert ip_forward(fakenet) == "1"
    killed.delete_all_sandboxes()
    assert ip_forward(fakenet) == "0"
