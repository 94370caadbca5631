"""pahole new enough to make BTF for a 7.3 kernel (what sched_ext needs), on a host whose own
is too old.

Debian bookworm's dwarves is 1.24; 7.3's BTF (its kfuncs' declaration tags) wants 1.26 or
later, and trixie's 1.30 binary needs glibc 2.38 (bookworm: 2.36). So a minimal trixie root
holds pahole and the libraries it was built against (`debootstrap --variant=minbase
--include=pahole`: 21-23 s, 219 MB here), and a wrapper runs it through that root's own
dynamic loader. The archive URI is read from the system's apt sources (source.py): no mirror
is named here. The kernel's Makefile assigns `PAHOLE = pahole`, so the wrapper is handed to
make on its command line (build.py), where an environment variable would not reach it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from bwlab.errors import BwlabError
from bwlab.kernel import source
from bwlab.paths import cache_root

SUITE = "trixie"
MIN_VERSION = (1, 26)


def root() -> Path:
    return cache_root() / "trixie-pahole"


def wrapper_path() -> Path:
    return cache_root() / "trixie-pahole.sh"


def _wrapper_text(r: Path) -> str:
    libs = f"{r}/lib/x86_64-linux-gnu:{r}/usr/lib/x86_64-linux-gnu"
    return (
        "#!/bin/sh\n# trixie's pahole through its own loader (bwlab/kernel/pahole.py)\n"
        f'exec "{r}/lib64/ld-linux-x86-64.so.2" --library-path "{libs}" "{r}/usr/bin/pahole" "$@"\n'
    )


def version(pahole: Path) -> tuple[int, int] | None:
    """pahole's (major, minor), or None if it does not run."""
    try:
        out = subprocess.run([str(pahole), "--version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    match = re.match(r"v(\d+)\.(\d+)", out.stdout.strip())
    return (int(match[1]), int(match[2])) if match and out.returncode == 0 else None


def ensure() -> Path:
    """The wrapper of a pahole >= MIN_VERSION: the trixie root's, made once into the cache."""
    wrapper = wrapper_path()
    r = root()
    if not (r / "usr/bin/pahole").is_file():
        if shutil.which("debootstrap") is None:
            raise BwlabError("BTF for this kernel needs pahole >= 1.26: debootstrap is not installed "
                             "(apt-get install debootstrap)")  # fmt: skip
        partial = r.with_name(r.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        uri = source.read_archive_uri()
        cmd = ["debootstrap", "--variant=minbase", "--include=pahole", f"--keyring={source.KEYRING}", SUITE,
               str(partial), uri]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (partial / "usr/bin/pahole").is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
            shutil.rmtree(partial, ignore_errors=True)
            raise BwlabError(f"debootstrap of {SUITE} with pahole failed ({done.returncode}): {tail[0]}")
        partial.rename(r)
    wrapper.write_text(_wrapper_text(r))
    wrapper.chmod(0o755)
    found = version(wrapper)
    if found is None or found < MIN_VERSION:
        raise BwlabError(f"{wrapper}: pahole {found or 'does not run'}, need >= {'.'.join(map(str, MIN_VERSION))}")
    return wrapper


def wants_btf(config_text: str) -> bool:
    """Whether a kernel config (fragments) asks for BTF."""
    return re.search(r"^CONFIG_DEBUG_INFO_BTF=y$", config_text, re.MULTILINE) is not None
