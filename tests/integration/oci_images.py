"""Test images for `image pull`, made from nothing: layer tarballs (including hostile ones),
config and manifest blobs, image indexes, and OCI image layout directories. Paired with
oci_registry.py, which serves them. Standard library only, plus the `zstd` program for zstd
layers (Python 3.11 has no zstd module).

Entries are written into the tar exactly as given: no name is cleaned up, so a layer can carry
`../escape`, `/abs` or a hard link out of the tree, the way a malicious image would."""

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

# Media types (OCI image spec and Docker's image manifest v2 schema 2).
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"

LAYER_TYPES = {
    "oci": {"gzip": OCI_LAYER_GZIP, "zstd": OCI_LAYER_ZSTD, "none": OCI_LAYER},
    # Docker's schema has no zstd type; builders that push zstd into Docker manifests use OCI's.
    "docker": {"gzip": DOCKER_LAYER_GZIP, "zstd": OCI_LAYER_ZSTD, "none": DOCKER_LAYER},
}

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


# --- blobs ---------------------------------------------------------------------------------

def digest_of(data: bytes) -> str:
    """The content digest a registry names a blob by: "sha256:<hex>"."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def descriptor(media_type: str, data: bytes, **extra) -> dict:
    """An OCI content descriptor of `data` (mediaType, digest, size, plus e.g. platform)."""
    return {"mediaType": media_type, "digest": digest_of(data), "size": len(data), **extra}


def canonical_json(value) -> bytes:
    # Indented on purpose: a client that re-serializes a manifest before hashing it gets a
    # different digest, so it cannot pass by accident.
    return json.dumps(value, indent=3, sort_keys=False).encode() + b"\n"


# --- layers --------------------------------------------------------------------------------

@dataclass
class File:
    path: str
    content: bytes = b""
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime: int = 0
    pax_headers: dict = field(default_factory=dict)  # e.g. {"SCHILY.xattr.security.capability": ...}


@dataclass
class Dir:
    path: str
    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    mtime: int = 0


@dataclass
class Symlink:
    path: str
    target: str
    uid: int = 0
    gid: int = 0
    mtime: int = 0


@dataclass
class Hardlink:
    path: str
    target: str  # a path in this layer or an earlier one, as tar names it
    mtime: int = 0


@dataclass
class Whiteout:
    """Deletes `path` of a lower layer: written as DIR/.wh.NAME."""
    path: str


@dataclass
class Opaque:
    """Hides everything lower layers put in directory `path`: written as PATH/.wh..wh..opq."""
    path: str


@dataclass
class Device:
    path: str
    kind: str = "char"  # char | block | fifo
    major: int = 0
    minor: int = 0
    mode: int = 0o666
    uid: int = 0
    gid: int = 0


@dataclass
class Raw:
    """Anything else: a TarInfo written as is (its size is taken from `content`)."""
    info: tarfile.TarInfo
    content: bytes = b""


def hostile_entries() -> list:
    """Entries that try to write outside the root (each must be refused or neutralized)."""
    return [
        File("../escape", b"escaped via ..\n"),
        File("/abs", b"escaped via an absolute name\n"),
        File("a/../../b", b"escaped via a/../..\n"),
        Symlink("link", "/etc"),
        File("link/passwd", b"written through a symlink\n"),
        Hardlink("hard", "../../x"),
    ]


def host_files(paths: list[str]) -> list:
    """Entries (directories, then files of mode 0755) for host programs and the libraries they
    load (as ldd lists them), so a one-layer image can run a shell without a distribution."""
    wanted = set(paths)
    for path in paths:
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        wanted.update(re.findall(r"(/\S+) \(0x", ldd))
    entries, dirs = [], set()
    for path in sorted(wanted):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in dirs:
                dirs.add(parent)
                entries.append(Dir(parent))
        entries.append(File(path.strip("/"), Path(os.path.realpath(path)).read_bytes(), mode=0o755))
    return entries


def _tarinfo(entry) -> tuple[tarfile.TarInfo, bytes]:
    def info(name: str, type_: bytes, mode: int = 0o644, uid: int = 0, gid: int = 0, mtime: int = 0):
        ti = tarfile.TarInfo(name)
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = type_, mode, uid, gid, mtime
        return ti

    if isinstance(entry, File):
        ti = info(entry.path, tarfile.REGTYPE, entry.mode, entry.uid, entry.gid, entry.mtime)
        ti.size = len(entry.content)
        ti.pax_headers = dict(entry.pax_headers)
        return ti, entry.content
    if isinstance(entry, Dir):
        return info(entry.path, tarfile.DIRTYPE, entry.mode, entry.uid, entry.gid, entry.mtime), b""
    if isinstance(entry, Symlink):
        ti = info(entry.path, tarfile.SYMTYPE, 0o777, entry.uid, entry.gid, entry.mtime)
        ti.linkname = entry.target
        return ti, b""
    if isinstance(entry, Hardlink):
        ti = info(entry.path, tarfile.LNKTYPE, mtime=entry.mtime)
        ti.linkname = entry.target
        return ti, b""
    if isinstance(entry, Whiteout):
        parent, name = os.path.split(entry.path.rstrip("/"))
        return info(os.path.join(parent, ".wh." + name), tarfile.REGTYPE), b""
    if isinstance(entry, Opaque):
        return info(os.path.join(entry.path.rstrip("/"), ".wh..wh..opq"), tarfile.REGTYPE), b""
    if isinstance(entry, Device):
        types = {"char": tarfile.CHRTYPE, "block": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}
        ti = info(entry.path, types[entry.kind], entry.mode, entry.uid, entry.gid)
        ti.devmajor, ti.devminor = entry.major, entry.minor
        return ti, b""
    if isinstance(entry, Raw):
        entry.info.size = len(entry.content)
        return entry.info, entry.content
    raise TypeError(f"not a layer entry: {entry!r}")


def make_tar(entries: list) -> bytes:
    """The uncompressed tar of `entries`, in order (PAX format, like Docker's)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in entries:
            ti, content = _tarinfo(entry)
            tar.addfile(ti, io.BytesIO(content) if content else None)
    return out.getvalue()


def compress(data: bytes, compression: str) -> bytes:
    if compression == "gzip":
        return gzip.compress(data, mtime=0)  # mtime 0: the same layer always has the same digest
    if compression == "zstd":
        return subprocess.run(["zstd", "-q", "-c", "-"], input=data, capture_output=True, check=True).stdout
    if compression == "none":
        return data
    raise ValueError(f"unknown compression {compression!r}")


def compression_of(layer: bytes) -> str:
    """"gzip", "zstd" or "none", from the blob's magic bytes."""
    if layer.startswith(GZIP_MAGIC):
        return "gzip"
    if layer.startswith(ZSTD_MAGIC):
        return "zstd"
    return "none"


def uncompressed(layer: bytes) -> bytes:
    """The tar inside a layer blob (what its diff_id is the digest of)."""
    kind = compression_of(layer)
    if kind == "gzip":
        return gzip.decompress(layer)
    if kind == "zstd":
        return subprocess.run(["zstd", "-q", "-d", "-c", "-"], input=layer, capture_output=True, check=True).stdout
    return layer


def make_layer(entries: list, compression: str = "gzip") -> bytes:
    """A layer blob: the tar of `entries`, compressed with "gzip", "zstd" or "none"."""
    return compress(make_tar(entries), compression)


# --- images and indexes --------------------------------------------------------------------

@dataclass
class Image:
    manifest: bytes    # the manifest exactly as served
    media_type: str    # the manifest's media type
    config: bytes
    layers: list[bytes]

    @property
    def digest(self) -> str:
        return digest_of(self.manifest)

    @property
    def config_digest(self) -> str:
        return digest_of(self.config)

    def layer_digests(self) -> list[str]:
        return [digest_of(layer) for layer in self.layers]

    @property
    def blobs(self) -> dict[str, bytes]:
        """Config and layers by digest (a layer used twice appears once)."""
        return {digest_of(b): b for b in [self.config, *self.layers]}

    @property
    def manifests(self) -> dict[str, tuple[str, bytes]]:
        """Every manifest to store, by digest: (media type, bytes)."""
        return {self.digest: (self.media_type, self.manifest)}


@dataclass
class Index:
    manifest: bytes
    media_type: str
    images: list[Image]

    @property
    def digest(self) -> str:
        return digest_of(self.manifest)

    @property
    def blobs(self) -> dict[str, bytes]:
        return {d: b for image in self.images for d, b in image.blobs.items()}

    @property
    def manifests(self) -> dict[str, tuple[str, bytes]]:
        found = {self.digest: (self.media_type, self.manifest)}
        for image in self.images:
            found.update(image.manifests)
        return found


def build_image(layers: list[bytes], config: dict | None = None, media: str = "oci", *,
                architecture: str = "amd64", os_name: str = "linux",
                diff_ids: list[str] | None = None, layer_media_types: list[str] | None = None) -> Image:
    """An image of `layers` (blobs from make_layer) with the runtime `config` (Env, Cmd,
    Entrypoint, WorkingDir, User, ExposedPorts...; None leaves the field out, as the spec allows).
    media: "oci" or "docker" manifests. diff_ids and layer_media_types override what is
    computed, to make images that lie about their layers."""
    if media not in LAYER_TYPES:
        raise ValueError(f"media must be oci or docker, not {media!r}")
    image_config = {
        "created": "2024-01-01T00:00:00Z",
        "architecture": architecture,
        "os": os_name,
        "rootfs": {"type": "layers",
                   "diff_ids": diff_ids if diff_ids is not None else [digest_of(uncompressed(layer)) for layer in layers]},
        "history": [{"created": "2024-01-01T00:00:00Z", "created_by": f"test layer {n}"} for n in range(len(layers))],
    }
    if config is not None:
        image_config["config"] = config
    config_blob = canonical_json(image_config)

    types = layer_media_types or [LAYER_TYPES[media][compression_of(layer)] for layer in layers]
    manifest_type = OCI_MANIFEST if media == "oci" else DOCKER_MANIFEST
    manifest = {
        "schemaVersion": 2,
        "mediaType": manifest_type,
        "config": descriptor(OCI_CONFIG if media == "oci" else DOCKER_CONFIG, config_blob),
        "layers": [descriptor(t, layer) for t, layer in zip(types, layers)],
    }
    return Image(canonical_json(manifest), manifest_type, config_blob, list(layers))


def build_index(entries: list[tuple[Image, dict]], media: str = "oci") -> Index:
    """An OCI image index or Docker manifest list of (image, platform) in the order given.
    Tests list linux/arm64 before linux/amd64, so a client that takes the first one is caught."""
    if media not in LAYER_TYPES:
        raise ValueError(f"media must be oci or docker, not {media!r}")
    index_type = OCI_INDEX if media == "oci" else DOCKER_MANIFEST_LIST
    index = {
        "schemaVersion": 2,
        "mediaType": index_type,
        "manifests": [descriptor(image.media_type, image.manifest, platform=dict(platform))
                      for image, platform in entries],
    }
    return Index(canonical_json(index), index_type, [image for image, _ in entries])


def write_oci_layout(directory, image_or_index: Image | Index, tag: str) -> Path:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) holding the image under
    `tag`, as skopeo's oci: transport or umoci read it."""
    root = Path(directory)
    blob_dir = root / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    everything = dict(image_or_index.blobs)
    everything.update({d: body for d, (_, body) in image_or_index.manifests.items()})
    for digest, data in everything.items():
        (blob_dir / digest.split(":", 1)[1]).write_bytes(data)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    top = descriptor(image_or_index.media_type, image_or_index.manifest,
                     annotations={"org.opencontainers.image.ref.name": tag})
    (root / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [top]}))
    return root
