#!/usr/bin/env python3
"""Image pull figures (issue 22). Prints figures; asserts nothing.

A registry on loopback (tests/integration/oci_registry.py) serves an image of a small base layer
(a shell and cat) and --layers layers of --layer-mib MiB of random bytes each (gzip, or
uncompressed with --compression none). In the same run:
  1. the registry's own delivery rate: every blob fetched over plain HTTP by this script (and by
     `skopeo copy` to an OCI directory when skopeo is installed), the rate any client is held to;
  2. `bulkhead image pull` through the API (NDJSON progress, timed per event): the download (first
     byte asked to last layer stored, digests checked on the fly) as MB/s, the unpack of the layers
     into the image's tree, and the whole call. Each run starts from an empty store (image rm + gc);
  3. a create from the pulled image to its first exec output (cold: --warm-pool 0; pooled: a
     second daemon with --warm-pool REF=2, each create waiting for a full pool), beside the same
     for the host image;
  4. `bulkhead build` of a Dockerfile FROM the pulled image (a COPY of a context file, a RUN
     writing a file): cold (no step cached), with a warm cache (every step cached, the image
     only named again), and with the COPY's source changed (that step and the RUN after it).

    python3 bench/images.py [--build build] [--runs 3] [--layers 3] [--layer-mib 64] [--compression gzip]
"""
import argparse
import http.client
import io
import tarfile
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from startup import BulkheadApi, Daemon, percentile  # noqa: E402  (same folder)
from oci_images import File, build_image, host_files, make_layer  # noqa: E402
from oci_registry import OciRegistry  # noqa: E402


def median(values):
    return percentile(sorted(values), 50) if values else float("nan")


def raw_download_s(registry: OciRegistry, repo: str, digests: list[str]) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=120)
    started = time.perf_counter()
    for digest in digests:
        connection.request("GET", f"/v2/{repo}/blobs/{digest}")
        response = connection.getresponse()
        while response.read(1 << 20):
            pass
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def skopeo_copy_s(registry: OciRegistry, ref: str) -> float | None:
    if not shutil.which("skopeo"):
        return None
    target = tempfile.mkdtemp(prefix="bulkhead-bench-skopeo-")
    try:
        started = time.perf_counter()
        subprocess.run(["skopeo", "copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{target}:x"],
                       check=True, capture_output=True)
        return time.perf_counter() - started
    finally:
        shutil.rmtree(target, ignore_errors=True)


def timed_pull(api: BulkheadApi, ref: str) -> dict:
    """One pull with NDJSON progress: the time of each kind of event, from the call's start."""
    started = time.perf_counter()
    response = api._send("POST", "/v1/images/pull", {"image": ref}, "application/x-ndjson")
    marks = {}
    while line := response.readline():
        if not line.strip():
            continue
        event = json.loads(line)
        now = time.perf_counter() - started
        status = event["status"]
        marks.setdefault(f"first_{status}", now)
        marks[f"last_{status}"] = now
        if status == "error":
            raise RuntimeError(f"pull failed: {event}")
    response.read()
    return marks


def build_s(port: int, api_key: str, context: bytes, **params) -> float:
    """One POST /v1/images/build, timed to its answer; the build must succeed."""
    query = urllib.parse.urlencode(params)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    conn.request("POST", "/v1/images/build?" + query, body=context,
                 headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/x-tar"})
    response = conn.getresponse()
    body = response.read()
    elapsed = time.perf_counter() - started
    conn.close()
    if response.status != 201:
        raise RuntimeError(f"build failed: {response.status} {body[:500]!r}")
    return elapsed


def build_context(ref: str, payload: bytes) -> bytes:
    dockerfile = f"FROM {ref}\nCOPY payload /srv/payload\nRUN cat /srv/payload > /srv/copy\nCMD [\"/bin/cat\", \"/srv/copy\"]\n"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("payload", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def wait_for_pool(api: BulkheadApi, size: int) -> None:
    deadline = time.monotonic() + 120
    while api.metric("bulkhead_warm_pool_ready") < size:
        if time.monotonic() > deadline:
            raise RuntimeError("the warm pool did not fill")
        time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--layer-mib", type=int, default=64)
    parser.add_argument("--compression", default="gzip", choices=["gzip", "zstd", "none"])
    args = parser.parse_args()

    layers = [make_layer(host_files(["/bin/sh", "/bin/cat"]), args.compression)]
    for i in range(args.layers):
        layers.append(make_layer([File(f"data/{i}", os.urandom(args.layer_mib << 20))], args.compression))
    image = build_image(layers, {"Cmd": ["/bin/cat", "/etc/hostname"]})
    total = sum(len(blob) for blob in layers)
    print(f"image: {len(layers)} layers, {total / 2**20:.1f} MiB as stored ({args.compression}), "
          f"{args.runs} runs, medians")

    with OciRegistry() as registry:
        registry.put_image("bench/app", "1", image)
        ref = f"{registry.host}/bench/app:1"
        digests = image.layer_digests()
        raw = [raw_download_s(registry, "bench/app", digests) for _ in range(args.runs)]
        skopeo = [s for s in (skopeo_copy_s(registry, ref) for _ in range(args.runs)) if s is not None]

        daemon = Daemon(ROOT / args.build, ("--warm-pool", "0", "--insecure-registry", "127.0.0.1"))
        daemon.start()
        try:
            api = BulkheadApi(daemon.port, daemon.api_key)
            pulls = []
            for _ in range(args.runs):
                if pulls:
                    api.call("DELETE", "/v1/images/" + urllib.parse.quote(ref, safe=""), expect=204)
                api.call("POST", "/v1/images/gc")
                pulls.append(timed_pull(api, ref))
            first_output = {"pulled": [], "host": [], "pooled": []}
            for _ in range(args.runs):
                for name, image_name in (("pulled", ref), ("host", "host")):
                    started = time.perf_counter()
                    sandbox = api.call("POST", "/v1/sandboxes", {"image": image_name}, expect=201)["id"]
                    first, _ = api.exec_until_first_stdout(sandbox, ["/bin/sh", "-c", "echo ready"])
                    first_output[name].append(first - started)
                    api.delete_sandbox(sandbox)
            builds = {"cold": [], "warm": [], "changed": []}
            for run in range(args.runs):
                context = build_context(ref, f"payload {run}\n".encode() * 4096)
                builds["cold"].append(build_s(daemon.port, daemon.api_key, context, tag="bench-build"))
                builds["warm"].append(build_s(daemon.port, daemon.api_key, context, tag="bench-build"))
                changed = build_context(ref, f"payload {run} changed\n".encode() * 4096)
                builds["changed"].append(build_s(daemon.port, daemon.api_key, changed, tag="bench-build"))
            api.close()
        finally:
            daemon.stop()

        pooled_daemon = Daemon(ROOT / args.build, ("--warm-pool", "0", "--warm-pool", f"{ref}=2",
                                                   "--insecure-registry", "127.0.0.1"))
        pooled_daemon.start()
        try:
            api = BulkheadApi(pooled_daemon.port, pooled_daemon.api_key)
            for _ in range(args.runs):
                wait_for_pool(api, 2)
                started = time.perf_counter()
                sandbox = api.call("POST", "/v1/sandboxes", {"image": ref}, expect=201)["id"]
                first, _ = api.exec_until_first_stdout(sandbox, ["/bin/sh", "-c", "echo ready"])
                first_output["pooled"].append(first - started)
                api.delete_sandbox(sandbox)
            api.close()
        finally:
            pooled_daemon.stop()

    mb = total / 1e6
    download = [p["last_downloaded"] - p["first_resolved"] for p in pulls]
    unpack = [p["last_done"] - p["first_unpacking"] for p in pulls]
    whole = [p["last_done"] for p in pulls]
    rows = [("registry, raw HTTP GET of the blobs", median(raw), f"{mb / median(raw):.0f} MB/s")]
    if skopeo:
        rows.append(("skopeo copy to an OCI dir", median(skopeo), f"{mb / median(skopeo):.0f} MB/s"))
    else:
        rows.append(("skopeo copy to an OCI dir", float("nan"), "skopeo not installed"))
    rows += [
        ("bulkhead pull: download, digests checked", median(download), f"{mb / median(download):.0f} MB/s "
         f"({100 * median(raw) / median(download):.0f}% of raw" +
         (f", {100 * median(skopeo) / median(download):.0f}% of skopeo)" if skopeo else ")")),
        ("bulkhead pull: unpack of the layers", median(unpack), ""),
        ("bulkhead pull: the whole call", median(whole), ""),
        ("create -> first output, pulled image (cold)", median(first_output["pulled"]), ""),
        ("create -> first output, pulled image (pooled)", median(first_output["pooled"]), ""),
        ("create -> first output, host image (cold)", median(first_output["host"]), ""),
        ("build: cold (2 file steps, export)", median(builds["cold"]), ""),
        ("build: warm cache (every step cached)", median(builds["warm"]), ""),
        ("build: COPY source changed (2 steps rerun)", median(builds["changed"]), ""),
    ]
    width = max(len(name) for name, _, _ in rows)
    for name, seconds, note in rows:
        print(f"  {name:<{width}}  {seconds * 1000:9.1f} ms  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
