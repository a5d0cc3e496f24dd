"""Hooks for test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS): registry references kept on
loopback (below), and request bodies of the
archive media types the spec names (image and snapshot imports, archive uploads) go out as
the raw bytes schemathesis generated, as application/octet-stream bodies do."""

import schemathesis

ARCHIVE_TYPES = ("application/zstd", "application/x-tar", "application/gzip", "application/x-xz",
                 "application/x-bzip2")


@schemathesis.serializer(*ARCHIVE_TYPES)
def raw_bytes(ctx, value):
    if isinstance(value, bytes):
        return {"data": value}
    return {"data": str(value).encode()}


# Registry references in generated bodies (a create's or a pull's "image", a push's "target")
# go to a closed port on loopback: schemathesis makes up host names, and no test may send
# traffic, DNS lookups included, anywhere but loopback. Only a name with a '/' can name a registry.
LOOPBACK_REGISTRY = "127.0.0.1:1/"


@schemathesis.hook
def map_body(ctx, body):
    if isinstance(body, dict):
        for key in ("image", "target"):
            value = body.get(key)
            if isinstance(value, str) and "/" in value:
                body[key] = LOOPBACK_REGISTRY + value.rsplit("/", 1)[-1]
    return body
