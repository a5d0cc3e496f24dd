"""The `base` template has what E2B's base template has: `python` is python3."""


def test_python_is_python3(sbx):
    result = sbx.commands.run("python --version && python -c 'import sys; print(sys.version_info[0])'")
    assert result.exit_code == 0, result
    assert result.stdout.startswith("Python 3.") and result.stdout.splitlines()[-1] == "3", result.stdout
