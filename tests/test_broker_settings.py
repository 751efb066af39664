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


def test_an_amqp_address_given_leaves_the_api_and_admin_to_the_mesh(password_file, tmp_path):
    import shutil

    from executors.control.ca import init_ca

    shutil.copytree(FIXTURES / "homelab", tmp_path / "fixtures" / "homelab")
    (tmp_path / "catalogue").symlink_to(FIXTURES.parent / "catalogue")  # its ../../catalogue
    inputs = load_mesh_dir(tmp_path / "fixtures" / "homelab")
    init_ca(inputs.mesh_dir, inputs.mesh)  # lavinmq's management listen is TLS: verified
    derived = settings_from(inputs, admin_password_file=password_file, plain=True)
    given = settings_from(inputs, broker="10.9.9.9:5999", admin_password_file=password_file,
                          plain=True)
    assert (given.amqp.host, given.amqp.port) == ("10.9.9.9", 5999)
    assert given.api == derived.api and given.api.startswith("https://10.44.0.10:")
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
        settings_from(inputs, broker="10.0.0.9:5672", admin_password_file=password_file,
                      plain=True)
    named = settings_from(inputs, broker="10.0.0.9:5672", api="http://10.0.0.9:15672/",
                          admin_password_file=password_file, plain=True)
    assert named.api == "http://10.0.0.9:15672" and named.admin == "admin"


def test_the_broker_is_tls_against_the_mesh_ca_unless_plain_is_asked_for(password_file,
                                                                         tmp_path):
    import shutil

    from executors.control.ca import ca_cert_path, init_ca

    shutil.copytree(FIXTURES / "homelab", tmp_path / "fixtures" / "homelab")
    (tmp_path / "catalogue").symlink_to(FIXTURES.parent / "catalogue")  # its ../../catalogue
    inputs = load_mesh_dir(tmp_path / "fixtures" / "homelab")
    with pytest.raises(MeshError, match="mesh ca init .* first \\(or --broker-plain"):
        settings_from(inputs, admin_password_file=password_file)
    # plain AMQP asked for: the management API (https: lavinmq's listen is TLS) still is not
    with pytest.raises(MeshError, match="management API https://10.44.0.10:\\d+ is https, "
                                        "verified against it: `mesh ca init"):
        settings_from(inputs, admin_password_file=password_file, plain=True)
    http = settings_from(inputs, api="http://10.44.0.10:15672",
                         admin_password_file=password_file, plain=True)
    assert not http.tls.enabled and http.api_ca_pem is None
    init_ca(inputs.mesh_dir, inputs.mesh)
    plain = settings_from(inputs, admin_password_file=password_file, plain=True)
    assert not plain.tls.enabled
    assert plain.api_ca_pem == ca_cert_path(inputs.mesh_dir, inputs.mesh).read_text()
    assert plain.api_ca_pem not in repr(plain)
    settings = settings_from(inputs, admin_password_file=password_file)
    assert settings.api_ca_pem == settings.tls.ca_pem
    tls = settings.tls
    assert tls.enabled and tls.scheme == "amqps"
    assert tls.ca_pem == ca_cert_path(inputs.mesh_dir, inputs.mesh).read_text()
    assert tls.ca_pem not in repr(tls)
    context = tls.context()
    assert context.check_hostname and context.verify_mode.name == "CERT_REQUIRED"
