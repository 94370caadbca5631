"""cgstress (workloads/cgstress.c): bandwidth writes, nested group churn, migration and CPU
hotplug at once, counting invalid writes the kernel accepted."""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import Metric, Param, Resolved, WorkloadKind, duration_arg, json_doc

COUNTERS = ("valid_writes", "invalid_writes", "einval_kept", "violations", "mkdir", "rmdir",
            "moves", "hotplug", "hotplug_errors", "scaled_by_timer", "lags_writes")  # fmt: skip


class Cgstress(WorkloadKind):
    name = "cgstress"
    description = "cgroup bandwidth stress (writes, churn, migration, hotplug)"
    params = {"burners": Param("count", "ncpu*4", hi=64), "hotplug": Param("bool", False)}
    programs = ("cgstress",)
    metrics = tuple(Metric(f"stress_{k}", "invalid writes accepted" if k == "violations" else None)
                    for k in COUNTERS)  # fmt: skip

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("cgstress", "-d", duration_arg(duration_s), "-b", str(w["burners"]),
                *(("-H",) if w["hotplug"] else ()))  # fmt: skip

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "cgstress")
        try:
            return {f"stress_{k}": float(doc[k]) for k in COUNTERS}, []
        except (KeyError, TypeError, ValueError) as exc:
            raise BwlabError(f"cgstress output is not its JSON document: {exc}") from exc


KIND = Cgstress()
