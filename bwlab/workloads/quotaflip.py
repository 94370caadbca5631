"""quotaflip (workloads/quotaflip.c): a busy group whose quota is set to max and back, again and
again; counts the returns after which the group throttled (a lost refill: issue 34, the first
series' early refill whose flag outlived a period timer run at max)."""

from __future__ import annotations

from bwlab.errors import BwlabError
from bwlab.workloads.base import CGROUP_ARG, REP_ARG, Metric, Param, Resolved, WorkloadKind, duration_arg, json_doc

COUNTS = ("flips", "throttled_after", "throttled_after_pct")


class QuotaFlip(WorkloadKind):
    name = "quotaflip"
    description = "a busy thread per CPU, the quota set to max and back: throttles after the returns counted"
    params = {"before_cpus": Param("rate", "ncpu*0.7", help="quota before each flip: under what the threads use")}
    programs = ("quotaflip",)
    metrics = (Metric("flips"), Metric("throttled_after", "returns that throttled"),
               Metric("throttled_after_pct", "returns that throttled %", console=True))  # fmt: skip

    def argv(self, w: Resolved, ncpu: int, duration_s: float) -> tuple[str, ...]:
        return ("quotaflip", CGROUP_ARG, duration_arg(duration_s), REP_ARG, f"{w['before_cpus']:.3f}")

    def parse(self, stdout: str, w: Resolved) -> tuple[dict[str, float], list[int]]:
        doc = json_doc(stdout, "quotaflip")
        try:
            return {k: float(doc[k]) for k in COUNTS}, []
        except (KeyError, TypeError, ValueError) as exc:
            raise BwlabError(f"quotaflip output is not its JSON document: {exc}") from exc


KIND = QuotaFlip()
