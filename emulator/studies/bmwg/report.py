"""The BMWG report: bmwg.json, report.txt and report.html with the draft's reporting sections
(draft-calabria-bmwg-ai-fabric-training-bench-02 section 13: device identification, topology,
test configuration, host configuration, results, anomalies, repeatability statement) and a
comparability statement (what these numbers can be compared with). No pass/fail: the draft
sets no thresholds, and neither does this report."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator import __version__
from emulator.studies.bmwg.common import Base, TrialRun
from emulator.studies.bmwg.kpis import ALGO_FACTORS
from emulator.studies.bmwg.procedure import Procedure
from emulator.studies.bmwg.registry import NOT_IMPLEMENTED

REPORT_JSON = "bmwg.json"


@dataclass
class BmwgResult:
    out_dir: Path
    document: dict[str, Any]
    text: str
    report: Path | None = None
    runs: list[TrialRun] = field(default_factory=list)


DRAFT = "draft-calabria-bmwg-ai-fabric-training-bench-02"
TERMINOLOGY = "draft-calabria-bmwg-ai-fabric-terminology-02"
NO_PASS_FAIL = (
    "The draft sets no pass/fail thresholds (BMWG charter; section 4 and appendix B): this "
    "report states what was measured and how, and judges nothing."
)
CV_NOTE = "the draft recommends a CV under 5% for a test's validity (section 13, item 7)"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _identification(base: Base, first: Mapping[str, Any], backend: str) -> dict[str, Any]:
    fabric = (first.get("fabric_backend") or {}) if first else {}
    common = {
        "tester": f"chakra-emulator {__version__} (this project)",
        "backend": backend,
        "machine": f"{platform.node()}, {os.cpu_count()} cores, {_cpu()}, Linux "
        f"{platform.release()}",
    }
    if backend == "sim":
        return {
            **common,
            "device": "the packet-level simulator of this project: switches as output-queued "
            "ports with the DCQCN marking law, a shared buffer for PFC's threshold, ECMP and "
            "the load balancers of the scenario",
            "model_leaves_out": (first.get("fidelity") or {}).get("leaves_out", []),
        }
    if base.dut:
        return {
            **common,
            "device": "the switch under test between the tester's ports; its vendor, model, "
            "ASIC, NOS and buffer architecture are the lab's to state (this tester cannot read "
            "them): the scenario's description says " + repr(base.document.get("description", "")),
            "tester_ports": (base.document.get("fabric") or {}).get("interfaces", []),
        }
    return {
        **common,
        "device": "the emulated Clos of this project: Linux network namespaces as switches, "
        "veth links shaped by HTB at the target rate / TDF, the eBPF marker (DCQCN's law on a "
        "phantom queue) and balancer at each port",
        "marker": first.get("marker"),
        "fabric_backend": {k: fabric.get(k) for k in ("kind", "ports", "marker") if k in fabric},
    }


def _topology(base: Base, first: Mapping[str, Any]) -> dict[str, Any]:
    if base.dut:
        kind = "the switch under test (the draft's topology is the lab's: A, B or C)"
    elif base.super_spines:
        kind = "B: 3-tier Clos with super spines"
    else:
        kind = "A: 2-tier leaf-spine"
    return {"draft_topology": kind, "fabric": first.get("fabric"), "ranks": base.ranks}


def _configuration(scenario: Any) -> dict[str, Any]:
    fabric: dict[str, Any] = dataclasses.asdict(scenario.fabric)
    transport = dataclasses.asdict(scenario.transport)
    keep = (
        "pfc",
        "marker",
        "leaf",
        "spine",
        "super_spine",
        "mtu_bytes",
        "host_link_gbps",
        "fabric_link_gbps",
        "link_delay_us",
        "switch_latency_ns",
        "priority_dscps",
    )
    thresholds = {}
    for tier in ("leaf", "spine", "super_spine"):
        spec = getattr(scenario.fabric, tier, None)
        if spec is not None and spec.ecn.enabled:
            # resolved at the fabric links' speed (the HPCC table's defaults where not given)
            kmin, kmax = spec.ecn.thresholds_bytes(scenario.fabric.fabric_link_gbps)
            thresholds[tier] = {"kmin_bytes": kmin, "kmax_bytes": kmax, "pmax": spec.ecn.pmax}
    return {
        "fabric": {k: v for k, v in fabric.items() if k in keep},
        "ecn_thresholds_at_fabric_link_speed": thresholds,
        "dcqcn": transport.get("dcqcn"),
    }


def _host(scenario: Any, first: Mapping[str, Any]) -> dict[str, Any]:
    t = scenario.transport
    engine = first.get("engine") or {}
    return {
        "generator": "this project's RoCEv2 engine (a traffic generator, not accelerators: the "
        "draft's platform (a), section 3.3.3)",
        "transport": {
            "congestion_control": t.congestion_control,
            "reliability": t.reliability,
            "entropy": t.entropy,
            "path_mtu_bytes": t.path_mtu_bytes,
            "dscp": t.dscp,
            "data_ecn": t.data_ecn,
        },
        "tdf": first.get("tdf"),
        "data_path": (engine.get("data_path") or {}).get("path"),
        "busbw_factors": ALGO_FACTORS,
    }


def _rows_text(procedure: Procedure, rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "(no results)"
    keys = [k for k in rows[0] if k not in ("trial", "bursts_tried")]
    header = ["trial", *keys]

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    body = [[str(r["trial"]), *(cell(r.get(k)) for k in keys)] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=False)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in body]
    units = ", ".join(f"{k} ({u})" for k, u in procedure.kpis if u)
    return "\n".join(lines) + (f"\nunits: {units}" if units else "")


def write_report(
    out_dir: Path,
    procedure: Procedure,
    base: Base,
    params: Mapping[str, Any],
    done: Sequence[TrialRun],
    repeats: int,
    backend: str,
    anomalies: list[str],
) -> BmwgResult:
    from emulator.scenario import load_scenario

    first_run = done[0].run if done else None
    first = first_run.summary if first_run else {}
    scenario = load_scenario(first_run.folder / "scenario.yaml") if first_run else None
    rows = procedure.rows(base, params, done)
    flagged = [
        f"{r.trial.name} repeat {r.repeat + 1}: {r.run.verdict}"
        + (
            " (judged: its only flag is its resends, what the trial measures)"
            if r.waived
            else " (left out of the means)"
        )
        + f": {'; '.join(r.run.reasons[:3])}"
        for r in done
        if r.run.verdict != "ok" or r.run.summary.get("partial")
    ]
    for row in rows:
        if row.get("stopped_by"):
            anomalies.append(
                f"{row['trial']}: the search stopped at a flagged run ({row['stopped_by']})"
            )
    anomalies = [*anomalies, *procedure.anomalies(base, params, rows)]
    deviations = procedure.deviations(base, params, repeats)
    document: dict[str, Any] = {
        "draft": DRAFT,
        "terminology": TERMINOLOGY,
        "procedure": {
            "name": procedure.name,
            "section": procedure.section,
            "title": procedure.title,
            "objective": procedure.objective,
            "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
        },
        "no_pass_fail": NO_PASS_FAIL,
        "device_identification": _identification(base, first, backend),
        "topology": _topology(base, first),
        "test_configuration": _configuration(scenario) if scenario else {},
        "host_configuration": _host(scenario, first) if scenario else {},
        "results": {
            "kpis": [{"name": k, "unit": u} for k, u in procedure.kpis],
            "rows": rows,
            "runs": [
                {
                    "trial": r.trial.name,
                    "repeat": r.repeat + 1,
                    "folder": str(r.run.folder),
                    "verdict": r.run.verdict,
                    "judged": r.judged,
                    "kpis": r.kpis,
                }
                for r in done
            ],
        },
        "anomalies": [*anomalies, *flagged],
        "deviations_from_the_draft": deviations,
        "repeatability": {
            "repeats": repeats,
            "primary_kpi": procedure.primary,
            "per_trial": [
                {
                    "trial": r["trial"],
                    "repeats": r["repeats"],
                    "judged": r["judged"],
                    "cv": r.get("primary_cv"),
                }
                for r in rows
            ],
            "note": CV_NOTE,
        },
        "comparability": _comparability(backend, first),
        "not_implemented": NOT_IMPLEMENTED,
    }
    text = _text(document, procedure, rows)
    (out_dir / REPORT_JSON).write_text(json.dumps(document, indent=2, default=str) + "\n")
    (out_dir / "report.txt").write_text(text + "\n")
    page = out_dir / "report.html"
    page.write_text(_html(document, text))
    return BmwgResult(out_dir, document, text, page, list(done))


def _comparability(backend: str, first: Mapping[str, Any]) -> list[str]:
    out = [
        "The draft has no comparability section; this one says what these numbers may be set "
        "beside.",
        "Generated traffic (the draft's platform (a)): RoCEv2 queue pairs and stateless frames "
        "from this tester, no accelerators, no collective library's scheduling.",
    ]
    if backend == "sim":
        out.append(
            "Simulated: exact and repeatable for a seed; comparable with the same procedure on "
            "the emulated fabric (docs/simulation.md gives how far the two agree) and with a "
            "switch only for the behaviour the model keeps (summary.json leaves_out)."
        )
    elif backend == "dut":
        out.append(
            "A physical switch in real time: comparable with other switches under the same "
            "scenario, parameters and tester ports; the tester's own limits (its NICs' rate "
            f"cap, its verdict) are in each run's summary.json (TDF {first.get('tdf')})."
        )
    else:
        out.append(
            f"The emulated fabric at time dilation {first.get('tdf')}: rates and times are the "
            "target's (the machine runs them that many times slower); every run's fidelity "
            "verdict says whether the machine kept up. Comparable with the simulator's run of "
            "the same procedure; not with a switch's buffers and ASIC, which it does not model."
        )
    out.append(
        "Parameters that depart from the draft's are listed under deviations; results under "
        "other parameters are not comparable to the draft's values without them."
    )
    return out


def _text(
    document: Mapping[str, Any], procedure: Procedure, rows: Sequence[Mapping[str, Any]]
) -> str:
    p = document["procedure"]
    lines = [
        f"BMWG {p['name']} (section {p['section']} of {DRAFT}): {p['title']}",
        p["objective"],
        NO_PASS_FAIL,
        "",
        _rows_text(procedure, rows),
    ]
    for title, key in (
        ("anomalies", "anomalies"),
        ("deviations from the draft", "deviations_from_the_draft"),
    ):
        if document[key]:
            lines += ["", f"{title}:", *(f"  - {a}" for a in document[key])]
    rep = document["repeatability"]
    cvs = ", ".join(
        f"{t['trial']} {t['cv']:.3f}" if t["cv"] is not None else f"{t['trial']} -"
        for t in rep["per_trial"]
    )
    lines += [
        "",
        f"repeatability: {rep['repeats']} repeats; CV of {rep['primary_kpi']}: {cvs} ({CV_NOTE})",
    ]
    return "\n".join(lines)


def _html(document: Mapping[str, Any], text: str) -> str:
    def block(value: Any) -> str:
        return f"<pre>{html.escape(json.dumps(value, indent=2, default=str))}</pre>"

    p = document["procedure"]
    sections = [
        ("1. Device identification", block(document["device_identification"])),
        ("2. Test topology", block(document["topology"])),
        ("3. Test configuration", block(document["test_configuration"])),
        ("4. Host configuration", block(document["host_configuration"])),
        ("5. Test results", f"<pre>{html.escape(text)}</pre>" + block(document["results"]["runs"])),
        (
            "6. Anomalies",
            "<ul>"
            + "".join(
                f"<li>{html.escape(a)}</li>"
                for a in [*document["anomalies"], *document["deviations_from_the_draft"]]
            )
            + "</ul>",
        ),
        ("7. Repeatability statement", block(document["repeatability"])),
        (
            "Comparability statement",
            "<ul>"
            + "".join(f"<li>{html.escape(c)}</li>" for c in document["comparability"])
            + "</ul>",
        ),
        ("Procedures of the draft not run by this tool", block(document["not_implemented"])),
    ]
    body = "".join(f"<h2>{html.escape(t)}</h2>{c}" for t, c in sections)
    title = f"BMWG {p['name']} (section {p['section']})"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}pre{background:#f6f6f6;"
        "padding:.5em;overflow-x:auto}</style></head><body>"
        f"<h1>{html.escape(title)}: {html.escape(p['title'])}</h1>"
        f"<p>{html.escape(p['objective'])}</p><p><em>{html.escape(NO_PASS_FAIL)}</em></p>"
        f"<p>{DRAFT}, terminology {TERMINOLOGY}</p>{body}</body></html>"
    )
