"""The real RabbitMQ broker of scripts/services.sh (management API + AMQP), for tests.

The administrator `mesh-admin` and its password file come from /var/lib/mesh-test/env. Tests
name their vhosts and accounts with a random prefix and remove them afterwards.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
import requests

from _pg import service_env


def rabbit_admin() -> tuple[str, str, str]:
    """(api base url, admin user, admin password); skips when the broker is not running."""
    env = service_env()
    api = env.get("MESH_TEST_RABBIT_API", "http://127.0.0.1:15672")
    user = env.get("MESH_TEST_RABBIT_USER", "mesh-admin")
    password_file = Path(env.get("MESH_TEST_RABBIT_PASSWORD_FILE", "/var/lib/mesh-test/rabbit-admin"))
    if not password_file.exists():
        pytest.skip("RabbitMQ admin password file is missing (run scripts/services.sh)")
    password = password_file.read_text().strip()
    try:
        response = requests.get(api + "/api/overview", auth=(user, password), timeout=5)
    except requests.ConnectionError:
        pytest.skip(f"RabbitMQ management API is not answering at {api} (run scripts/services.sh)")
    assert response.status_code == 200, f"GET /api/overview as {user}: {response.status_code}"
    return api, user, password


def amqp_address() -> tuple[str, int]:
    url = urlparse(service_env().get("MESH_TEST_RABBIT_AMQP", "amqp://127.0.0.1:5672"))
    return url.hostname or "127.0.0.1", url.port or 5672


def api_address() -> tuple[str, int]:
    url = urlparse(rabbit_admin()[0])
    return url.hostname or "127.0.0.1", url.port or 15672


def cleanup(prefix: str) -> None:
    """Remove the vhosts, accounts and mesh marks (global parameters `mesh-mark:<kind>:<name>`)
    whose names start with `prefix`."""
    api, user, password = rabbit_admin()
    auth = (user, password)
    for parameter in requests.get(api + "/api/global-parameters", auth=auth, timeout=10).json():
        kind, _, name = parameter["name"].partition(":")[2].partition(":")
        if parameter["name"].startswith("mesh-mark:") and name.startswith(prefix):
            requests.delete(f"{api}/api/global-parameters/{quote(parameter['name'], safe='')}",
                            auth=auth, timeout=10)
    for vhost in requests.get(api + "/api/vhosts", auth=auth, timeout=10).json():
        if vhost["name"].startswith(prefix):
            requests.delete(f"{api}/api/vhosts/{quote(vhost['name'], safe='')}", auth=auth,
                            timeout=10)
    for account in requests.get(api + "/api/users", auth=auth, timeout=10).json():
        if account["name"].startswith(prefix):
            requests.delete(f"{api}/api/users/{quote(account['name'], safe='')}", auth=auth,
                            timeout=10)
