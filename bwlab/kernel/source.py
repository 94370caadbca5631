"""Kernel source: Debian's linux-source package fetched into the cache, or a user's tree.

Two releases: 7.3 (7.3.4, what the series is against; the default) and 6.12 (Debian trixie's
kernel, whose sched_ext has cgroup callbacks but no `cgroup_set_bandwidth`: the kernel on which
scx_bwlab must refuse to take tasks with a cpu.max). The package comes from a suite the system's
apt sources do not list (trixie or trixie-backports on a bookworm host). We never touch the
system's apt configuration: a private sources directory, list directory and package cache under
the bwlab cache hold everything, and the archive URI is read from the system's own deb822
sources file so that no mirror is named here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.paths import cache_root


@dataclass(frozen=True)
class Release:
    """A Debian linux-source package and the upstream versions it may hold."""

    name: str  # "7.3": what --release takes
    package: str
    suite: str
    version_prefix: str  # "7.3.4" exactly; "6.12." any stable update trixie carries

    def accepts(self, version: str) -> bool:
        if self.version_prefix.endswith("."):
            return version.startswith(self.version_prefix)
        return version == self.version_prefix


RELEASES = {
    "7.3": Release("7.3", "linux-source-7.3", "trixie-backports", "7.3.4"),
    "6.12": Release("6.12", "linux-source-6.12", "trixie", "6.12."),
}
DEFAULT_RELEASE = "7.3"
SYSTEM_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


@dataclass(frozen=True)
class KernelSource:
    """An extracted kernel tree and the version it claims to be."""

    path: Path
    version: str  # e.g. "7.3.4"
    origin: str  # "debian:<package>=<deb version>" or "user:<path>"


def read_archive_uri(sources_file: Path = SYSTEM_SOURCES) -> str:
    """The first `URIs:` of a stanza whose suites are not security suites."""
    try:
        text = sources_file.read_text()
    except OSError as exc:
        raise BwlabError(f"cannot read apt sources {sources_file}: {exc.strerror}") from exc
    for stanza in re.split(r"\n\s*\n", text):
        uris = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
        suites = re.search(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
        if uris and suites and "security" not in suites.group(1):
            return uris.group(1)
    raise BwlabError(f"no non-security 'URIs:' entry in {sources_file}")


def tree_version(tree: Path) -> str:
    """VERSION.PATCHLEVEL.SUBLEVEL from a kernel tree's top Makefile."""
    makefile = tree / "Makefile"
    try:
        head = makefile.read_text(errors="replace")[:2000]
    except OSError as exc:
        raise BwlabError(f"{tree} is not a kernel source tree: no readable Makefile") from exc
    fields: dict[str, str] = {}
    for key in ("VERSION", "PATCHLEVEL", "SUBLEVEL"):
        match = re.search(rf"^{key}\s*=\s*(\d+)\s*$", head, re.MULTILINE)
        if not match:
            raise BwlabError(f"{makefile} has no {key} line: not a kernel source tree")
        fields[key] = match.group(1)
    if not (tree / "kernel" / "sched" / "fair.c").is_file():
        raise BwlabError(f"{tree} is not a kernel source tree: kernel/sched/fair.c missing")
    return f"{fields['VERSION']}.{fields['PATCHLEVEL']}.{fields['SUBLEVEL']}"


def user_source(path: Path) -> KernelSource:
    """A tree the user supplied with --kernel-src."""
    tree = path.expanduser().resolve()
    if not tree.is_dir():
        raise BwlabError(f"--kernel-src {path}: no such directory")
    return KernelSource(path=tree, version=tree_version(tree), origin=f"user:{tree}")


def _apt_options(state: Path, parts: Path) -> list[str]:
    return [
        "-q",
        "-o", "Dir::Etc::SourceList=/dev/null",
        "-o", f"Dir::Etc::SourceParts={parts}",
        "-o", f"Dir::State::Lists={state / 'lists'}",
        "-o", f"Dir::Cache={state / 'cache'}",
        "-o", "APT::Get::List-Cleanup=0",
    ]  # fmt: skip


def _run(cmd: list[str], what: str, cwd: Path | None = None) -> str:
    if shutil.which(cmd[0]) is None:
        raise BwlabError(f"{what}: '{cmd[0]}' is not installed")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise BwlabError(f"{what} failed (exit {proc.returncode}): {tail[0]}")
    return proc.stdout


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def release_of(name: str) -> Release:
    try:
        return RELEASES[name]
    except KeyError:
        raise BwlabError(f"unknown kernel release {name!r} (choose from {', '.join(RELEASES)})") from None


def source_dir(release: str = DEFAULT_RELEASE) -> Path:
    return cache_root() / "src" / release_of(release).package


def cached_source(release: str = DEFAULT_RELEASE) -> KernelSource | None:
    """The fetched tree if a previous fetch completed, else None."""
    tree = source_dir(release)
    stamp = tree.parent / f"{release_of(release).package}.json"
    if not stamp.is_file() or not tree.is_dir():
        return None
    meta = json.loads(stamp.read_text())
    return KernelSource(path=tree, version=meta["version"], origin=meta["origin"])


def fetch(force: bool = False, release: str = DEFAULT_RELEASE) -> KernelSource:
    """Download and extract the Debian kernel source into the cache (idempotent). One fetch at
    a time per cache (a lock file beside the source): two at once (the test suite's parallel
    workers on a cold cache) would share apt's state and replace each other's tree."""
    if not force:
        existing = cached_source(release)
        if existing is not None:
            return existing
    lock = cache_root() / "src" / "fetch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if not force and (existing := cached_source(release)) is not None:
                return existing  # fetched by the one we waited for
            return _fetch(release_of(release))
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fetch(rel: Release) -> KernelSource:
    state = cache_root() / "apt"
    # a sources directory per suite (lists and package cache shared): a fetch updates only its
    # own suite's index, and never depends on another suite's mirror being reachable
    parts = state / f"sources-{rel.suite}"
    parts.mkdir(parents=True, exist_ok=True)
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    uri = read_archive_uri()
    (parts / "bwlab.sources").write_text(
        f"Types: deb\nURIs: {uri}\nSuites: {rel.suite}\nComponents: main\nSigned-By: {KEYRING}\n"
    )
    opts = _apt_options(state, parts)
    _run(["apt-get", *opts, "update"], f"apt-get update for {rel.suite}")
    policy = _run(["apt-cache", *opts, "policy", rel.package], f"apt-cache policy {rel.package}")
    candidate = re.search(r"Candidate:\s*(\S+)", policy)
    if not candidate or candidate.group(1) == "(none)":
        raise BwlabError(f"{rel.package} is not available from {rel.suite}")
    deb_version = candidate.group(1)

    dest = source_dir(rel.name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-", dir=dest.parent) as tmp_name:
        tmp = Path(tmp_name)
        _run(["apt-get", *opts, "download", f"{rel.package}={deb_version}"],
             f"download {rel.package}", cwd=tmp)  # fmt: skip
        debs = list(tmp.glob(f"{rel.package}_*.deb"))
        if len(debs) != 1:
            raise BwlabError(f"download of {rel.package} produced no .deb file")
        deb_sha = _sha256(debs[0])
        _run(["dpkg-deb", "-x", str(debs[0]), str(tmp / "pkg")], f"unpack {debs[0].name}")
        tarballs = list((tmp / "pkg" / "usr" / "src").glob("linux-source-*.tar.*"))
        if len(tarballs) != 1:
            raise BwlabError(f"{debs[0].name} holds no linux-source tarball: corrupt package?")
        debs[0].unlink()
        _run(["tar", "-xf", str(tarballs[0]), "-C", str(tmp)], f"extract {tarballs[0].name}")
        trees = [p for p in tmp.iterdir() if p.is_dir() and p.name.startswith("linux-source")]
        if len(trees) != 1:
            raise BwlabError(f"{tarballs[0].name} did not unpack to one linux-source tree")
        version = tree_version(trees[0])
        if not rel.accepts(version):
            wanted = rel.version_prefix + ("x" if rel.version_prefix.endswith(".") else "")
            raise BwlabError(f"{rel.package} {deb_version} is Linux {version}, expected {wanted}")
        stamp = dest.parent / f"{rel.package}.json"
        stamp.unlink(missing_ok=True)  # no stamp names a tree it did not describe, even cut short
        if dest.exists():
            shutil.rmtree(dest)
        trees[0].rename(dest)
    origin = f"debian:{rel.package}={deb_version}"
    tmp_stamp = stamp.with_suffix(".tmp")
    tmp_stamp.write_text(json.dumps({"version": version, "origin": origin, "deb_sha256": deb_sha}, indent=1))
    tmp_stamp.replace(stamp)
    return KernelSource(path=dest, version=version, origin=origin)
