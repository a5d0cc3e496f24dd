"""Templates through the Python SDK: Template.exists (GET /templates/aliases/{alias}) knows
what Sandbox.create takes as a template: "base" and snapshot ids, and nothing else."""

import uuid

from e2b import Sandbox, Template


def test_exists_knows_base_and_not_an_unknown_name():
    assert Template.exists("base") is True
    assert Template.exists(f"nonexistent-{uuid.uuid4()}") is False


def test_exists_knows_a_snapshot_until_it_is_deleted(new_sandbox):
    snapshot = new_sandbox().create_snapshot()
    try:
        assert Template.exists(snapshot.snapshot_id) is True
    finally:
        assert Sandbox.delete_snapshot(snapshot.snapshot_id) is True
    assert Template.exists(snapshot.snapshot_id) is False
