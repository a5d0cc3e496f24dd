"""sudo in a sandbox: the spec's sudo_users may run commands as root (or another user)
through init's sudo socket; nobody else may, and without sudo_users there is no socket."""

import json
import re
import time

import harness
from harness import wait_until

SOCKET = "/run/bulkhead-init/sudo.sock"


def test_without_sudo_users_there_is_no_socket_and_sudo_fails_cleanly(client, sandbox_factory):
    sandbox = sandbox_factory()["id"]
    assert client.sh(sandbox, f"test -e {SOCKET} && echo there || echo absent") == "absent\n"
    result = client.exec(sandbox, "sudo id -u", user="user")
    assert result["exit_code"] == 1, result
    assert result["stdout"] == ""
    assert result["stderr"] == "sudo: this sandbox has no sudo (its spec names no sudo_users)\n", result


def test_sudo_runs_the_command_as_root_with_a_reset_environment(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    assert client.sandbox(sandbox)["sudo_users"] == ["user"]
    assert client.sh(sandbox, "sudo id -u; sudo whoami", user="user") == "0\nroot\n"
    assert client.sh(sandbox, "sudo -u user id -u; sudo -u '#1000' id -un", user="user") == "1000\nuser\n"
    # The exit status and a signal come back as the command's.
    assert client.exec(sandbox, "sudo sh -c 'exit 7'", user="user")["exit_code"] == 7
    assert client.exec(sandbox, "sudo sh -c 'kill -TERM $$'", user="user")["exit_code"] == 128 + 15
    # env_reset: the caller's variables stay behind, sudo's own are set.
    out = client.sh(sandbox, "cd /tmp && FOO=bar PATH=/nowhere:$PATH sudo sh -c "
                    "'echo \"[$FOO]\" $HOME $USER $LOGNAME $SUDO_USER $SUDO_UID $SUDO_GID $PWD; echo $PATH'",
                    user="user")
    assert out == "[] /root root root user 1000 1000 /tmp\n" \
                  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n", out
    assert client.sh(sandbox, "FOO=bar sudo -E sh -c 'echo \"[$FOO]\"'", user="user") == "[bar]\n"
    # The signals a sudo gets go to the command.
    out = client.sh(sandbox, "sudo sh -c 'trap \"echo got-term; exit 0\" TERM; echo $$ > /tmp/p; "
                    "while :; do sleep 0.05; done' & c=$!; while [ ! -s /tmp/p ]; do sleep 0.05; done; "
                    "kill -TERM $c; wait $c; echo rc=$?", user="user", timeout_s=60)
    assert out == "got-term\nrc=0\n", out
    # stdin and stdout are the caller's own.
    assert client.sh(sandbox, "echo piped | sudo cat", user="user") == "piped\n"
    assert client.sh(sandbox, "sudo -i pwd; sudo -s -- echo a b", user="user") == "/root\na b\n"
    # The root the command gets is the sandbox's: it writes where only root may.
    assert client.sh(sandbox, "sudo touch /root/by-sudo && sudo ls /root/by-sudo", user="user") == "/root/by-sudo\n"


def test_sudo_refuses_unknown_options_and_a_missing_command(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    bad = client.exec(sandbox, "sudo -k true", user="user")
    assert bad["exit_code"] == 1 and "usage: sudo" in bad["stderr"], bad
    none = client.exec(sandbox, "sudo", user="user")
    assert none["exit_code"] == 1 and "usage: sudo" in none["stderr"], none
    unknown = client.exec(sandbox, "sudo -u no-such-user true", user="user")
    assert unknown == {**unknown, "exit_code": 1, "stderr": "sudo: unknown user no-such-user\n"}


def test_a_uid_not_allowed_is_refused(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["1000"])["id"]
    client.sh(sandbox, "echo 'other:x:1001:1001::/tmp:/bin/sh' >> /etc/passwd")
    denied = client.exec(sandbox, "sudo id -u", user="1001")
    assert denied["exit_code"] == 1, denied
    assert denied["stdout"] == ""
    assert denied["stderr"] == "other is not in the sudoers file.\n", denied
    assert client.sh(sandbox, "sudo id -u", user="1000") == "0\n"


def test_killing_the_sudo_client_kills_the_root_command(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    # The client is SIGKILLed: it cannot tell init anything, init sees the connection close.
    pid = client.sh(sandbox, "sudo sh -c 'echo $$ > /tmp/root-pid; exec sleep 1000' & c=$!; "
                    "while [ ! -s /tmp/root-pid ]; do sleep 0.05; done; kill -KILL $c; wait $c; cat /tmp/root-pid",
                    user="user", timeout_s=60).strip()
    assert pid.isdigit()
    gone = client.exec(sandbox, f"while [ -e /proc/{pid} ]; do sleep 0.05; done; echo gone", timeout_s=60)
    assert gone["stdout"] == "gone\n" and not gone["timed_out"], gone


HOSTILE = r"""
import json, os, signal, socket
PATH = "/run/bulkhead-init/sudo.sock"
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(PATH)
    return s
def ask(payload, fds=(0, 1, 2)):
    s = conn()
    socket.send_fds(s, [payload], list(fds)) if fds else s.send(payload)
    try:
        return s.recv(4096)
    except OSError as e:
        return repr(e).encode()
    finally:
        s.close()
answers = []
answers.append(ask(b"garbage \x00\xff"))
answers.append(ask(b"{" * 100000))
answers.append(ask(b'{"argv": ' + b"[" * 60000 + b"]" * 60000 + b"}"))
answers.append(ask(b'{"argv": "id"}'))
answers.append(ask(b'{"argv": [1]}'))
answers.append(ask(b'{"argv": ["id"], "user": "root:root"}'))
answers.append(ask(json.dumps({"argv": ["id"], "cwd": "/\u0000x"}).encode()))
answers.append(ask(b'{"argv": ["id"]}', fds=()))
answers.append(ask(b'{"argv": ["id"]}', fds=(0, 1)))
try:
    answers.append(ask(b"x" * (1 << 20)))
except OSError as e:
    answers.append(repr(e).encode())
# A flood of idle connections, held until this process is killed: they hold sudo's slots
# (and queue in its backlog), not init.
idle = [conn() for _ in range(64)]
with open("/tmp/answers.json.tmp", "w") as out:
    json.dump([a.decode("utf-8", "replace") for a in answers], out)
os.rename("/tmp/answers.json.tmp", "/tmp/answers.json")
while True:
    signal.pause()
"""


def test_hostile_requests_on_the_socket_do_not_hurt_init(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    client.upload(sandbox, "/tmp/hostile.py", HOSTILE.encode(), mode="0644")
    pid = client.sh(sandbox, "python3 /tmp/hostile.py >/tmp/hostile.log 2>&1 & "
                    "while [ ! -e /tmp/answers.json ] && kill -0 $! 2>/dev/null; do sleep 0.05; done; echo $!",
                    user="user", timeout_s=60).strip()
    answers = json.loads(client.sh(sandbox, "cat /tmp/answers.json || cat /tmp/hostile.log"))
    for answer in answers[:9]:
        assert json.loads(answer).get("error", "").startswith("sudo:"), answers
    # A packet too large for the socket is refused by the kernel or by init.
    assert "error" in answers[9] or "OSError" in answers[9], answers
    # Init still runs commands during the flood, and sudo once it is gone.
    assert client.sh(sandbox, "echo alive") == "alive\n"
    client.sh(sandbox, f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.05; done", user="user", timeout_s=60)
    assert client.sh(sandbox, "sudo id -u", user="user") == "0\n"


# Run as the sandbox's root: takes every new descriptor from init (pid 1) for 2.5 s, and writes
# down how much CPU init spent meanwhile.
STARVE_INIT = r"""
import os, resource, time
def cpu():
    fields = open("/proc/1/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
own = resource.prlimit(1, resource.RLIMIT_NOFILE)
resource.prlimit(1, resource.RLIMIT_NOFILE, (0, own[1]))
before = cpu()
time.sleep(2.5)
spent = cpu() - before
resource.prlimit(1, resource.RLIMIT_NOFILE, own)
open("/tmp/spent", "w").write(str(spent))
"""


def test_out_of_descriptors_init_waits_for_them_and_then_serves_sudo(client, sandbox_factory):
    """A sudo client connects while init has no descriptor to accept it with: init does not
    spin on the ready listener, and serves sudo again once it can."""
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    client.upload(sandbox, "/tmp/starve.py", STARVE_INIT.encode(), mode="0644")
    for cmd, user in (("sleep 1; sudo echo late > /tmp/late 2>&1", "user"), ("python3 /tmp/starve.py", "root")):
        r = client.post(f"/v1/sandboxes/{sandbox}/processes", {"cmd": cmd, "user": user})
        assert r.status == 201, r
    # (No call into the sandbox meanwhile: under gVisor a connection from the host that init
    # cannot take is reset, and the call answers 500 sandbox_unreachable.)
    time.sleep(3)
    spent = float(wait_until(lambda: client.sh(sandbox, "cat /tmp/spent 2>/dev/null; true"), timeout=30))
    assert spent < 0.3, f"init spent {spent:.2f} s of CPU waiting for descriptors"
    late = wait_until(lambda: client.sh(sandbox, "cat /tmp/late 2>/dev/null; true"), timeout=30)
    if harness.RUNTIME == "gvisor":
        # gVisor's accept takes the connection off the queue before it finds no descriptor
        # for it, and closes it: that sudo fails, and says so.
        assert late in ("late\n", "sudo: send request: Broken pipe\n"), late
    else:
        assert late == "late\n", late  # Linux leaves it queued until init can take it
    assert client.sh(sandbox, "sudo echo again", user="user") == "again\n"


def test_sudo_comes_back_after_a_stop_and_start(client, sandbox_factory):
    sandbox = sandbox_factory(sudo_users=["user"])["id"]
    assert client.post(f"/v1/sandboxes/{sandbox}/stop", {}).status == 200
    assert client.post(f"/v1/sandboxes/{sandbox}/start", {}).status == 200
    # A new init, told its sudo users again; the last boot's socket file is replaced.
    assert client.sh(sandbox, "sudo id -u", user="user") == "0\n"


def _metric(client, name) -> int:
    return int(re.search(rf"^{name} (\d+)$", client.get("/metrics").body.decode(), re.M).group(1))


def test_a_sandbox_with_sudo_users_comes_from_the_warm_pool(daemon_factory):
    """Pooled sandboxes boot without sudo; the one handed out is told its sudo users then."""
    daemon = daemon_factory(warm_pool=1)
    daemon.start()
    client = daemon.client()
    assert wait_until(lambda: _metric(client, "bulkhead_warm_pool_ready") == 1, timeout=30)
    before = _metric(client, "bulkhead_warm_pool_hits_total")
    sandbox = client.create(sudo_users=["user"])["id"]
    assert _metric(client, "bulkhead_warm_pool_hits_total") == before + 1
    assert client.sh(sandbox, "sudo id -u", user="user") == "0\n"
    # The next pooled one is handed out without sudo: it has no socket.
    assert wait_until(lambda: _metric(client, "bulkhead_warm_pool_ready") == 1, timeout=30)
    plain = client.create()["id"]
    assert _metric(client, "bulkhead_warm_pool_hits_total") == before + 2
    assert client.sh(plain, f"test -e {SOCKET} && echo there || echo absent") == "absent\n"
    # A reboot tells the new init again.
    assert client.post(f"/v1/sandboxes/{sandbox}/stop", {}).status == 200
    assert client.post(f"/v1/sandboxes/{sandbox}/start", {}).status == 200
    assert client.sh(sandbox, "sudo id -u", user="user") == "0\n"


def test_a_sandbox_with_sudo_users_comes_from_the_snapshot_pool(daemon_factory):
    daemon = daemon_factory(warm_pool=1)
    daemon.extra_args = ("--storage-driver", "btrfs")
    daemon.start()
    client = daemon.client()
    source = client.create(sudo_users=["user"])["id"]
    snapshot = client.post(f"/v1/sandboxes/{source}/snapshots", {}).json()["id"]
    client.create(from_snapshot=snapshot)
    # Ready: one sandbox of the host image, one of the snapshot (booted without sudo).
    assert wait_until(lambda: _metric(client, "bulkhead_warm_pool_ready") == 2, timeout=30)
    before = _metric(client, "bulkhead_warm_pool_hits_total")
    sandbox = client.create(from_snapshot=snapshot, sudo_users=["user"])
    assert _metric(client, "bulkhead_warm_pool_hits_total") == before + 1
    assert sandbox["parent_snapshot"] == snapshot and sandbox["sudo_users"] == ["user"], sandbox
    assert client.sh(sandbox["id"], "sudo id -u", user="user") == "0\n"
