"""Where the bandwidth fields lie in a lab kernel's structures, for doctor's kprobes.

A kprobe on `tg_throttle_down()` gets a `struct task_group *`; the pool (`cfs_b->runtime`) and
each CPU's local runtime (`cfs_rq->runtime_remaining`) are at offsets only the kernel's own
headers know. A kernel with BTF carries them; the lab's kernels are built without (pahole is
too old here), so the offsets are compiled from the build tree: a C file that includes
kernel/sched/sched.h, compiled to assembly with the very command line kbuild used for
kernel/sched/fair.o (the same config, compiler and flags), each offset an `.ascii` line
(the trick of the kernel's asm-offsets). Written once beside the image as layout.json, with
the kernel release and the addresses of the probed functions in System.map, so that a
reader can check that the kernel it runs is the one the offsets describe.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.kernel.build import KernelImage, builds_dir

ENV = "BWLAB_KERNEL_LAYOUT"  # the layout file's path, as a lab guest's command gets it
FIELDS = {
    "tg_cfs_bandwidth": "offsetof(struct task_group, cfs_bandwidth)",
    "tg_cfs_rq": "offsetof(struct task_group, cfs_rq)",  # __percpu since 6.18
    "cfs_b_quota": "offsetof(struct cfs_bandwidth, quota)",
    "cfs_b_runtime": "offsetof(struct cfs_bandwidth, runtime)",
    "cfs_b_period_timer": "offsetof(struct cfs_bandwidth, period_timer)",
    "cfs_rq_runtime_remaining": "offsetof(struct cfs_rq, runtime_remaining)",
    "cfs_rq_h_nr_queued": "offsetof(struct cfs_rq, h_nr_queued)",  # the group's tasks queued on that CPU
    "rq_cpu": "offsetof(struct rq, cpu)",
}
SYMBOLS = ("tg_throttle_down", "__refill_cfs_bandwidth_runtime", "__per_cpu_offset")  # what kstate checks and reads
LINE = re.compile(r'->bwlab (\w+) (\d+)"')
RELEASE = "7.3."  # the fields are 7.3's names (6.12 has h_nr_running, no h_nr_queued)


def source() -> str:
    fields = "".join(f"\tBWLAB_FIELD({name}, {expr});\n" for name, expr in FIELDS.items())
    return (
        '#include "sched.h"\n'
        '#define BWLAB_FIELD(name, value) asm volatile("\\n.ascii \\"->bwlab " #name " %c0\\"" : : "i" (value))\n'
        "void bwlab_layout(void);\n"
        f"void bwlab_layout(void)\n{{\n{fields}}}\n"
    )


def compile_command(cmd_file: Path, src: Path, asm: Path) -> list[str]:
    """kbuild's command for kernel/sched/fair.o (its .cmd file) turned to compile `src` to
    assembly `asm`: no dependency file, fair.c's directory on the include path."""
    text = cmd_file.read_text()
    _, sep, line = text.partition(":=")
    if not sep:
        raise BwlabError(f"{cmd_file}: no kbuild command in it")
    argv = shlex.split(line.splitlines()[0])
    try:
        at = argv.index("-c")
    except ValueError:
        raise BwlabError(f"{cmd_file}: no -c in kbuild's command") from None
    kept = [a for a in argv[:at] if not a.startswith("-Wp,-MMD")]
    return [*kept, "-I../kernel/sched", "-S", "-o", str(asm), str(src)]


def parse(asm_text: str) -> dict[str, int]:
    found = {m.group(1): int(m.group(2)) for m in LINE.finditer(asm_text)}
    missing = sorted(set(FIELDS) - set(found))
    if missing:
        raise BwlabError(f"the layout's assembly lacks {', '.join(missing)}")
    return found


def symbols(system_map: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in system_map.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in SYMBOLS:
            out[parts[2]] = parts[0]
    return out


def path_of(image: KernelImage) -> Path:
    return image.bzimage.parent / "layout.json"


def ensure(image: KernelImage) -> Path | None:
    """The image's layout file, compiled from its build tree the first time; None where the
    tree is gone (a cache that kept images only), the kernel has no bandwidth control or is of
    another release than the fields name (the 6.12 kernel of the sched_ext safety test)."""
    if not image.version.startswith(RELEASE):
        return None
    dest = path_of(image)
    if dest.is_file():
        try:
            if set(FIELDS) <= set(json.loads(dest.read_text())["fields"]):
                return dest
        except (OSError, ValueError, KeyError, TypeError):
            pass  # damaged, or written by a bwlab that read fewer fields: compiled again
    out = builds_dir() / image.key / "src" / "out"
    cmd_file = out / "kernel" / "sched" / ".fair.o.cmd"
    config = out / ".config"
    if not cmd_file.is_file() or "CONFIG_CFS_BANDWIDTH=y" not in config.read_text():
        return None
    with tempfile.TemporaryDirectory(prefix="bwlab-layout-") as tmp:
        src, asm = Path(tmp) / "bwlab_layout.c", Path(tmp) / "bwlab_layout.s"
        src.write_text(source())
        res = subprocess.run(compile_command(cmd_file, src, asm), cwd=out, capture_output=True, text=True,
                             check=False)  # fmt: skip
        if res.returncode != 0:
            said = (res.stderr.strip().splitlines() or ["no message"])[-1]
            raise BwlabError(f"kernel {image.key}: cannot compile the structures' layout: {said}")
        fields = parse(asm.read_text())
    doc = {"kernel_key": image.key, "release": image.release, "fields": fields,
           "symbols": symbols(out / "System.map")}  # fmt: skip
    tmp_dest = dest.with_suffix(".tmp")
    tmp_dest.write_text(json.dumps(doc, indent=1) + "\n")
    tmp_dest.replace(dest)
    return dest
