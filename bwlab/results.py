"""The result model: one JSON document per scenario run on one target, typed here.

Schema `bwlab-result/2`. `load()` reads it and upgrades `bwlab-result/1` (2026-11 and before:
no `accel` in the metadata, no workload `kind` in a case's settings). A result has metadata
(what ran where: target, label, kernel, HZ, CPUs, slice, accel, policy, and the rest in
`extra`), and per case its settings and repetitions: metrics, latency samples, the raw record,
or why the repetition has none.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from bwlab.errors import BwlabError
from bwlab.paths import REPO_ROOT

SCHEMA = "bwlab-result/2"
SCHEMA_V1 = "bwlab-result/1"
# /1 results name their workload by program (settings.workload[0]); the kind that runs it
V1_KINDS = {"sysbench": "sysbench-cpu", "cglat": "cglat", "hackbench": "hackbench", "cgstress": "cgstress",
            "wakelat": "wakelat", "funcs": "funcs", "noise": "noise"}  # fmt: skip


def git_revision() -> str:
    """Short HEAD of the bwlab checkout, with -dirty for uncommitted changes."""
    try:
        rev = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("-dirty" if dirty else "")


def base_meta(target: str, label: str) -> dict[str, Any]:
    return {
        "target": target,
        "label": label,
        "bwlab_revision": git_revision(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host_kernel": platform.release(),
    }


@dataclass
class Meta:
    """What ran where. Fields that decide whether two runs may share a report column are
    typed; everything else a target records (noise probes, console log, patches) is `extra`."""

    target: str  # "host", "guest", "sim"
    label: str  # "host", "guest-patched-all", "sim-mainline": the run's name in reports
    bwlab_revision: str = "unknown"
    date: str = ""
    host_kernel: str = ""
    kernel_release: str | None = None
    hz: int | None = None
    vcpus: int | None = None
    slice_us: int | None = None
    accel: str | None = None  # guests: "tcg" or "kvm"
    policy: str | None = None  # the series' sched_feat policy (patched guests, simulator)
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A typed field or an `extra` one by name."""
        if key != "extra" and key in _META_FIELDS:
            value = getattr(self, key)
            return default if value is None else value
        return self.extra.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in _META_FIELDS if f != "extra"}
        return {**out, **self.extra}

    # What must agree, beside the label, for two runs to be one row or column of a report.
    VARIANT_KEYS: ClassVar[tuple[str, ...]] = ("kernel_release", "hz", "vcpus", "slice_us", "accel", "policy")

    def variant(self) -> tuple[Any, ...]:
        return (self.label, *(getattr(self, k) for k in self.VARIANT_KEYS))

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Meta:
        known = {k: v for k, v in doc.items() if k in _META_FIELDS and k != "extra"}
        return cls(**known, extra={k: v for k, v in doc.items() if k not in _META_FIELDS})


_META_FIELDS = {f.name for f in fields(Meta)}


@dataclass
class Rep:
    """One repetition: its metrics, or the error that left it without any."""

    rep: int
    metrics: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None
    samples_us: list[int] = field(default_factory=list)
    raw: dict[str, Any] | None = None
    timeline: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rep": self.rep}
        if self.error is not None:
            out["error"] = self.error
        else:
            out["metrics"] = self.metrics
        for key in ("samples_us", "raw", "timeline"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


@dataclass
class Case:
    case: str
    params: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    reps: list[Rep] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.settings.get("kind", ""))


@dataclass
class Result:
    scenario: str
    status: str  # "ok", "failed", "timeout"
    meta: Meta
    cases: list[Case] = field(default_factory=list)
    description: str = ""
    tests: list[dict[str, Any]] = field(default_factory=list)  # kselftest results
    output: str = ""  # kselftest output

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema": SCHEMA, "scenario": self.scenario, "description": self.description,
                               "status": self.status, "meta": self.meta.as_dict(),
                               "cases": [{"case": c.case, "params": c.params, "settings": c.settings,
                                          "reps": [r.to_json() for r in c.reps]} for c in self.cases]}  # fmt: skip
        if self.scenario == "kselftest":
            doc.update({"tests": self.tests, "output": self.output})
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> Result:
        """Validate and read a document of the current schema or an older one."""
        if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA, SCHEMA_V1):
            raise BwlabError(f"{where}: not a bwlab result (schema {SCHEMA} or {SCHEMA_V1})")
        try:
            if doc["schema"] == SCHEMA_V1:
                doc = upgrade_v1(doc)
            cases = [Case(case=str(c["case"]), params=dict(c.get("params", {})),
                          settings=dict(c.get("settings", {})),
                          reps=[Rep(rep=int(r.get("rep", i)), metrics=dict(r.get("metrics") or {}),
                                    error=r.get("error"), samples_us=list(r.get("samples_us", [])), raw=r.get("raw"),
                                    timeline=r.get("timeline")) for i, r in enumerate(c["reps"])])
                     for c in doc["cases"]]  # fmt: skip
            return cls(scenario=str(doc["scenario"]), status=str(doc["status"]), meta=Meta.from_json(doc["meta"]),
                       cases=cases, description=str(doc.get("description", "")), tests=list(doc.get("tests", [])),
                       output=str(doc.get("output", "")))  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BwlabError(f"{where}: malformed bwlab result ({type(exc).__name__}: {exc})") from None


def upgrade_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A bwlab-result/1 document as /2: guests of /1 were all TCG; a case's kind is named
    after the program it ran."""
    meta = dict(doc["meta"])
    if meta.get("target") == "guest":
        meta.setdefault("accel", "tcg")
    cases = []
    for case in doc["cases"]:
        settings = dict(case.get("settings", {}))
        argv = settings.get("workload") or [""]
        if "kind" not in settings:
            program = str(argv[0])
            threads = len(argv) > 1 and argv[1] == "threads"
            settings["kind"] = (
                "sysbench-threads" if program == "sysbench" and threads else V1_KINDS.get(program, program)
            )
        cases.append({**case, "settings": settings})
    return {**doc, "schema": SCHEMA, "meta": meta, "cases": cases}


def compact_json(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def write(path: Path, doc: dict[str, Any] | Result) -> Path:
    """Write a result (validated through the model) atomically."""
    result = doc if isinstance(doc, Result) else Result.from_json(doc, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1))
    tmp.replace(path)
    return path


def load(path: Path) -> Result:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BwlabError(f"{path}: not a readable result file: {exc}") from exc
    return Result.from_json(doc, str(path))


def load_dir(directory: Path) -> list[Result]:
    if not directory.is_dir():
        raise BwlabError(f"{directory}: no such results directory")
    docs = [load(p) for p in sorted(directory.glob("*.json"))]
    if not docs:
        raise BwlabError(f"{directory}: no result files (*.json)")
    return docs
