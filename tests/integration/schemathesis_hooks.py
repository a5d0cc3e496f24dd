"""Hooks for test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS): request bodies of the
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
