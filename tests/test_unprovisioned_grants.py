"""Grants of a kind the mesh has no provisioner for (an OIDC client and secret, an S3 bucket and
key) on a real node: reported on every apply and by `mesh verify` as not provisioned, with their
kind; a warning (exit 0), never counted as in force; a rotation of one advances only when the
operator says they put it in force by hand (`mesh applied --by-hand`).
"""

from __future__ import annotations

import json

import pytest

from _docker import engine, env_image
from _meshop import Operator

pytestmark = pytest.mark.integration

PROVISIONS = """\
oidc:
  scope: node
  grant: client+secret
  keys: [host, port, client, password, url]
  url: "http://{host}:{port}/realms/mesh"
s3-bucket:
  scope: node
  grant: bucket+key
  keys: [host, port, bucket, user, password, url]
  url: "http://{host}:{port}"
"""

SERVER = """\
name: {name}
artifacts:
  image: {{{{repository: {{repository}}, tag: "{{tag}}"}}}}
listens:
  http: {{{{port: 8080}}}}
provides:
  - {{{{provision: {provision}, listen: http}}}}
containers:
  - name: server
    artifact: image
    health: {{{{http: {{{{listen: http, path: /cgi-bin/env}}}}}}}}
"""

APP = """\
name: app
artifacts:
  image: {{repository: {repository}, tag: "{tag}"}}
requires:
  - {{as: login, provision: oidc}}
  - {{as: files, provision: s3-bucket}}
containers:
  - name: web
    artifact: image
    env:
      OIDC_CLIENT: "${{login.client}}"
      OIDC_SECRET: "${{login.password}}"
      S3_KEY: "${{files.password}}"
"""

OIDC = "oidc/idp@solo/app@solo"
S3 = "s3-bucket/store@solo/app@solo"


@pytest.fixture
def operator(tmp_path):
    image = env_image(engine())
    op = Operator(tmp_path, PROVISIONS, {
        "idp": (SERVER.format(name="idp", provision="oidc"), image),
        "store": (SERVER.format(name="store", provision="s3-bucket"), image),
        "app": (APP, image)}, {"idp@solo": "idp", "store@solo": "store", "app@solo": "app"})
    try:
        op.setup()
        yield op
    finally:
        op.cleanup()


def not_provisioned(report: dict) -> dict:
    return {n["subject"]: n["message"] for n in report["notices"]
            if "not provisioned" in n["message"]}


def test_every_apply_and_verify_say_which_grants_the_mesh_did_not_provision(operator):
    op = operator
    for _ in range(2):  # on every apply, the second (nothing to change) too
        report = op.apply_json()
        assert report["result"] == "applied"  # a warning: the exit code is 0
        said = not_provisioned(report)
        assert set(said) == {"grant app@solo on idp@solo", "grant app@solo on store@solo"}
        assert "grant kind client+secret" in said["grant app@solo on idp@solo"]
        assert "grant kind bucket+key" in said["grant app@solo on store@solo"]
        outcomes = {o["credential"]: o for o in report["provisioned"]["outcomes"]}
        assert {outcomes[c]["status"] for c in (OIDC, S3)} == {"not-provisioned"}
        assert (outcomes[OIDC]["kind"], outcomes[S3]["kind"]) == ("client+secret", "bucket+key")
    assert report["ops"] == []
    text = op.apply().stdout
    assert "not provisioned (warning): client+secret grant of app@solo on idp@solo" in text
    assert "not provisioned (warning): bucket+key grant of app@solo on store@solo" in text

    record = json.loads(op.record.read_text())
    assert record["result"] == "applied"
    assert {g["credential"]: g["kind"] for g in record["not_provisioned"]} == \
        {OIDC: "client+secret", S3: "bucket+key"}
    assert OIDC not in record["granted"] and S3 not in record["granted"]

    verified = op.verify()  # exit 0: a warning
    results = {r["requirement"]: r for r in json.loads(verified.stdout)["results"]
               if r["consumer"] == "app@solo"}
    assert results["login"]["status"] == "not-provisioned"
    assert results["files"]["status"] == "not-provisioned"
    assert "client+secret" in results["login"]["message"]
    assert "bucket+key" in results["files"]["message"]
    text = op.mesh("verify", "out/solo.declaration.json", "--secrets", "ledger.yaml",
                   "--key", op.key).stdout
    assert "2 not provisioned by the mesh (warning)" in text
    op.assert_no_secret_printed()


def test_a_rotation_of_an_unprovisioned_grant_waits_for_the_operators_word(operator):
    op = operator
    op.applied()
    op.mesh("rotate", ".", OIDC)
    op.mesh("plan", ".", "--out", "out")
    op.apply()
    said = op.applied().stdout
    assert f"not provisioned by the mesh: client+secret grant of app@solo on idp@solo ({OIDC})" \
        in said
    assert op.credential(OIDC).pending is not None, "advanced though nothing put it in force"
    wrong = op.applied("--by-hand", "amqp/x@solo/y@solo", check=False)
    assert wrong.returncode == 2 and "not a grant" in wrong.stderr
    op.applied("--by-hand", OIDC)  # the operator set the client secret in the provider by hand
    state = op.credential(OIDC)
    assert state.pending is None and state.active.generation == 2
