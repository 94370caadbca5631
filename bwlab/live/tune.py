"""The one place bwlab writes to a live cgroup: a group's burst (cpu.max.burst on v2,
cpu.cfs_burst_us on v1). A value is checked against the kernel's rules first (0 <= burst <=
quota; a group without a quota has no burst), written, read back and verified; on any failure
the old value is written back and the error says what happened. The value it replaced is kept
in the cache (tune/<group>.json) for --revert.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.live.groups import LiveGroup, read_limit
from bwlab.paths import cache_root


def burst_file(group: LiveGroup) -> Path:
    return group.dir / ("cpu.max.burst" if group.hierarchy.version == 2 else "cpu.cfs_burst_us")


def _state(group: LiveGroup) -> Path:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", group.path.strip("/")) or "root"
    return cache_root() / "tune" / f"v{group.hierarchy.version}-{name}.json"


def _read(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise BwlabError(
            f"{path}: no such file (the kernel has no CPU burst, Linux < 5.14, or the group is gone)"
        ) from None
    except OSError as exc:
        raise BwlabError(f"cannot read {path}: {exc.strerror}") from exc
    if not text.isdigit():
        raise BwlabError(f"{path}: expected a number of microseconds, got {text!r}")
    return int(text)


def _write(path: Path, value: int) -> None:
    try:
        with path.open("w") as fh:
            fh.write(str(value))
    except PermissionError:
        raise BwlabError(f"no permission to write {path} (run as root)") from None
    except OSError as exc:
        raise BwlabError(f"the kernel refused {value} in {path}: {exc.strerror}") from exc


def check_burst(group: LiveGroup, value_us: int) -> None:
    """Raise what the kernel would refuse, before anything is written."""
    limit = read_limit(group.hierarchy, group.dir)
    if value_us < 0:
        raise BwlabError(f"burst {value_us} us: must be >= 0")
    if value_us and limit.quota_us is None:
        raise BwlabError(f"{group.path} has no quota: a burst needs one")
    if limit.quota_us is not None and value_us > limit.quota_us:
        raise BwlabError(f"burst {value_us} us is above the quota {limit.quota_us} us of {group.path} "
                         "(the kernel allows at most the quota)")  # fmt: skip


def set_burst(group: LiveGroup, value_us: int) -> tuple[int, int]:
    """Write `value_us` as the group's burst and verify it: (old, new). The first tune of a
    group remembers the value it found, for revert()."""
    check_burst(group, value_us)
    path = burst_file(group)
    old = _read(path)
    try:
        _write(path, value_us)
        now = _read(path)
        if now != value_us:
            raise BwlabError(f"{path} reads {now} after writing {value_us}")
    except BwlabError:
        try:
            if _read(path) != old:
                _write(path, old)
        except BwlabError as exc:
            raise BwlabError(f"writing {path} failed and so did restoring {old}: {exc}") from exc
        raise
    state = _state(group)
    if not state.exists():
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"path": group.path, "file": str(path), "burst_us_before": old,
                                     "date": dt.datetime.now(dt.UTC).isoformat()}) + "\n")  # fmt: skip
    return old, value_us


# who writes a group's quota, by what its path says it is (identity.py)
OWNERS = {"container": "its container runtime (runc update, docker update, a pod's in-place resize)",
          "pod": "the kubelet (a pod's in-place resize)", "systemd": "systemd (CPUQuota=)",
          "cgroup": "whoever sets its quota"}  # fmt: skip


def quota_floor(group: LiveGroup, burst_us: int) -> str | None:
    """What a burst costs the group's owner: the kernel refuses a quota below the burst (EINVAL,
    the quota stays as it was), so a resize below it fails until the burst is lowered first.
    None for no burst."""
    if burst_us <= 0:
        return None
    owner = OWNERS.get(group.identity.kind, OWNERS["cgroup"])
    return (f"while its burst is {burst_us} us the kernel refuses a quota below {burst_us} us for {group.path} "
            f"(EINVAL; the quota stays): a lower one from {owner} fails. Safe: bwlab-nri (nri/) lowers the burst "
            f"before the runtime writes a lower quota; by hand, lower the burst first "
            f"(bwlab tune {group.path} --burst 0, or --revert)")  # fmt: skip


def revert(group: LiveGroup) -> tuple[int, int]:
    """Write back the burst the first tune found: (value replaced, value restored)."""
    state = _state(group)
    try:
        saved = json.loads(state.read_text())
        before = int(saved["burst_us_before"])
    except FileNotFoundError:
        raise BwlabError(f"bwlab tune never changed {group.path} (nothing to revert)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BwlabError(f"{state}: damaged ({exc})") from None
    current = _read(burst_file(group))
    set_burst(group, before)
    state.unlink()
    return current, before
