"""Who a cgroup belongs to, from its path alone: a systemd unit or slice, a Kubernetes pod and
container (kubelet's cgroupfs and systemd drivers), a Docker, Podman, containerd or CRI-O
container. Nothing here reads the machine; the layouts are those the runtimes create:

  kubelet, cgroupfs driver:  /kubepods[/burstable|/besteffort]/pod<UID>/<container id>
  kubelet, systemd driver:   /kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<UID_>.slice/
                             <cri-containerd|crio|docker>-<container id>.scope
  Docker:                    /docker/<id> (cgroupfs), /system.slice/docker-<id>.scope (systemd)
  Podman:                    .../libpod-<id>.scope, /libpod_parent/libpod-<id>
  containerd (nerdctl):      /system.slice/nerdctl-<id>.scope, /<namespace>/<id>
  systemd:                   .../<name>.service, .scope, .slice
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# a container ID: 64 hex digits (Docker, containerd, CRI-O, Podman)
CONTAINER_ID = r"[0-9a-f]{64}"
POD_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
SCOPE_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", "libpod": "podman",
                  "nerdctl": "containerd"}  # fmt: skip


@dataclass(frozen=True)
class Identity:
    """What the path says; `kind` is "pod", "container", "systemd" or "cgroup"."""

    kind: str
    name: str  # short name to show: a unit, pod/container, or the path's last component
    runtime: str | None = None  # docker, podman, containerd, cri-o
    container_id: str | None = None
    pod_uid: str | None = None
    qos: str | None = None  # guaranteed, burstable, besteffort
    unit: str | None = None  # the systemd unit (service, scope or slice) the path ends in

    def describe(self) -> str:
        """'pod UID (qos)[, container RUNTIME ID]', 'container RUNTIME ID', 'systemd UNIT',
        'cgroup PATH'."""
        container = f"container {self.runtime or '?'} {(self.container_id or '')[:12]}"
        if self.kind == "pod":
            return f"pod {self.pod_uid} ({self.qos})" + (f", {container}" if self.container_id else "")
        if self.kind == "container":
            return container
        if self.kind == "systemd":
            return f"systemd {self.unit}"
        return f"cgroup {self.name}"


def _pod(components: list[str]) -> tuple[str | None, str | None]:
    """(pod UID with dashes, QoS class) if the path is inside a Kubernetes pod."""
    if not components or components[0] not in ("kubepods", "kubepods.slice"):
        return None, None
    qos = "guaranteed"
    for comp in components[1:]:
        for q in ("burstable", "besteffort"):
            if comp in (q, f"kubepods-{q}.slice"):
                qos = q
        match = re.fullmatch(rf"(?:kubepods(?:-(?:burstable|besteffort))?-)?pod({POD_UID})(?:\.slice)?", comp)
        if match:
            return match.group(1).replace("_", "-"), qos
    return None, qos


def identify(path: str) -> Identity:
    """The identity of the cgroup at `path` (relative to its hierarchy's root, '/'-separated)."""
    components = [c for c in path.strip("/").split("/") if c]
    last = components[-1] if components else "/"
    pod_uid, qos = _pod(components)
    container_id = runtime = None
    match = re.fullmatch(rf"({'|'.join(map(re.escape, SCOPE_RUNTIMES))})-({CONTAINER_ID})\.scope", last)
    if match:
        runtime, container_id = SCOPE_RUNTIMES[match.group(1)], match.group(2)
    elif re.fullmatch(CONTAINER_ID, last):
        container_id = last
        parent = components[-2] if len(components) > 1 else ""
        runtime = ("docker" if parent == "docker" else None if pod_uid else
                   "containerd" if parent else None)  # fmt: skip
    elif (m := re.fullmatch(rf"libpod-({CONTAINER_ID})", last)) is not None:
        runtime, container_id = "podman", m.group(1)
    unit = last if re.search(r"\.(service|scope|slice)$", last) else None
    if pod_uid:
        name = f"pod {pod_uid[:8]}" + (f"/{container_id[:12]}" if container_id else "")
        return Identity("pod", name, runtime, container_id, pod_uid, qos, unit)
    if container_id:
        return Identity("container", f"{runtime or 'container'} {container_id[:12]}", runtime, container_id,
                        unit=unit)  # fmt: skip
    if unit:
        return Identity("systemd", unit, unit=unit)
    return Identity("cgroup", path if path.startswith("/") else "/" + path)
