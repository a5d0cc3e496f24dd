"""Template builds through the Python SDK (Template.build, build_in_background, get_build_status,
tags, exists, delete): bulkhead's E2B front builds them with its image builder, each step in a
sandbox, and sandboxes created from the template's name start from the result with its
default user, working directory, environment and start command."""

import uuid
from pathlib import Path

import pytest
from e2b import BuildException, Sandbox, Template, wait_for_file


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def context(tmp_path: Path) -> Path:
    (tmp_path / "hello.txt").write_text("hello from the context\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "run.sh").write_text("#!/bin/sh\necho app ran as $(id -un)\n")
    (tmp_path / "app" / "data.txt").write_text("data\n")
    return tmp_path


@pytest.fixture
def templates():
    """Names built here, deleted at the end (DELETE /templates/{id})."""
    made: list[str] = []
    yield made
    for name in made:
        Sandbox.delete_snapshot(name)


def definition(context: Path) -> Template:
    return (
        Template(file_context_path=str(context))
        .from_base_image()
        .copy("hello.txt", "/opt/demo/hello.txt")
        .copy("app", "/opt/demo/app/", mode=0o755)
        .set_envs({"GREETING": "hi there", "MODE": "test"})
        .run_cmd("echo built-by=$(whoami) > /opt/demo/env.txt && echo \"greeting=$GREETING\" >> /opt/demo/env.txt",
                 user="root")
        .run_cmd("echo step output line; touch ~/made-by-user")
        .set_workdir("/opt/demo")
        .set_start_cmd("echo started > /tmp/demo-started && sleep infinity", wait_for_file("/tmp/demo-started"))
    )


def test_a_built_template_starts_sandboxes_with_its_files_env_user_and_start_command(context, templates, new_sandbox):
    name = unique("sdk-tpl")
    templates.append(name)
    logs = []
    info = Template.build(definition(context), name, on_build_logs=logs.append)
    assert info.template_id == name and info.build_id
    messages = [entry.message for entry in logs]
    assert any("step output line" in m for m in messages), messages
    assert any("RUN echo step output line" in m for m in messages), messages
    assert Template.exists(name) is True

    sandbox = new_sandbox(template=name)
    out = sandbox.commands.run("cat hello.txt env.txt /tmp/demo-started && ./app/run.sh && pwd && whoami && "
                               "ls -l app/run.sh && stat -c %U hello.txt && ls ~/made-by-user && echo $GREETING")
    text = out.stdout
    assert "hello from the context" in text
    assert "built-by=root" in text and "greeting=hi there" in text
    assert "started" in text, text  # the start command ran before create answered
    assert "app ran as user" in text
    lines = text.splitlines()
    assert "/opt/demo" in lines and "user" in lines, text
    assert "-rwxr-xr-x" in text, text
    assert "hi there" in lines, text
    # E2B's default user may sudo without a password, as in its base template.
    assert sandbox.commands.run("sudo -n id -u").stdout.strip() == "0"


def test_a_second_identical_build_is_served_from_the_cache(context, templates):
    name = unique("sdk-cache")
    templates.append(name)
    Template.build(definition(context), name)
    logs = []
    Template.build(definition(context), name, on_build_logs=logs.append)
    cached = [entry.message for entry in logs if entry.message.startswith("CACHED ")]
    assert len(cached) >= 4, [entry.message for entry in logs]


def test_a_failing_step_fails_the_build_with_its_reason(context, templates):
    name = unique("sdk-fail")
    templates.append(name)
    template = Template(file_context_path=str(context)).from_base_image().run_cmd("echo about to fail; exit 3")
    with pytest.raises(BuildException) as failed:
        Template.build(template, name)
    assert "exit" in str(failed.value), str(failed.value)
    assert Template.exists(name) is True  # the template is known; it has no tag to start from


def test_tags_name_builds_and_sandboxes_start_from_a_tag(context, templates, new_sandbox):
    name = unique("sdk-tags")
    templates.append(name)
    template = Template(file_context_path=str(context)).from_base_image().run_cmd("echo v1 > /tmp/version")
    info = Template.build(template, f"{name}:v1")
    assert "v1" in info.tags
    assigned = Template.assign_tags(f"{name}:v1", ["prod", "stable"])
    assert sorted(assigned.tags) == ["prod", "stable"]
    tags = {tag.tag: tag for tag in Template.get_tags(name)}
    assert set(tags) == {"v1", "prod", "stable"}
    assert tags["v1"].build_id == tags["prod"].build_id
    sandbox = new_sandbox(template=f"{name}:prod")
    assert sandbox.commands.run("cat /tmp/version").stdout.strip() == "v1"
    Template.remove_tags(name, "stable")
    assert {tag.tag for tag in Template.get_tags(name)} == {"v1", "prod"}


def test_a_template_built_from_another_inherits_its_user_and_start_command(context, templates, new_sandbox):
    parent, child = unique("sdk-parent"), unique("sdk-child")
    templates.extend([child, parent])
    Template.build(definition(context), parent)
    template = Template(file_context_path=str(context)).from_template(parent).run_cmd("echo child >> /opt/demo/env.txt",
                                                                                                 user="root")
    Template.build(template, child)
    sandbox = new_sandbox(template=child)
    text = sandbox.commands.run("cat env.txt /tmp/demo-started && whoami").stdout
    assert "child" in text and "started" in text and text.strip().endswith("user"), text


def test_build_in_background_reports_its_progress(context, templates):
    name = unique("sdk-bg")
    templates.append(name)
    template = Template(file_context_path=str(context)).from_base_image().run_cmd("echo background")
    info = Template.build_in_background(template, name)
    status = Template.get_build_status(info)
    assert status.status.value in ("building", "waiting", "ready")
    import time

    deadline = time.monotonic() + 120
    while status.status.value in ("building", "waiting") and time.monotonic() < deadline:
        time.sleep(0.2)
        status = Template.get_build_status(info, logs_offset=0)
    assert status.status.value == "ready", status
    assert any("background" in entry.message for entry in status.log_entries)


def test_deleting_a_template_removes_its_name(context, templates):
    name = unique("sdk-del")
    Template.build(Template(file_context_path=str(context)).from_base_image().run_cmd("true"), name)
    assert Template.exists(name) is True
    assert Sandbox.delete_snapshot(name) is True
    assert Template.exists(name) is False
