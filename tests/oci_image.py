"""A container image built here, with no registry: busybox (Debian's static build) as an OCI
image layout in a tar archive, which `ctr images import` takes. Deterministic: the same
busybox gives the same digests."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
APPLETS = ("sh", "sleep", "cat", "true", "nproc")


def _layer(busybox: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("bin", "tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write(out: Path, name: str, cmd: list[str], busybox: Path = BUSYBOX) -> Path:
    """The image `name` (e.g. localhost/bwlab/busybox:1) running `cmd`, as an OCI archive."""
    layer = _layer(busybox)
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]}}  # fmt: skip
    with tarfile.open(out, "w") as tar:
        layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(tar, layer)}
        config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                       **_blob(tar, json.dumps(config, sort_keys=True).encode())}  # fmt: skip
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_desc, "layers": [layer_desc]}  # fmt: skip
        manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                         **_blob(tar, json.dumps(manifest, sort_keys=True).encode()),
                         "platform": {"architecture": "amd64", "os": "linux"},
                         "annotations": {"io.containerd.image.name": name,
                                         "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}  # fmt: skip
        for fname, doc in (("oci-layout", {"imageLayoutVersion": "1.0.0"}),
                           ("index.json", {"schemaVersion": 2, "manifests": [manifest_desc]})):  # fmt: skip
            data = json.dumps(doc).encode()
            info = tarfile.TarInfo(fname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out
