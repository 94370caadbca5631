"""Kernel builds: a copy-on-write tree per variant, patches applied, cached bzImage.

A variant is (source, patch series, config fragments, HZ). Its cache key hashes the source
version and origin, the patch contents in series order and the config fragments, so a second
build of the same variant returns the cached image at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.kernel import pahole
from bwlab.kernel.source import KernelSource
from bwlab.paths import CORE_CONFIG, LAB_CONFIG, cache_root
from bwlab.progress import console

SUPPORTED_HZ = (100, 250, 300, 1000)
# Symbols whose absence from the final .config would make every measurement meaningless.
REQUIRED_SYMBOLS = ("CONFIG_CFS_BANDWIDTH", "CONFIG_CPUSETS", "CONFIG_SERIAL_8250_CONSOLE",
                    "CONFIG_BLK_DEV_INITRD", "CONFIG_CGROUP_SCHED")  # fmt: skip


@dataclass(frozen=True)
class Series:
    """An ordered patch series (possibly empty) read from a `series` file."""

    path: Path | None
    patches: tuple[Path, ...]

    @property
    def digest(self) -> str:
        """Hash of the code the series changes, in order: changelogs do not change a build."""
        h = hashlib.sha256()
        for patch in self.patches:
            h.update(patch_code(patch.read_bytes()) + b"\0")
        return h.hexdigest()[:16]

    @property
    def source_digest(self) -> str:
        """Hash of everything the series changes, tools/ (selftests) included."""
        h = hashlib.sha256()
        for patch in self.patches:
            h.update(patch_diff(patch.read_bytes()) + b"\0")
        return h.hexdigest()[:16]


DIFF_START = re.compile(rb"^(?:diff |--- a/|--- [^\s]+\t|Index: )", re.MULTILINE)


# Paths whose changes cannot change a kernel image: selftests, tools, documentation.
NOT_BUILT = (b"tools/", b"Documentation/")
FILE_HEADER = re.compile(rb"^diff --git a/(\S+) ", re.MULTILINE)
TRAILER = re.compile(rb"^(?:base-commit|prerequisite-patch-id): \S+\n|^-- \n[^\n]*\n?\Z", re.MULTILINE)


def patch_diff(text: bytes) -> bytes:
    """A patch's diff (from its first 'diff ' line), without the changelog and without
    format-patch's trailers (base-commit, in the last patch or the cover letter; signature)."""
    match = DIFF_START.search(text)
    return TRAILER.sub(b"", text[match.start() :] if match else text)


def patch_code(text: bytes) -> bytes:
    """What a patch does to the kernel build: its diff without the files under tools/ and
    Documentation/ (a selftest fix must not rebuild kernels)."""
    diff = patch_diff(text)
    starts = [m.start() for m in FILE_HEADER.finditer(diff)]
    if not starts:
        return diff
    kept = []
    for begin, end in zip(starts, [*starts[1:], len(diff)], strict=True):
        section = diff[begin:end]
        path = FILE_HEADER.match(section)
        if path is None or not path.group(1).startswith(NOT_BUILT):
            kept.append(section)
    return b"".join(kept)


def read_series(path: Path | None) -> Series:
    """Parse a quilt-style series file: one patch per line, '#' comments, blank lines."""
    if path is None:
        return Series(path=None, patches=())
    if not path.is_file():
        raise BwlabError(f"patch series {path}: no such file")
    path = path.absolute()  # the patches are applied from inside the build tree
    patches: list[Path] = []
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        patch = (path.parent / line.split()[0]).resolve()  # a series may name ../other/patches
        if not patch.is_file():
            raise BwlabError(f"{path}:{lineno}: patch {line.split()[0]} not found")
        patches.append(patch)
    return Series(path=path, patches=tuple(patches))


@dataclass(frozen=True)
class Variant:
    source: KernelSource
    series: Series
    fragments: tuple[Path, ...]
    hz: int

    @property
    def flavor(self) -> str:
        """Names of the extra config fragments ("debug", "lockstat"), "" for the lab kernel."""
        return flavor_of(self.fragments)

    def config_text(self) -> str:
        parts = []
        for frag in self.fragments:
            if not frag.is_file():
                raise BwlabError(f"config fragment {frag}: no such file")
            parts.append(f"# fragment {frag.name}\n{frag.read_text()}")
        parts.append(hz_fragment(self.hz))
        return "\n".join(parts)

    @property
    def config_digest(self) -> str:
        return hashlib.sha256(self.config_text().encode()).hexdigest()[:16]

    @property
    def key(self) -> str:
        ident = json.dumps([self.source.version, self.source.origin,
                            self.series.digest, self.config_digest])  # fmt: skip
        return f"{self.source.version}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class KernelImage:
    """A built kernel in the cache, with what it was built from."""

    key: str
    bzimage: Path
    version: str
    release: str
    origin: str
    series_digest: str
    patches: tuple[str, ...]
    config_digest: str
    hz: int
    build_seconds: float
    flavor: str = ""  # extra config fragments, e.g. "debug"
    incremental_from: str = ""  # the baseline whose objects the build started from, if any

    @property
    def variant_name(self) -> str:
        """'baseline', 'patched', 'patched-debug': how results name the kernel."""
        return variant_name(bool(self.patches), self.flavor)

    def metadata(self) -> dict[str, object]:
        meta = asdict(self)
        meta["bzimage"] = str(self.bzimage)
        meta["patches"] = list(self.patches)
        return meta


def flavor_of(fragments: tuple[Path, ...]) -> str:
    """Names of the config fragments beyond the lab kernel's (core.config and lab.config):
    "debug", "lockstat", "" for none; "core" for the measurement kernel without lab.config."""
    names = [f.stem for f in fragments if f not in (CORE_CONFIG, LAB_CONFIG)]
    if CORE_CONFIG in fragments and LAB_CONFIG not in fragments:
        names.insert(0, CORE_CONFIG.stem)
    return "+".join(names)


def variant_name(patched: bool, flavor: str) -> str:
    """'baseline', 'patched', 'patched-debug': how results name a kernel."""
    return ("patched" if patched else "baseline") + (f"-{flavor}" if flavor else "")


def hz_fragment(hz: int) -> str:
    if hz not in SUPPORTED_HZ:
        raise BwlabError(f"--hz {hz}: unsupported, choose one of {', '.join(map(str, SUPPORTED_HZ))}")
    lines = [f"CONFIG_HZ_{h}={'y' if h == hz else 'n'}" for h in SUPPORTED_HZ]
    return "# HZ selected by bwlab\n" + "\n".join(lines) + f"\nCONFIG_HZ={hz}\n"


def default_fragments(extra: list[Path] | None = None) -> tuple[Path, ...]:
    """The lab kernel's fragments, then `extra`."""
    return (CORE_CONFIG, LAB_CONFIG, *(extra or []))


def core_fragments(extra: list[Path] | None = None) -> tuple[Path, ...]:
    """The measurement kernel's fragment (the quick plan's: no tracing, host-userland or BPF),
    then `extra`."""
    return (CORE_CONFIG, *(extra or []))


def images_dir() -> Path:
    return cache_root() / "kernels"


def builds_dir() -> Path:
    return cache_root() / "build"


def load_image(meta_file: Path) -> KernelImage:
    """A cached image's record. The image is the bzImage beside it (the cache may have moved);
    a record this bwlab cannot read is a one-line error naming it, never a traceback."""
    try:
        meta = json.loads(meta_file.read_text())
        meta["bzimage"] = meta_file.parent / "bzImage"
        meta["patches"] = tuple(meta["patches"])
        image = KernelImage(**meta)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise BwlabError(
            f"{meta_file}: stale or damaged kernel cache entry ({type(exc).__name__}: {exc}); "
            f"remove {meta_file.parent} or run 'bwlab kernel clean --all' and build again"
        ) from None
    return image


def cached_image(variant: Variant) -> KernelImage | None:
    meta = images_dir() / variant.key / "meta.json"
    if meta.is_file() and (meta.parent / "bzImage").is_file():
        return load_image(meta)
    return None


def image_by_key(key: str) -> KernelImage | None:
    """A built kernel by its key (`bwlab kernel list`), or None."""
    return next((image for image in list_images() if image.key == key), None)


def list_images() -> list[KernelImage]:
    root = images_dir()
    if not root.is_dir():
        return []
    return [load_image(m) for m in sorted(root.glob("*/meta.json"))]


def clean(all_images: bool) -> list[Path]:
    """Remove build trees (and, with all_images, the cached images too)."""
    removed = []
    for root in (builds_dir(), *((images_dir(),) if all_images else ())):
        if root.exists():
            shutil.rmtree(root)
            removed.append(root)
    return removed


@contextmanager
def locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def patched_files(patch: Path) -> set[str]:
    return patched_files_text(patch.read_text(errors="replace"))


def patched_files_text(diff: str) -> set[str]:
    """Paths (relative to the tree, -p1) that a unified diff modifies or creates."""
    files = set()
    for line in diff.splitlines():
        match = re.match(r"^(?:\+\+\+|---) [ab]/(\S+)", line)
        if match:
            files.add(match.group(1))
    return files


def _break_link(path: Path) -> None:
    """Give a hard-linked file its own inode so editing it leaves the pristine tree alone."""
    if path.is_file() and path.stat().st_nlink > 1:
        tmp = path.with_name(path.name + ".bwlab-cow")
        shutil.copy2(path, tmp)
        os.replace(tmp, path)


def run_logged(cmd: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    with log.open("a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        console.print("\n".join(tail), markup=False)
        raise BwlabError(f"{what} failed (exit {proc.returncode}); full log: {log}")


def prepare_tree(variant: Variant, work: Path, log: Path) -> Path:
    """A hard-link copy of the source with the series applied (links broken where patched)."""
    src = work / "src"
    if src.exists():
        shutil.rmtree(src)
    run_logged(["cp", "-al", str(variant.source.path), str(src)], log, "copy source tree")
    for patch in variant.series.patches:
        for rel in patched_files(patch):
            _break_link(src / rel)
        run_logged(["patch", "-p1", "--forward", "--batch", "--fuzz=0", "-i", str(patch)], log,
                    f"apply {patch.name}", cwd=src)  # fmt: skip
    return src


def make_vars(variant: Variant) -> list[str]:
    """Variables for every make of this variant: a pahole new enough for its BTF, where its
    config asks for BTF (pahole.py; Kconfig reads its version, the build runs it)."""
    return [f"PAHOLE={pahole.ensure()}"] if pahole.wants_btf(variant.config_text()) else []


def configure(variant: Variant, src: Path, out: Path, log: Path, extra: list[str]) -> None:
    """The variant's .config in `out`; `extra`: make_vars(variant)."""
    out.mkdir(parents=True, exist_ok=True)
    fragment = out / "bwlab.config"
    fragment.write_text(variant.config_text())
    run_logged(["make", "-C", str(src), f"O={out}", *extra, "tinyconfig"], log, "make tinyconfig")
    run_logged([str(src / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(out),
                 str(out / ".config"), str(fragment)], log, "merge config fragments", cwd=src)  # fmt: skip
    run_logged(["make", "-C", str(src), f"O={out}", *extra, "olddefconfig"], log, "make olddefconfig")
    final = (out / ".config").read_text()
    wanted = dict(re.findall(r"^(CONFIG_\w+)=(.*)$", fragment.read_text(), re.MULTILINE))
    missing = [sym for sym in REQUIRED_SYMBOLS if f"\n{sym}=y" not in final]
    hz_line = f"CONFIG_HZ={variant.hz}"
    if hz_line not in final:
        missing.append(hz_line)
    if missing:
        raise BwlabError(f"kernel config lacks {', '.join(missing)} after merge; see {log}")
    dropped = [s for s, v in wanted.items() if v == "y" and f"\n{s}=y" not in final]
    if dropped:
        with log.open("a") as fh:
            fh.write(f"\nbwlab: fragment symbols not set (deps missing): {dropped}\n")
    # An extra fragment (debug, lockstat) is asked for on purpose: all of it must take effect.
    for frag in variant.fragments:
        if frag in (CORE_CONFIG, LAB_CONFIG):
            continue
        asked = re.findall(r"^(CONFIG_\w+)=y$", frag.read_text(), re.MULTILINE)
        lost = [sym for sym in asked if f"\n{sym}=y" not in final]
        if lost:
            raise BwlabError(f"config fragment {frag.name}: {', '.join(lost)} not set after merge "
                             f"(missing dependency or compiler support); see {log}")  # fmt: skip


def output_dir(src: Path) -> Path:
    """A variant's build output: a direct subdirectory of its source tree, so that Kbuild uses
    the relative srctree '..' in every dependency it records and the output can seed another
    variant's build (incremental_seed())."""
    return src / "out"


def baseline_of(variant: Variant) -> Variant:
    """The same source, config and HZ without patches: whose objects a patched build reuses."""
    return Variant(variant.source, read_series(None), variant.fragments, variant.hz)


def incremental_seed(variant: Variant, config: str) -> Path | None:
    """A finished build output of the unpatched variant whose .config is `config`, or None.
    A patched variant differs from it in a handful of files: copied with their timestamps
    into the patched tree, make rebuilds only what the patches touch (and their dependents)."""
    if not variant.series.patches:
        return None
    seed = output_dir(builds_dir() / baseline_of(variant).key / "src")
    if not (seed / "arch/x86/boot/bzImage").is_file() or not (seed / ".config").is_file():
        return None
    return seed if (seed / ".config").read_text() == config else None


def build(variant: Variant, jobs: int | None = None) -> KernelImage:
    """Build the variant's bzImage, or return the cached one. A patched variant starts from the
    baseline's objects when its build tree is there with the same .config (incremental_seed())."""
    existing = cached_image(variant)
    if existing is not None:
        return existing
    work = builds_dir() / variant.key
    with locked(builds_dir() / f"{variant.key}.lock"):
        existing = cached_image(variant)
        if existing is not None:
            return existing
        work.mkdir(parents=True, exist_ok=True)
        log = work / "build.log"
        log.write_text(f"bwlab build of {variant.key}\n")
        start = time.monotonic()
        src = prepare_tree(variant, work, log)
        out = output_dir(src)
        extra = make_vars(variant)  # once: it may debootstrap pahole's root, and runs pahole
        configure(variant, src, out, log, extra)
        seed = incremental_seed(variant, (out / ".config").read_text())
        if seed is not None:  # the same configuration, built: start from its objects
            with log.open("a") as fh:
                fh.write(f"\nbwlab: incremental build from {seed} (same .config)\n")
            shutil.rmtree(out)
            run_logged(["cp", "-a", str(seed), str(out)], log, "copy the baseline's build output")
        njobs = jobs or os.cpu_count() or 1
        with console.status(f"make -j{njobs} bzImage{' (incremental)' if seed else ''} (log: {log})"):
            run_logged(["make", "-C", str(src), f"O={out}", *extra, f"-j{njobs}", "bzImage"], log,
                        "kernel build")  # fmt: skip
        release = subprocess.run(["make", "-s", "-C", str(src), f"O={out}", "kernelrelease"],
                                 capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
        dest = images_dir() / variant.key
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / "arch/x86/boot/bzImage", dest / "bzImage")
        shutil.copy2(out / ".config", dest / "config")
        shutil.copy2(log, dest / "build.log")
        image = KernelImage(
            key=variant.key,
            bzimage=dest / "bzImage",
            version=variant.source.version,
            release=release,
            origin=variant.source.origin,
            series_digest=variant.series.digest,
            patches=tuple(p.name for p in variant.series.patches),
            config_digest=variant.config_digest,
            hz=variant.hz,
            build_seconds=round(time.monotonic() - start, 1),
            flavor=variant.flavor,
            incremental_from=baseline_of(variant).key if seed is not None else "",
        )
        (dest / "meta.json").write_text(json.dumps(image.metadata(), indent=1))
        return image
