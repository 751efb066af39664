"""Real registries for tests: a docker-registry process of the test's own, and images pushed to it.

Each RegistryProcess is Debian's docker-registry (distribution v2) with its own config and
storage in a temporary directory, on a free loopback port, no auth; it is stopped by its pid.
Images are pushed over the HTTP API with plain `requests` (independent of executors/control/registry.py,
the code under test), or through the Docker Engine (`docker import` + `docker push`) when one runs.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Optional

import requests

REGISTRY_BINARY = shutil.which("docker-registry")
DOCKER_BINARY = shutil.which("docker")
ENV_FILE = Path("/var/lib/mesh-test/env")
SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"


def service_env() -> dict[str, str]:
    """KEY=value lines written by scripts/services.sh, overridden by the process environment."""
    values: dict[str, str] = {}
    if ENV_FILE.exists():
        for line in ENV_FILE.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.startswith("#"):
                values[key.strip()] = value.strip()
    values.update({k: v for k, v in os.environ.items() if k.startswith("MESH_TEST_")})
    return values


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port() -> int:
    """A loopback port nothing listens on (bound then released; nothing else takes it that fast)."""
    return free_port()


class RegistryProcess:
    """docker-registry on 127.0.0.1:<free port> with storage under `directory`."""

    def __init__(self, directory: Path, port: Optional[int] = None, auth: str = ""):
        self.directory = Path(directory)
        self.auth = auth  # an `auth:` section of the registry's config, indented as at top level
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 20.0) -> "RegistryProcess":
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.directory / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n"
            + self.auth
        )
        log = open(self.directory / "registry.log", "ab")
        self.process = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited {self.process.returncode}: "
                                   f"{(self.directory / 'registry.log').read_text()[-2000:]}")
            try:
                if requests.get(f"http://{self.address}/v2/", timeout=1).status_code in (200, 401):
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry on {self.address} did not answer within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(payload: bytes) -> tuple[bytes, str]:
    """A gzipped tar holding /payload; returns (blob, diff id of the uncompressed tar)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("payload")
        info.size = len(payload)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(payload))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, mtime=0), _digest(tar_bytes)


def _put_blob(address: str, path: str, blob: bytes) -> str:
    digest = _digest(blob)
    if requests.head(f"http://{address}/v2/{path}/blobs/{digest}", timeout=10).status_code == 200:
        return digest
    start = requests.post(f"http://{address}/v2/{path}/blobs/uploads/", timeout=10)
    assert start.status_code == 202, start.text
    location = start.headers["Location"]
    if location.startswith("/"):
        location = f"http://{address}{location}"
    done = requests.put(location + ("&" if "?" in location else "?") + f"digest={digest}", data=blob,
                        headers={"Content-Type": "application/octet-stream"}, timeout=30)
    assert done.status_code == 201, done.text
    return digest


def push_image(address: str, path: str, tag: Optional[str], payload: bytes) -> str:
    """Push a one-layer image holding `payload` as path:tag (by digest when tag is None)."""
    layer, diff_id = _layer(payload)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": SCHEMA2,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "size": len(config), "digest": _put_blob(address, path, config)},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer), "digest": _put_blob(address, path, layer)}],
    }, indent=3).encode()
    return _put_manifest(address, path, tag or _digest(manifest), SCHEMA2, manifest)


def push_index(address: str, path: str, tag: str, payloads: dict[str, bytes]) -> tuple[str, list[str]]:
    """Push one image per architecture and a manifest list over them as path:tag.
    Returns (index digest, child digests)."""
    children = []
    entries = []
    for arch, payload in sorted(payloads.items()):
        child = push_image(address, path, None, payload)
        body = requests.get(f"http://{address}/v2/{path}/manifests/{child}",
                            headers={"Accept": SCHEMA2}, timeout=10).content
        children.append(child)
        entries.append({"mediaType": SCHEMA2, "size": len(body), "digest": child,
                        "platform": {"architecture": arch, "os": "linux"}})
    index = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_LIST, "manifests": entries}).encode()
    return _put_manifest(address, path, tag, MANIFEST_LIST, index), children


def _put_manifest(address: str, path: str, reference: str, media_type: str, body: bytes) -> str:
    response = requests.put(f"http://{address}/v2/{path}/manifests/{reference}", data=body,
                            headers={"Content-Type": media_type}, timeout=10)
    assert response.status_code == 201, response.text
    return response.headers["Docker-Content-Digest"]


def served_digest(address: str, path: str, reference: str) -> Optional[str]:
    """The digest the registry serves for path@reference, or None (404)."""
    response = requests.head(f"http://{address}/v2/{path}/manifests/{reference}", timeout=10,
                             headers={"Accept": f"{MANIFEST_LIST}, {SCHEMA2}"})
    return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None


# --------------------------------------------------------------------------- through the engine


def docker_host() -> Optional[str]:
    """The test Docker Engine's address when it answers, else None."""
    if DOCKER_BINARY is None:
        return None
    host = service_env().get("MESH_TEST_DOCKER_HOST", "unix:///var/run/docker.sock")
    probe = subprocess.run([DOCKER_BINARY, "-H", host, "version", "--format", "{{.Server.Version}}"],
                           capture_output=True, text=True, timeout=30)
    return host if probe.returncode == 0 else None


def docker(host: str, *args: str, stdin: Optional[bytes] = None) -> str:
    result = subprocess.run([DOCKER_BINARY, "-H", host, *args], input=stdin, capture_output=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode()


def docker_import_and_push(host: str, address: str, path: str, tag: str, payload: bytes) -> str:
    """`docker import` a root filesystem holding /payload, push it as address/path:tag; its digest."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("payload")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    reference = f"{address}/{path}:{tag}"
    docker(host, "import", "-", reference, stdin=raw.getvalue())
    docker(host, "push", reference)
    digest = served_digest(address, path, tag)
    docker(host, "image", "rm", reference)
    assert digest, f"{reference} not served after docker push"
    return digest


# --------------------------------------------------------------------------- token auth


class TokenService:
    """A token service for docker-registry's `auth: token` scheme, on a free loopback port.

    It issues anonymous RS256 tokens (signed by `cryptography`, certificate in the x5c header)
    granting what the scope asks, except for repositories whose path contains "forbidden": 401.
    `requests` counts the tokens asked for, so a test can see the challenge was followed.
    """

    SERVICE = "mesh-test-registry"
    ISSUER = "mesh-test-issuer"

    def __init__(self, directory: Path):
        import datetime
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.x509.oid import NameOID

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mesh-test token signer")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        self.bundle = directory / "token-signer.crt"
        self.bundle.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        der = self.certificate.public_bytes(serialization.Encoding.DER)
        self.requests: list[str] = []
        service = self

        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        def token(scope: str) -> str:
            access = []
            if scope:
                kind, name, actions = scope.split(":", 2)
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
            issued = int(time.time())
            header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
            claims = {"iss": self.ISSUER, "sub": "", "aud": self.SERVICE, "exp": issued + 300,
                      "nbf": issued - 10, "iat": issued, "jti": str(issued) + scope, "access": access}
            signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
            signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
            return f"{signing_input}.{b64(signature)}"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the stdlib's name)
                from urllib.parse import parse_qs, urlparse
                query = parse_qs(urlparse(self.path).query)
                scope = (query.get("scope") or [""])[0]
                service.requests.append(scope)
                if "forbidden" in scope:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"token": token(scope)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def registry_auth(self) -> str:
        return ("auth:\n  token:\n"
                f"    realm: {self.realm}\n    service: {self.SERVICE}\n"
                f"    issuer: {self.ISSUER}\n    rootcertbundle: {self.bundle}\n")

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
