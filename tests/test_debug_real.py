"""The series on a debug kernel (lockdep, KCSAN, atomic-sleep checks, CPU hotplug): a short
cgstress run in a guest leaves no BUG/WARNING/lockdep splat on the console."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bwlab.paths import DEBUG_CONFIG

from conftest import built_kernel, bwlab

# last: the debug guest's stress (and, cold, the debug kernel's build) leaves this VM's timer
# interrupts late for minutes after it ends, which the eBPF tests' bounds, measured on a quiet
# machine, do not allow for (docs/testing.md)
pytestmark = [pytest.mark.guest, pytest.mark.last]


@pytest.fixture(scope="module")
def debug_key() -> str:
    return built_kernel("--config", str(DEBUG_CONFIG), timeout=5400)


def test_debug_kernel_has_the_checkers(debug_key: str, tmp_path: Path) -> None:
    from bwlab.kernel import build as kernel_build

    (image,) = [i for i in kernel_build.list_images() if i.key == debug_key]
    config = (image.bzimage.parent / "config").read_text()
    for sym in ("CONFIG_PROVE_LOCKING=y", "CONFIG_KCSAN=y", "CONFIG_DEBUG_ATOMIC_SLEEP=y", "CONFIG_HOTPLUG_CPU=y"):
        assert sym in config
    assert image.flavor == "debug" and image.patches


def test_stress_on_debug_kernel_is_clean(debug_key: str, tmp_path: Path) -> None:
    proc = bwlab("run", "stress", "--target", "guest", "--kernel", debug_key, "--duration", "60",
                 "--out", str(tmp_path), timeout=1200)  # fmt: skip
    doc = json.loads((tmp_path / "stress-guest-patched-debug.json").read_text())
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and doc["meta"]["splats"] == []
    metrics = doc["cases"][0]["reps"][0]["metrics"]
    assert metrics["stress_violations"] == 0
    assert metrics["stress_invalid_writes"] > 20 and metrics["stress_einval_kept"] == metrics["stress_invalid_writes"]
    assert metrics["stress_hotplug"] > 5 and metrics["stress_hotplug_errors"] == 0
    assert metrics["stress_mkdir"] > 10 and metrics["stress_moves"] > 50
    assert metrics["stress_lags_writes"] > 10  # latency-aware groups churned too (the series has LAGS)
    console = Path(doc["meta"]["console_log"]).read_text()
    assert "kcsan" in console.lower() or "KCSAN" in console  # the detector was live
