"""How the control plane finds its broker: each setting named, or derived from the mesh on its
own (the control module's image names only the AMQP address its binding gives)."""

from __future__ import annotations

import pytest

from _meshdir import FIXTURES
from executors.control.broker_settings import settings_from
from executors.control.loading import load_mesh_dir
from resolver import MeshError


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "admin-password"
    path.write_text("not-the-real-one\n")
    return str(path)


def test_an_amqp_address_given_leaves_the_api_and_admin_to_the_mesh(password_file):
    inputs = load_mesh_dir(FIXTURES / "homelab")
    derived = settings_from(inputs, admin_password_file=password_file)
    given = settings_from(inputs, broker="10.9.9.9:5999", admin_password_file=password_file)
    assert (given.amqp.host, given.amqp.port) == ("10.9.9.9", 5999)
    assert given.api == derived.api and given.api.startswith("http://10.44.0.10:")
    assert given.admin == derived.admin
    assert (given.for_nodes.host, given.for_nodes.port) == ("10.9.9.9", 5999)
    assert given.admin_password == "not-the-real-one"


def test_a_mesh_without_a_broker_needs_the_api_named(tmp_path, password_file):
    (tmp_path / "catalogue").mkdir()
    (tmp_path / "catalogue" / "provisions.yaml").write_text("{}\n")
    (tmp_path / "mesh.yaml").write_text("mesh: m\ncatalogue: catalogue\nnodes:\n"
                                        "  a: {address: 10.0.0.1, control: true}\n"
                                        "instances: {}\n")
    inputs = load_mesh_dir(tmp_path)
    with pytest.raises(MeshError, match="--broker-api is needed with --broker"):
        settings_from(inputs, broker="10.0.0.9:5672", admin_password_file=password_file)
    named = settings_from(inputs, broker="10.0.0.9:5672", api="http://10.0.0.9:15672/",
                          admin_password_file=password_file)
    assert named.api == "http://10.0.0.9:15672" and named.admin == "admin"
