"""Multi-tenant interference (section 10.3): two jobs whose spine-layer links overlap by 0, 25,
50 or 75%; each job's time alone and together, and the JCT interference factor (together /
alone).

The placement is made with source ports: each flow's UDP source port is chosen so that the
fabric's own ECMP hash (fabric.ecmp_hash_seed fixed: the routers' kernels and the simulator hash
alike, fabrics/topology.py) puts it on one of its job's spine links, uplink and downlink. With k
spine links per job (half a leaf's uplinks), an overlap of o shares round(o x k) of them; the
report gives the overlap that made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.errors import InputError
from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.kpis import RunData, cv
from emulator.studies.bmwg.procedure import Procedure, mean_of

Slot = tuple[str, int]  # a spine and the parallel link's index: one leaf-spine link pair
SPORTS = range(0xC000, 0x10000)


def _slot(ifname: str, far: str) -> Slot:
    """l0-s1-2 toward s1 -> (s1, 2); l0-s1 (no parallel links) -> (s1, 0)."""
    tail = ifname.rsplit("-", 1)[-1]
    return far, int(tail) if ifname.count("-") >= 2 and tail.isdigit() else 0


class Placement:
    """The fabric's ECMP paths, to pick source ports that land flows on chosen spine links."""

    def __init__(self, base: Base) -> None:
        from emulator.scenario import load_scenario
        from fabrics.topology import build_clos

        fabric = load_scenario(base.path).fabric
        if not fabric.ecmp_hash_seed:
            raise InputError(
                "bmwg multi-tenant: fabric.ecmp_hash_seed is 0 (each kernel draws its own), so "
                "no source port places a flow: give it a fixed seed"
            )
        self.topology = build_clos(fabric)
        self.base = base
        links = int(getattr(fabric, "parallel_links", 1))
        self.slots: list[Slot] = [(f"s{s}", i) for s in range(fabric.spines) for i in range(links)]

    def spine_slots(self, src: int, dst: int, sport: int) -> tuple[Slot, Slot] | None:
        """The (uplink, downlink) slots of a cross-leaf flow."""
        path = self.topology.path(f"h{src}", f"h{dst}", sport)
        up = [link for link in path if link.dst.startswith("s")]
        down = [link for link in path if link.src.startswith("s")]
        if len(up) != 1 or len(down) != 1:
            return None
        return _slot(up[0].src_ifname, up[0].dst), _slot(down[0].dst_ifname, down[0].src)

    def sport_for(self, src: int, dst: int, wanted: Slot) -> int:
        """A source port whose path takes the `wanted` spine link both ways: up from the source
        leaf and down to the destination leaf (a job's flows on distinct links)."""
        for sport in SPORTS:
            if self.spine_slots(src, dst, sport) == (wanted, wanted):
                return sport
        raise InputError(
            f"bmwg multi-tenant: no source port puts h{src}->h{dst} on spine link {wanted}"
        )


def job_ranks(base: Base) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Each job's (src, dst) pairs: half of the first leaf's hosts each, to their counterparts
    under the second leaf."""
    half = base.hosts_per_leaf // 2
    pairs = [(h, h + base.hosts_per_leaf) for h in range(base.hosts_per_leaf)]
    return pairs[:half], pairs[half : 2 * half]


class MultiTenant(Procedure):
    name = "multi-tenant"
    section = "10.3"
    title = "Multi-tenant interference"
    objective = (
        "two jobs (each half of a leaf's hosts sending to their counterparts under the next "
        "leaf) on spine links that overlap by a share; each job's time alone and together, and "
        "the interference factor together / alone"
    )
    params = (
        Param("overlap_percent", (0, 25, 50, 75), "spine-link overlap (the draft: 0, 25, 50, 75)"),
        Param("bytes_per_pair_kb", 16384, "what each pair of a job sends"),
    )
    primary = "interference_a"
    kpis = (
        ("actual_overlap_percent", "%"),
        ("jct_a_alone_us", "us"),
        ("jct_a_together_us", "us"),
        ("interference_a", ""),
        ("jct_b_alone_us", "us"),
        ("jct_b_together_us", "us"),
        ("interference_b", ""),
    )
    on_dut = False

    def dut_reason(self) -> str:
        return "the switch's own hash places the flows (its spine links are not the tester's)"

    def check(self, base: Base, params: Mapping[str, Any]) -> None:
        super().check(base, params)
        if base.leaves < 2 or base.hosts_per_leaf < 2 or base.super_spines:
            raise InputError(
                "bmwg multi-tenant: needs a 2-tier Clos of two leaves or more with two hosts a "
                "leaf or more"
            )

    def _plan(
        self, base: Base, placement: Placement, size: int, overlap: int
    ) -> tuple[list[dict[str, Any]], ...]:
        slots = placement.slots
        k = max(1, len(slots) // 2)
        shared = round(overlap / 100 * k)
        job_a = slots[:k]
        job_b = slots[k - shared : 2 * k - shared]
        out = []
        for job, own, pairs in zip("ab", (job_a, job_b), job_ranks(base), strict=True):
            patterns = []
            for i, (src, dst) in enumerate(pairs):
                sport = placement.sport_for(src, dst, own[i % len(own)])
                patterns.append(
                    {
                        "name": f"job{job}-{i}",
                        "kind": "pairs",
                        "pairs": [[src, dst]],
                        "qp_udp_sport": [sport],
                        "bytes_per_pair": size,
                        "message_bytes": max(1, size // 4),
                        "rate_percent": 100.0,
                        "rate_mode": "stateful",
                    }
                )
            out.append(patterns)
        return tuple(out)

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        if done:
            return []
        placement = Placement(base)
        k = max(1, len(placement.slots) // 2)
        size = int(params["bytes_per_pair_kb"]) * 1024
        out = []
        for overlap in params["overlap_percent"]:
            a, b = self._plan(base, placement, size, int(overlap))
            actual = round(round(int(overlap) / 100 * k) / k * 100)
            shown = {"overlap_percent": overlap, "actual_overlap_percent": actual}
            for name, traffic in (("alone-a", a), ("alone-b", b), ("together", [*a, *b])):
                out.append(
                    Trial(
                        f"o{overlap}-{name}",
                        {**shown, "jobs": name},
                        base.trial(f"bmwg-tenants-o{overlap}-{name}", traffic=traffic),
                    )
                )
        return out

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        group = {c["collective_id"]: c.get("process_group", "") for c in run.collectives}
        spans: dict[str, list[float]] = {"a": [], "b": []}
        ends: dict[str, list[float]] = {"a": [], "b": []}
        for f in run.flows:
            name = str(group.get(f["collective_id"], ""))
            if name.startswith("job") and f.get("end_s") is not None:
                spans[name[3]].append(f["start_s"])
                ends[name[3]].append(f["end_s"])
        return {
            f"jct_{job}_us": (max(ends[job]) - min(spans[job])) * 1e6 if ends[job] else None
            for job in "ab"
        }

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        out = []
        for overlap in params["overlap_percent"]:

            def mean(jobs: str, kpi: str, o: Any = overlap) -> Any:
                runs = [
                    r
                    for r in done
                    if r.trial.params["overlap_percent"] == o
                    and r.trial.params["jobs"] == jobs
                    and r.judged
                ]
                return mean_of([r.kpis.get(kpi) for r in runs])

            row: dict[str, Any] = {"trial": f"o{overlap}", "overlap_percent": overlap}
            mine = [r for r in done if r.trial.params["overlap_percent"] == overlap]
            row["actual_overlap_percent"] = (
                mine[0].trial.params["actual_overlap_percent"] if mine else None
            )
            for job in "ab":
                alone = mean(f"alone-{job}", f"jct_{job}_us")
                together = mean("together", f"jct_{job}_us")
                row[f"jct_{job}_alone_us"] = alone
                row[f"jct_{job}_together_us"] = together
                row[f"interference_{job}"] = together / alone if alone and together else None
            row["repeats"] = len(mine)
            row["judged"] = sum(1 for r in mine if r.judged)
            row["primary_cv"] = cv(
                [
                    _ratio(mine, "together", "alone-a", "jct_a_us", k)
                    for k in sorted({r.repeat for r in mine})
                ]
            )
            out.append(row)
        return out

    def anomalies(
        self, base: Base, params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        return [
            f"overlap {r['overlap_percent']}% asked: with {base.spines} spines x the parallel "
            f"links, half a leaf's uplinks per job share {r['actual_overlap_percent']}%"
            for r in rows
            if r.get("actual_overlap_percent") is not None
            and r["actual_overlap_percent"] != r["overlap_percent"]
        ]

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        out = super().deviations(base, params, repeats)
        out.append(
            "each job a set of long flows across the spines (the draft does not say the jobs' "
            "collective, size or ranks)"
        )
        return out


def _ratio(
    runs: Sequence[TrialRun], together: str, alone: str, kpi: str, repeat: int
) -> float | None:
    """One repeat's interference factor: its together run's JCT over its alone run's."""

    def value(jobs: str) -> Any:
        return next(
            (
                r.kpis.get(kpi)
                for r in runs
                if r.trial.params["jobs"] == jobs and r.repeat == repeat and r.judged
            ),
            None,
        )

    num, den = value(together), value(alone)
    return num / den if num and den else None
