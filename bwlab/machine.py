"""Facts of the running kernel that every part of bwlab reads the same way (the lab's host
target and the live tools alike), kept apart from both so that a live tool does not load the
lab to learn its tick."""

from __future__ import annotations

import gzip
import platform
import re
from pathlib import Path


def kernel_hz() -> int | None:
    """CONFIG_HZ of the running kernel, from its config if one is published."""
    candidates = [Path("/proc/config.gz"), Path(f"/boot/config-{platform.release()}")]
    for path in candidates:
        try:
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        match = re.search(r"^CONFIG_HZ=(\d+)", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None
