"""The workload kinds: every module of this package that defines `KIND` is one.

A new kind is its C source in workloads/ (if it has a program of its own), one module here
and its tests: scenarios, targets, the report and the simulator find it through `get()`.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

from bwlab.errors import BwlabError
from bwlab.workloads.base import WorkloadKind


@functools.cache
def kinds() -> dict[str, WorkloadKind]:
    """Every kind by name, in module order."""
    found: dict[str, WorkloadKind] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kind = getattr(module, "KIND", None)
        if isinstance(kind, WorkloadKind):
            if kind.name in found:
                raise AssertionError(f"two workload kinds named {kind.name}")
            found[kind.name] = kind
    return found


def get(name: str) -> WorkloadKind:
    try:
        return kinds()[name]
    except KeyError:
        raise BwlabError(f"unknown workload kind {name!r} (known: {', '.join(sorted(kinds()))})") from None


def all_programs() -> tuple[str, ...]:
    """Every logical program some kind runs: what a guest carries."""
    return tuple(sorted({p for k in kinds().values() for p in k.programs}))
