"""The entry point: Bulkhead (the connection to a daemon) and its collections: sandboxes,
snapshots, volumes, images."""

from __future__ import annotations

import os
from typing import IO, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._transport import DEFAULT_TIMEOUT, Transport, segment, upload_body
from .models import Health, Image, NetworkSpec, SandboxInfo, Snapshot, Volume, VolumeMount
from .sandbox import Sandbox, network_json
from .streams import ByteStream, PathLike

# An archive to upload: bytes, a binary file object, an iterable of bytes chunks, or a local path.
Upload = Union[bytes, bytearray, memoryview, IO[bytes], Iterable[bytes], PathLike]
SnapshotRef = Union[str, Snapshot]


def _open_upload(data: Upload) -> Tuple[Any, Optional[int], Optional[IO[bytes]]]:
    """(body, length, file to close): a path is opened, anything else goes as upload_body says."""
    if isinstance(data, (str, os.PathLike)):
        f = open(data, "rb")
        return f, os.fstat(f.fileno()).st_size, f
    body, length = upload_body(data)
    return body, length, None


def _snapshot_id(snapshot: SnapshotRef) -> str:
    return snapshot.id if isinstance(snapshot, Snapshot) else snapshot


class Bulkhead:
    """A connection to a bulkhead daemon.

    url: http://HOST:PORT, unix:///path/to/bulkhead.sock or /path/to/bulkhead.sock; default
    BULKHEAD_URL, else the unix socket <state dir>/bulkhead.sock.
    api_key: default BULKHEAD_API_KEY, else the file <state dir>/api-key the daemon wrote.
    state_dir: default BULKHEAD_STATE, else /var/lib/bulkhead.
    timeout: seconds a call may wait for the daemon (None: no limit). Commands wait for as long
    as their own timeout_s, streams that follow (output, watch) without limit.
    preview_domain: the daemon's --preview-domain, for Sandbox.preview_url (default
    BULKHEAD_PREVIEW_DOMAIN, else the daemon's default localhost:7420).

    Thread-safe; keeps idle connections for reuse. close() (or a `with` block) drops them."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, *, state_dir: Optional[str] = None,
                 preview_domain: Optional[str] = None):
        self._transport = Transport(url=url, api_key=api_key, timeout=timeout, state_dir=state_dir)
        self.preview_domain = preview_domain or os.environ.get("BULKHEAD_PREVIEW_DOMAIN") or None
        self.sandboxes = Sandboxes(self)
        self.snapshots = Snapshots(self)
        self.volumes = Volumes(self)
        self.images = Images(self)

    @property
    def url(self) -> str:
        """The daemon's address as the client resolved it."""
        return self._transport.address.url

    def __repr__(self) -> str:
        return "<Bulkhead %s>" % self.url

    def health(self) -> Health:
        """GET /healthz (needs no key)."""
        return Health.from_json(self._transport.json("GET", "/healthz", auth=False))

    def metrics(self) -> str:
        """The Prometheus metrics text."""
        return self._transport.call("GET", "/metrics").body.decode("utf-8")

    def openapi(self) -> Dict[str, Any]:
        """The API description (OpenAPI 3.1) the daemon serves."""
        spec: Dict[str, Any] = self._transport.json("GET", "/openapi.json")
        return spec

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "Bulkhead":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Sandboxes:
    """client.sandboxes"""

    def __init__(self, client: Bulkhead):
        self._client = client
        self._t = client._transport

    def _wrap(self, data: Mapping[str, Any]) -> Sandbox:
        return Sandbox(self._t, SandboxInfo.from_json(data), self._client.preview_domain)

    def create(self, *, image: Optional[str] = None, runtime: Optional[str] = None, cpus: Optional[float] = None,
               memory_mb: Optional[int] = None, disk_mb: Optional[int] = None, pids: Optional[int] = None,
               timeout_s: Optional[int] = None, idle_timeout_s: Optional[int] = None,
               on_timeout: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
               workdir: Optional[str] = None, user: Optional[str] = None, network: Optional[NetworkSpec] = None,
               metadata: Optional[Mapping[str, str]] = None, from_snapshot: Optional[SnapshotRef] = None,
               volumes: Optional[Sequence[Union[VolumeMount, Mapping[str, Any]]]] = None,
               private_preview: Optional[bool] = None, sudo_users: Optional[Sequence[str]] = None,
               **extra: Any) -> Sandbox:
        """Creates a sandbox; every setting is optional (the daemon's defaults: image "host",
        1 CPU, 1024 MB memory, 2048 MB disk, 300 s lifetime, no network). `network` is a mode
        name, a Network or {"mode", "allow", "deny"}; `volumes` VolumeMounts or {"name", "path",
        "read_only"}. With `private_preview` its preview host names need its preview token
        (Sandbox.preview_token, preview_headers()), not only its id. `sudo_users` (names or uids)
        may run `sudo` in it without a password. Use it as a context
        manager to delete it when the block ends."""
        spec: Dict[str, Any] = {}
        for key, value in (("image", image), ("runtime", runtime), ("cpus", cpus), ("memory_mb", memory_mb),
                           ("disk_mb", disk_mb), ("pids", pids), ("timeout_s", timeout_s),
                           ("idle_timeout_s", idle_timeout_s), ("on_timeout", on_timeout), ("workdir", workdir),
                           ("user", user)):
            if value is not None:
                spec[key] = value
        if env is not None:
            spec["env"] = dict(env)
        if metadata is not None:
            spec["metadata"] = dict(metadata)
        if network is not None:
            spec["network"] = network_json(network)
        if from_snapshot is not None:
            spec["from_snapshot"] = _snapshot_id(from_snapshot)
        if volumes is not None:
            spec["volumes"] = [v.to_json() if isinstance(v, VolumeMount) else dict(v) for v in volumes]
        if private_preview is not None:
            spec["preview"] = {"public": not private_preview}
        if sudo_users is not None:
            spec["sudo_users"] = list(sudo_users)
        spec.update(extra)
        return self._wrap(self._t.json("POST", "/v1/sandboxes", json_body=spec))

    def get(self, sandbox_id: str) -> Sandbox:
        """A sandbox by id, with its resource usage."""
        return self._wrap(self._t.json("GET", "/v1/sandboxes/" + segment(sandbox_id)))

    def connect(self, sandbox_id: str) -> Sandbox:
        """A sandbox by id, resumed if it was paused (ready for use)."""
        sandbox = self.get(sandbox_id)
        if sandbox.state == "paused":
            sandbox.resume()
        return sandbox

    def list(self, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """Sandboxes, optionally only those in `state` and whose metadata has all these entries."""
        query: Dict[str, Any] = {"state": state}
        for key, value in (metadata or {}).items():
            query["metadata." + key] = value
        data = self._t.json("GET", "/v1/sandboxes", query=query)
        return [self._wrap(s) for s in data.get("sandboxes", [])]


class Snapshots:
    """client.snapshots (create them with sandbox.snapshot())"""

    def __init__(self, client: Bulkhead):
        self._t = client._transport

    def list(self) -> List[Snapshot]:
        return [Snapshot.from_json(s) for s in self._t.json("GET", "/v1/snapshots").get("snapshots", [])]

    def get(self, snapshot: SnapshotRef) -> Snapshot:
        return Snapshot.from_json(self._t.json("GET", "/v1/snapshots/" + segment(_snapshot_id(snapshot))))

    def delete(self, snapshot: SnapshotRef) -> None:
        """Deletes a snapshot (ConflictError while a sandbox still uses it)."""
        self._t.call("DELETE", "/v1/snapshots/" + segment(_snapshot_id(snapshot)))

    def export(self, snapshot: SnapshotRef) -> ByteStream:
        """The snapshot as a portable .tar.zst stream: save_to(path), iterate, or read()."""
        return ByteStream(self._t.open("GET", "/v1/snapshots/%s/export" % segment(_snapshot_id(snapshot))))

    def import_(self, archive: Upload, *, memory: bool = True) -> Snapshot:
        """Turns an exported archive (a path, bytes, a file object or chunks; streamed) into a
        new snapshot, on this or any other daemon. A memory snapshot's image comes along when this
        daemon holds the exporting daemon's memory image key (else InvalidRequestError
        memory_image_untrusted); memory=False takes its files alone."""
        body, length, opened = _open_upload(archive)
        path = "/v1/snapshots/import" + ("" if memory else "?memory=false")
        try:
            return Snapshot.from_json(self._t.json("POST", path, body=body, length=length,
                                                   headers={"Content-Type": "application/zstd"}))
        finally:
            if opened is not None:
                opened.close()


class Volumes:
    """client.volumes: named, size-capped directories that sandboxes mount and that outlive them."""

    def __init__(self, client: Bulkhead):
        self._t = client._transport

    def create(self, name: str, size_mb: Optional[int] = None) -> Volume:
        body: Dict[str, Any] = {"name": name}
        if size_mb is not None:
            body["size_mb"] = size_mb
        return Volume.from_json(self._t.json("POST", "/v1/volumes", json_body=body))

    def list(self) -> List[Volume]:
        return [Volume.from_json(v) for v in self._t.json("GET", "/v1/volumes").get("volumes", [])]

    def get(self, name: str) -> Volume:
        return Volume.from_json(self._t.json("GET", "/v1/volumes/" + segment(name)))

    def delete(self, name: str) -> None:
        """Deletes a volume and its data (ConflictError while a sandbox lists it)."""
        self._t.call("DELETE", "/v1/volumes/" + segment(name))


class Images:
    """client.images. A tenant's key acts on its own images (and sees the host's); the host's key
    on the host's, or on a tenant's with `tenant=`."""

    def __init__(self, client: Bulkhead):
        self._t = client._transport

    def list(self, *, tenant: Optional[str] = None) -> List[Image]:
        return [Image.from_json(i)
                for i in self._t.json("GET", "/v1/images", query=_tenant_query(tenant)).get("images", [])]

    def get(self, name: str, *, tenant: Optional[str] = None) -> Image:
        """An image by its name or a reference it was pulled as (NotFoundError if none)."""
        return Image.from_json(self._t.json("GET", "/v1/images/" + segment(name), query=_tenant_query(tenant)))

    def pull(self, reference: str, *, username: Optional[str] = None, password: Optional[str] = None,
             platform: Optional[str] = None, tenant: Optional[str] = None) -> Image:
        """Fetches an image from its registry (REGISTRY/REPOSITORY[:TAG][@DIGEST]), with a login
        if given; answers once it is stored."""
        body: Dict[str, Any] = {"image": reference}
        if username is not None or password is not None:
            body["auth"] = {"username": username or "", "password": password or ""}
        if platform is not None:
            body["platform"] = platform
        if tenant is not None:
            body["tenant"] = tenant
        return Image.from_json(self._t.json("POST", "/v1/images/pull", json_body=body, timeout=None))

    def import_(self, name: str, rootfs: Upload, *, content_type: str = "application/octet-stream",
                tenant: Optional[str] = None) -> Image:
        """Makes an image from a tarball of a root filesystem (plain or compressed: gzip, xz,
        zstd, bzip2; a path, bytes, a file object or chunks; streamed)."""
        body, length, opened = _open_upload(rootfs)
        try:
            return Image.from_json(self._t.json("PUT", "/v1/images/" + segment(name), query=_tenant_query(tenant),
                                                body=body, length=length, headers={"Content-Type": content_type},
                                                timeout=None))
        finally:
            if opened is not None:
                opened.close()

    def delete(self, name: str, *, tenant: Optional[str] = None) -> None:
        """Deletes an image, or takes a reference off it; a tenant's image others hold too is only
        let go of (ForbiddenError for the host's image with a tenant's key)."""
        self._t.call("DELETE", "/v1/images/" + segment(name), query=_tenant_query(tenant))


def _tenant_query(tenant: Optional[str]) -> Optional[Dict[str, str]]:
    return None if tenant is None else {"tenant": tenant}

