"""The control loop's kept broker settings (executors/control/control_settings.py): whatever
`mesh init` keeps reads back the same (the container's loop, a host service and a restored
control node use the same broker), and the admin's password is never in the file's text."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from executors.common.keys import create_node_key
from executors.control.control_settings import (KeptBroker, kept_admin_password,
                                                kept_from_options, read_kept, write_kept)

_KEY_DIR = tempfile.mkdtemp(prefix="kept-props-")
_KEY = Path(_KEY_DIR) / "control.key"
_PUBLIC = create_node_key(_KEY)

text = st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",)), min_size=1,
                                    max_size=30))
password = st.text(st.characters(blacklist_categories=("Cs", "Z", "C")), min_size=8,
                   max_size=40)


@given(broker=text, api=text, admin=text, for_nodes=text, plain=st.booleans(),
       secret=st.one_of(st.none(), password))
def test_what_is_kept_reads_back_and_the_password_is_never_in_the_clear(
        broker, api, admin, for_nodes, plain, secret):
    with tempfile.TemporaryDirectory() as scratch:
        password_file = None
        if secret is not None:
            password_file = Path(scratch) / "admin.pass"
            password_file.write_text(secret + "\n", encoding="utf-8")
        kept = kept_from_options(broker=broker, api=api, admin=admin,
                                 admin_password_file=str(password_file) if password_file
                                 else None, for_nodes=for_nodes, plain=plain,
                                 control_public_key=_PUBLIC)
        path = Path(scratch) / ".control" / "settings.json"
        write_kept(path, kept)
        back = read_kept(path)
        assert back == kept
        assert back == KeptBroker(broker, api, admin, back.broker_admin_password_sealed,
                                  for_nodes, plain)
        if secret is None:
            assert back.broker_admin_password_sealed is None
        else:
            assume(not any(secret in (given or "") for given in (broker, api, admin, for_nodes)))
            assert secret not in path.read_text(encoding="utf-8")
            assert kept_admin_password(back, str(_KEY), path) == secret.strip()
