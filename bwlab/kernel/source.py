"""Kernel source: Debian's linux-source package fetched into the cache, or a user's tree.

The package comes from a suite the system's apt sources do not list (trixie-backports on a
bookworm host). We never touch the system's apt configuration: a private sources directory,
list directory and package cache under the bwlab cache hold everything, and the archive URI
is read from the system's own deb822 sources file so that no mirror is named here.
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

PACKAGE = "linux-source-7.3"
SUITE = "trixie-backports"
EXPECTED_VERSION = "7.3.4"
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


def _apt_options(state: Path) -> list[str]:
    return [
        "-q",
        "-o", "Dir::Etc::SourceList=/dev/null",
        "-o", f"Dir::Etc::SourceParts={state / 'sources.list.d'}",
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


def source_dir() -> Path:
    return cache_root() / "src" / PACKAGE


def cached_source() -> KernelSource | None:
    """The fetched tree if a previous fetch completed, else None."""
    tree = source_dir()
    stamp = tree.parent / f"{PACKAGE}.json"
    if not stamp.is_file() or not tree.is_dir():
        return None
    meta = json.loads(stamp.read_text())
    return KernelSource(path=tree, version=meta["version"], origin=meta["origin"])


def fetch(force: bool = False) -> KernelSource:
    """Download and extract the Debian kernel source into the cache (idempotent). One fetch at
    a time per cache (a lock file beside the source): two at once (the test suite's parallel
    workers on a cold cache) would share apt's state and replace each other's tree."""
    if not force:
        existing = cached_source()
        if existing is not None:
            return existing
    lock = cache_root() / "src" / "fetch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            if not force and (existing := cached_source()) is not None:
                return existing  # fetched by the one we waited for
            return _fetch()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fetch() -> KernelSource:
    state = cache_root() / "apt"
    (state / "sources.list.d").mkdir(parents=True, exist_ok=True)
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    uri = read_archive_uri()
    (state / "sources.list.d" / "bwlab-backports.sources").write_text(
        f"Types: deb\nURIs: {uri}\nSuites: {SUITE}\nComponents: main\nSigned-By: {KEYRING}\n"
    )
    opts = _apt_options(state)
    _run(["apt-get", *opts, "update"], f"apt-get update for {SUITE}")
    policy = _run(["apt-cache", *opts, "policy", PACKAGE], f"apt-cache policy {PACKAGE}")
    candidate = re.search(r"Candidate:\s*(\S+)", policy)
    if not candidate or candidate.group(1) == "(none)":
        raise BwlabError(f"{PACKAGE} is not available from {SUITE}")
    deb_version = candidate.group(1)

    dest = source_dir()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-", dir=dest.parent) as tmp_name:
        tmp = Path(tmp_name)
        _run(["apt-get", *opts, "download", f"{PACKAGE}={deb_version}"],
             f"download {PACKAGE}", cwd=tmp)  # fmt: skip
        debs = list(tmp.glob(f"{PACKAGE}_*.deb"))
        if len(debs) != 1:
            raise BwlabError(f"download of {PACKAGE} produced no .deb file")
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
        if version != EXPECTED_VERSION:
            raise BwlabError(f"{PACKAGE} {deb_version} is Linux {version}, expected {EXPECTED_VERSION}")
        if dest.exists():
            shutil.rmtree(dest)
        trees[0].rename(dest)
    origin = f"debian:{PACKAGE}={deb_version}"
    (dest.parent / f"{PACKAGE}.json").write_text(
        json.dumps({"version": version, "origin": origin, "deb_sha256": deb_sha}, indent=1)
    )
    return KernelSource(path=dest, version=version, origin=origin)
