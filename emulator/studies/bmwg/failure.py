"""Link failure during an All-Reduce (sections 11.2 and 11.3): the same All-Reduce iterations
run once steady and once with a spine uplink taken down at the start of one iteration; the
failure iteration's time against the steady run's p99 (zero impact: within it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.studies.bmwg.common import Base, Param, Trial, TrialRun
from emulator.studies.bmwg.kpis import (
    RunData,
    busbw_gbps,
    drops_ppm,
    jct_ratio,
    percentile,
    retransmissions_per_s,
)
from emulator.studies.bmwg.procedure import Procedure


def iteration_times(run: RunData) -> list[tuple[float, float]]:
    """(start, end) of each All-Reduce, in order (the generated trace runs them one after the
    other: each one an iteration)."""
    rows = [
        c
        for c in run.collectives
        if c.get("collective_type") == "ALL_REDUCE" and c.get("end_s") is not None
    ]
    rows.sort(key=lambda c: c["start_s"])
    return [(c["start_s"], c["end_s"]) for c in rows]


def busiest_uplink(run: RunData) -> str | None:
    """The leaf-to-spine port that carried the most bytes (ports.parquet, its last sample)."""
    last: dict[str, int] = {}
    for row in run.ports:
        if row.get("tier_group") == "leaf_up":
            last[row["port"]] = row.get("tx_bytes") or 0
    return max(last, key=lambda p: last[p]) if last and max(last.values()) > 0 else None


class LinkFailure(Procedure):
    name = "link-failure"
    section = "11.2"
    title = "Link failure convergence (and zero-impact failover, 11.3)"
    objective = (
        "an All-Reduce over every rank, iterated; a spine uplink goes down at the start of one "
        "iteration (routes move after the control plane's delay): that iteration's time "
        "against the p99 of the same iterations without the failure"
    )
    params = (
        Param("size_mb", 64, "All-Reduce buffer per rank (the draft: 1 GB)"),
        Param("iterations", 20, "All-Reduces in sequence"),
        Param("fail_iteration", 10, "the iteration the link goes down at the start of"),
        Param(
            "port",
            "",
            "the cable taken down (default: the leaf uplink the steady run loaded most)",
        ),
        Param("reroute_after_us", 50.0, "when the other switches stop using it"),
    )
    repeats = 1
    primary = "failure_iteration_us"
    kpis = (
        ("steady_p99_us", "us"),
        ("failure_iteration_us", "us"),
        ("overhead_percent", "%"),
        ("zero_impact", ""),
        ("busbw_gbps", "Gb/s"),
        ("jct_ratio", ""),
        ("drops_ppm", "ppm"),
        ("retx_per_s", "1/s"),
    )
    on_dut = False

    def dut_reason(self) -> str:
        return "taking a DUT's link down is the lab's (the scenario's link_events act on ours)"

    def check(self, base: Base, params: Mapping[str, Any]) -> None:
        super().check(base, params)
        from emulator.errors import InputError

        if not 0 < params["fail_iteration"] < params["iterations"]:
            raise InputError(
                f"--param fail_iteration={params['fail_iteration']}: an iteration after the "
                f"first and before the last of {params['iterations']}"
            )
        if base.spines < 2 and not params["port"]:
            raise InputError("bmwg link-failure: the fabric needs two spines to fail one uplink")

    def _workload(self, base: Base, params: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "generate": {
                "kind": "allreduce",
                "ranks": base.ranks,
                "size_bytes": int(params["size_mb"]) << 20,
                "iterations": int(params["iterations"]),
            }
        }

    def trials(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[Trial]:
        names = {r.trial.name for r in done}
        if "steady" not in names:
            doc = base.trial("bmwg-link-steady", workload=self._workload(base, params))
            return [Trial("steady", {"run": "steady"}, doc)]
        if "failure" in names:
            return []
        steady = [r for r in done if r.trial.name == "steady"]
        times = iteration_times(steady[0].run)
        k = int(params["fail_iteration"])
        if len(times) <= k:
            return []  # the steady run did not finish its iterations: an anomaly, reported
        port = params["port"] or busiest_uplink(steady[0].run)
        if port is None:
            return []  # the steady run crossed no spine: an anomaly, reported
        event = {
            "port": port,
            "down_at_us": times[k][0] * 1e6,
            "reroute_after_us": params["reroute_after_us"],
        }
        doc = base.trial(
            "bmwg-link-failure",
            workload=self._workload(base, params),
            fabric={"link_events": [event]},
        )
        return [Trial("failure", {"run": f"{port} down at iteration {k}"}, doc)]

    def measure(
        self, run: RunData, trial: Trial, base: Base, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        times = iteration_times(run)
        spans = [(end - start) * 1e6 for start, end in times]
        out: dict[str, Any] = {
            # the All-Reduce's mean BusBW (factor 2(n-1)/n) and the run's JCT over its roofline
            "busbw_gbps": busbw_gbps(run).get("ALL_REDUCE"),
            "jct_ratio": jct_ratio(run),
            "drops_ppm": drops_ppm(run),
            "retx_per_s": retransmissions_per_s(run),
        }
        if trial.name == "steady":
            out["steady_p99_us"] = percentile(spans, 99)
            return out
        k = int(params["fail_iteration"])
        out["failure_iteration_us"] = spans[k] if len(spans) > k else None
        return out

    def rows(
        self, base: Base, params: Mapping[str, Any], done: Sequence[TrialRun]
    ) -> list[dict[str, Any]]:
        rows = super().rows(base, params, done)
        steady = next((r["steady_p99_us"] for r in rows if r["trial"] == "steady"), None)
        for row in rows:
            failure = row.get("failure_iteration_us")
            if row["trial"] == "failure" and steady and failure is not None:
                row["steady_p99_us"] = steady
                row["overhead_percent"] = (failure / steady - 1) * 100
                row["zero_impact"] = failure <= steady
        return rows

    def anomalies(
        self, base: Base, params: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]
    ) -> list[str]:
        if any(r["trial"] == "failure" for r in rows):
            return []
        return [
            f"the failure run did not run: the steady run did not finish iteration "
            f"{params['fail_iteration']}, or crossed no spine link (see its folder)"
        ]

    def deviations(self, base: Base, params: Mapping[str, Any], repeats: int) -> list[str]:
        return [
            *super().deviations(base, params, repeats),
            f"All-Reduce of {params['size_mb']} MB over {base.ranks} ranks (the draft: 1 GB "
            "over 128); the steady p99 over the steady run's iterations",
            "one cable (a spine uplink); the leaf uplink, spine switch and superspine cases "
            "are not run",
        ]
