"""The `base` template has what E2B's base template has: `python` is python3, and its user
may `sudo` without a password."""

import pytest
from e2b import CommandExitException


def test_python_is_python3(sbx):
    result = sbx.commands.run("python --version && python -c 'import sys; print(sys.version_info[0])'")
    assert result.exit_code == 0, result
    assert result.stdout.startswith("Python 3.") and result.stdout.splitlines()[-1] == "3", result.stdout


# `sudo`: the base template's user may run commands as root without a password.
def test_sudo_runs_as_root(sbx):
    result = sbx.commands.run("sudo whoami")
    assert result.exit_code == 0 and result.stdout == "root\n", result
    assert sbx.commands.run("whoami").stdout == "user\n"


def test_sudo_u_runs_as_that_user(sbx):
    assert sbx.commands.run("sudo -u user id -u").stdout == "1000\n"


def test_sudo_does_not_pass_the_callers_environment(sbx):
    result = sbx.commands.run('sudo echo "$FOO"')
    assert result.exit_code == 0 and result.stdout == "\n", result
    # sudo's env_reset: the caller's variables stay behind.
    result = sbx.commands.run("sudo sh -c 'echo \"[$FOO]\" $USER $HOME $SUDO_USER'", envs={"FOO": "bar"})
    assert result.exit_code == 0 and result.stdout == "[] root /root user\n", result


def test_sudo_passes_the_exit_code_through(sbx):
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("sudo sh -c 'exit 3'")
    assert failed.value.exit_code == 3
