"""A small Docker Registry HTTP API v2 client: what a tag points at, and copying by digest.

Invariants:
- Nothing is pulled to resolve a tag: a HEAD of the manifest (a GET only when the registry
  sends no Docker-Content-Digest), with the manifest-list / OCI-index Accept headers first, so
  a multi-platform tag pins its index, not one platform's manifest.
- Every request has a timeout; every failure is a RegistryError whose kind is one of
  unreachable | unauthorised | not-found | protocol and whose message names the URL.
- A token-auth challenge (WWW-Authenticate: Bearer) is followed once, anonymously. The only
  credentials sent are those the caller gives for a registry (`auth`: the mesh registry's push
  account, as HTTP basic auth, over verified TLS), to that registry alone.
- A copy moves exact bytes: manifests are PUT as fetched, so the digest at the target is the
  digest at the source; blobs are verified against their digest before upload.
- Loopback registries are spoken to over http, every other registry over https, verified:
  a registry the client was told to `trust` (the mesh's own) against that CA bundle alone (the
  mesh CA), every other one against the system's roots. Nothing is ever sent unverified.
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
from typing import IO, Any, Callable, Optional, Union
from urllib.parse import urljoin

import requests

from resolver import MeshError
from resolver.artifacts import is_loopback, split_repository

INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
IMAGE_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
MANIFEST_ACCEPT = ", ".join(INDEX_TYPES + IMAGE_TYPES)
NONDISTRIBUTABLE = ("foreign", "nondistributable")
DOCKER_HUB_API = "registry-1.docker.io"
DEFAULT_TIMEOUT = (5.0, 60.0)  # connect, read (seconds)
CHUNK = 1 << 20
PROGRESS_SECONDS = 5.0

Progress = Callable[[str], None]
#: A requests timeout: seconds, or (connect, read) seconds.
Timeout = Union[float, tuple[float, float]]
#: A manifest as JSON: read from a registry, so its shape is checked where it is used.
Manifest = dict[str, Any]


class RegistryError(MeshError):
    """A registry request failed. `kind`: unreachable | unauthorised | not-found | protocol."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


def _api_host(registry: str) -> str:
    return DOCKER_HUB_API if registry in ("docker.io", "index.docker.io") else registry


def base_url(registry: str) -> str:
    """The v2 API root of a registry host[:port]."""
    scheme = "http" if is_loopback(registry) else "https"
    return f"{scheme}://{_api_host(registry)}/v2/"


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class RegistryClient:
    """Talks to any number of registries; keeps one anonymous token per (registry, scope)."""

    def __init__(self, timeout: Timeout = DEFAULT_TIMEOUT, session: Optional[requests.Session] = None,
                 trust: Optional[dict[str, str]] = None,
                 auth: Optional[dict[str, tuple[str, str]]] = None):
        self.timeout = timeout
        self.session = session or requests.Session()
        self._tokens: dict[tuple[str, str], str] = {}
        self.trust: dict[str, str] = dict(trust or {})  # registry host:port → CA bundle file
        # registry host:port → (user, password): the mesh registry's push account (basic auth)
        self.auth: dict[str, tuple[str, str]] = dict(auth or {})

    def _verify(self, registry: str) -> Union[str, bool]:
        return self.trust.get(registry, True)

    # ------------------------------------------------------------------ plumbing

    def _request(self, method: str, registry: str, path: str, scope: str, *,
                 what: str, ok: tuple[int, ...] = (200,),
                 headers: Optional[dict[str, str]] = None, **kwargs: Any) -> requests.Response:
        url = path if path.startswith(("http://", "https://")) else urljoin(base_url(registry), path)
        headers = dict(headers or {})
        token = self._tokens.get((registry, scope))
        for attempt in (1, 2):
            if token:
                headers["Authorization"] = f"Bearer {token}"
            elif registry in self.auth:
                kwargs["auth"] = self.auth[registry]
            try:
                response = self.session.request(method, url, headers=headers, timeout=self.timeout,
                                                allow_redirects=True,
                                                verify=self._verify(registry), **kwargs)
            except requests.exceptions.Timeout:
                raise RegistryError("unreachable", f"{what}: {url} did not answer within "
                                    f"{self.timeout[1] if isinstance(self.timeout, tuple) else self.timeout}s") from None
            except requests.exceptions.SSLError as exc:
                trusted = (f"the mesh CA ({self.trust[registry]})" if registry in self.trust
                           else "the system's certificate authorities")
                raise RegistryError("unreachable", f"{what}: {url}: its TLS certificate is not "
                                    f"one {trusted} vouches for ({_reason(exc)})") from None
            except requests.exceptions.ConnectionError as exc:
                raise RegistryError("unreachable", f"{what}: cannot connect to {url} ({_reason(exc)})") from None
            except requests.exceptions.RequestException as exc:
                raise RegistryError("protocol", f"{what}: {url}: {exc}") from None
            if response.status_code == 401 and attempt == 1:
                challenge = response.headers.get("WWW-Authenticate", "")
                if challenge.lower().startswith("bearer"):
                    token = self._fetch_token(registry, challenge, scope, what)
                    self._tokens[(registry, scope)] = token
                    continue
            break
        if response.status_code in ok:
            return response
        if response.status_code in (401, 403):
            who = (f"the account {self.auth[registry][0]} is refused" if registry in self.auth
                   else "anonymous access is refused (the mesh's registry: pass --key, the "
                   "control node's key, to push with the mesh's push account)")
            raise RegistryError("unauthorised", f"{what}: {url} answered {response.status_code} "
                                f"({_registry_message(response)}); {who}")
        if response.status_code == 404:
            raise RegistryError("not-found", f"{what}: {url} answered 404 ({_registry_message(response)})")
        raise RegistryError("protocol", f"{what}: {url} answered {response.status_code} "
                            f"({_registry_message(response)})")

    def _fetch_token(self, registry: str, challenge: str, scope: str, what: str) -> str:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise RegistryError("protocol", f"{what}: {registry} sent a Bearer challenge without a realm")
        params.pop("error", None)
        if scope:
            params["scope"] = scope
        try:
            response = self.session.get(realm, params=params, timeout=self.timeout)
        except requests.exceptions.RequestException as exc:
            raise RegistryError("unreachable", f"{what}: token service {realm}: {_reason(exc)}") from None
        if response.status_code in (401, 403):
            raise RegistryError("unauthorised", f"{what}: token service {realm} refused anonymous access")
        if response.status_code != 200:
            raise RegistryError("protocol", f"{what}: token service {realm} answered {response.status_code}")
        try:
            body = response.json()
            token = body.get("token") or body["access_token"]
            if not isinstance(token, str):
                raise TypeError("not a string")
            return token
        except (ValueError, KeyError, AttributeError, TypeError):
            raise RegistryError("protocol", f"{what}: token service {realm} sent no token") from None

    # ------------------------------------------------------------------ reading

    def ping(self, registry: str) -> None:
        """Check the registry speaks the v2 API (401 counts: it is there, it wants a token)."""
        self._request("GET", registry, "", "", what=f"registry {registry}", ok=(200, 401))

    def resolve(self, repository: str, tag: str) -> str:
        """The digest `repository:tag` points at now. Pulls nothing."""
        registry, path = split_repository(repository)
        scope = f"repository:{path}:pull"
        what = f"resolving {repository}:{tag}"
        try:
            response = self._request("HEAD", registry, f"{path}/manifests/{tag}", scope, what=what,
                                     headers={"Accept": MANIFEST_ACCEPT})
        except RegistryError as error:
            if error.kind != "not-found":
                raise
            # A HEAD answer has no body; a GET says whether the tag or the repository is unknown.
            self._request("GET", registry, f"{path}/manifests/{tag}", scope, what=what,
                          headers={"Accept": MANIFEST_ACCEPT})
            raise
        digest = response.headers.get("Docker-Content-Digest")
        if not digest:  # some registries only say it on GET: hash what they send
            response = self._request("GET", registry, f"{path}/manifests/{tag}", scope, what=what,
                                     headers={"Accept": MANIFEST_ACCEPT})
            digest = sha256_digest(response.content)
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise RegistryError("protocol", f"{what}: the registry answered digest {digest!r}")
        return digest

    def manifest(self, registry: str, path: str, reference: str) -> tuple[str, bytes]:
        """(media type, exact bytes) of a manifest, by tag or digest; a digest is verified."""
        response = self._request("GET", registry, f"{path}/manifests/{reference}", f"repository:{path}:pull",
                                 what=f"fetching manifest {registry}/{path}@{reference}",
                                 headers={"Accept": MANIFEST_ACCEPT})
        body = response.content
        if reference.startswith("sha256:") and sha256_digest(body) != reference:
            raise RegistryError("protocol", f"manifest {registry}/{path}@{reference} does not match its digest")
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in INDEX_TYPES + IMAGE_TYPES:
            media_type = _json(body, f"{registry}/{path}@{reference}").get("mediaType", media_type)
        return media_type, body

    def has_manifest(self, registry: str, path: str, digest: str) -> bool:
        try:
            self._request("HEAD", registry, f"{path}/manifests/{digest}", f"repository:{path}:pull",
                          what=f"checking {registry}/{path}@{digest}", headers={"Accept": MANIFEST_ACCEPT})
            return True
        except RegistryError as error:
            if error.kind == "not-found":
                return False
            raise

    def has_blob(self, registry: str, path: str, digest: str) -> bool:
        try:
            self._request("HEAD", registry, f"{path}/blobs/{digest}", f"repository:{path}:pull",
                          what=f"checking blob {digest[:19]} in {registry}/{path}")
            return True
        except RegistryError as error:
            if error.kind == "not-found":
                return False
            raise

    # ------------------------------------------------------------------ writing

    def put_manifest(self, registry: str, path: str, reference: str, media_type: str, body: bytes) -> str:
        scope = f"repository:{path}:pull,push"
        response = self._request("PUT", registry, f"{path}/manifests/{reference}", scope,
                                 what=f"pushing manifest {registry}/{path}@{reference}", ok=(200, 201),
                                 headers={"Content-Type": media_type}, data=body)
        return response.headers.get("Docker-Content-Digest") or sha256_digest(body)

    def push_blob(self, registry: str, path: str, digest: str,
                  data: Union[bytes, IO[bytes]]) -> None:
        """Upload one blob monolithically (POST for an upload URL, then PUT with the digest)."""
        scope = f"repository:{path}:pull,push"
        what = f"uploading blob {digest[:19]} to {registry}/{path}"
        start = self._request("POST", registry, f"{path}/blobs/uploads/", scope, what=what, ok=(202,))
        location = start.headers.get("Location")
        if not location:
            raise RegistryError("protocol", f"{what}: no upload Location in the answer")
        location = urljoin(base_url(registry), location)
        separator = "&" if "?" in location else "?"
        self._request("PUT", registry, f"{location}{separator}digest={digest}", scope, what=what,
                      ok=(201,), headers={"Content-Type": "application/octet-stream"}, data=data)

    def copy_blob(self, source: str, source_path: str, target: str, target_path: str, digest: str,
                  progress: Progress = lambda line: None) -> bool:
        """Copy one blob unless the target has it; True when bytes were moved. Verified on the way,
        with a progress line at least every PROGRESS_SECONDS while bytes flow."""
        if self.has_blob(target, target_path, digest):
            return False
        response = self._request("GET", source, f"{source_path}/blobs/{digest}", f"repository:{source_path}:pull",
                                 what=f"fetching blob {digest[:19]} from {source}/{source_path}", stream=True)
        hasher = hashlib.sha256()
        received, said = 0, time.monotonic()
        with tempfile.TemporaryFile() as spool:
            try:
                for chunk in response.iter_content(CHUNK):
                    hasher.update(chunk)
                    spool.write(chunk)
                    received += len(chunk)
                    if time.monotonic() - said >= PROGRESS_SECONDS:
                        progress(f"    blob {digest[:19]}: {received} bytes fetched")
                        said = time.monotonic()
            except requests.exceptions.RequestException as exc:
                raise RegistryError("unreachable", f"fetching blob {digest[:19]}: {_reason(exc)}") from None
            if "sha256:" + hasher.hexdigest() != digest:
                raise RegistryError("protocol", f"blob {digest} from {source}/{source_path} does not match its digest")
            spool.seek(0)
            progress(f"    blob {digest[:19]}: {received} bytes fetched and verified, uploading")
            self.push_blob(target, target_path, digest, spool)
        return True

    def copy_image(self, source_repository: str, digest: str, target: str,
                   progress: Progress = lambda line: None) -> str:
        """Copy `source_repository@digest` (an index and every manifest it lists, or one image)
        to registry `target` under the same repository path. Returns the path at the target."""
        source, path = split_repository(source_repository)
        self._copy_manifest(source, path, target, path, digest, progress)
        return path

    def _copy_manifest(self, source: str, source_path: str, target: str, target_path: str,
                       digest: str, progress: Progress) -> None:
        if self.has_manifest(target, target_path, digest):
            progress(f"  {target}/{target_path}@{digest[:19]}: already there")
            return
        media_type, body = self.manifest(source, source_path, digest)
        document = _json(body, f"{source}/{source_path}@{digest}")
        if media_type in INDEX_TYPES or "manifests" in document:
            children = document.get("manifests") or []
            progress(f"  {source_path}@{digest[:19]}: index of {len(children)} manifests")
            for child in children:
                self._copy_manifest(source, source_path, target, target_path, child["digest"], progress)
        else:
            blobs = [document.get("config")] + list(document.get("layers") or [])
            for blob in blobs:
                if not blob or any(word in blob.get("mediaType", "") for word in NONDISTRIBUTABLE):
                    continue  # foreign layers are fetched from their own URLs, never copied
                moved = self.copy_blob(source, source_path, target, target_path, blob["digest"], progress)
                progress(f"  blob {blob['digest'][:19]} ({blob.get('size', '?')} bytes): "
                         f"{'copied' if moved else 'already there'}")
        pushed = self.put_manifest(target, target_path, digest, media_type, body)
        if pushed != digest:
            raise RegistryError("protocol", f"{target} stored {source_path}@{digest} as {pushed}")
        progress(f"  manifest {target_path}@{digest[:19]}: pushed")


def _json(body: bytes, what: str) -> Manifest:
    try:
        document = json.loads(body)
    except ValueError:
        raise RegistryError("protocol", f"manifest {what} is not JSON") from None
    if not isinstance(document, dict):
        raise RegistryError("protocol", f"manifest {what} is not a JSON object")
    return document


def _registry_message(response: requests.Response) -> str:
    try:
        errors = response.json().get("errors") or []
        text = "; ".join(f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors)
        return text or response.reason or "no detail"
    except (ValueError, AttributeError):
        return response.reason or "no detail"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "Temporary failure in name resolution",
                   "No route to host", "Network is unreachable", "timed out"):
        if marker in text:
            return marker.lower()
    return text[:200]
