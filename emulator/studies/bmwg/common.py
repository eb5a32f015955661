"""What every BMWG procedure shares: the base scenario it runs on, its trials (one scenario
each, run `repeats` times), the runs' results, and the parameters a procedure takes.

A procedure never edits the base's fabric beyond what the draft's procedure varies (an ECN
threshold, a load-balancing mode, a link taken down): its trials keep the base's fabric,
transport, engine and simulator sections and replace its work (workload, traffic, streams) with
the procedure's own.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from emulator.errors import InputError
from emulator.studies.bmwg.kpis import RunData

# sections of the base that describe its work: a procedure's trials replace them
WORK_KEYS = ("workload", "workloads", "traffic", "streams", "expect")


@dataclass(frozen=True)
class Base:
    """The scenario a procedure runs on: its document and the facts the trials need."""

    path: Path
    document: dict[str, Any]
    ranks: int
    line_rate_bps: float
    dut: bool
    leaves: int = 0  # a Clos's (0 toward a switch under test)
    hosts_per_leaf: int = 0
    spines: int = 0
    super_spines: int = 0
    path_mtu_bytes: int = 4096

    @classmethod
    def read(cls, path: Path) -> Base:
        from emulator.scenario import load_scenario
        from fabrics.spec import ClosSpec

        if not path.is_file():
            raise InputError(f"{path}: no such scenario file")
        scenario = load_scenario(path)
        document = yaml.safe_load(path.read_text()) or {}
        fabric = scenario.fabric
        mtu = scenario.transport.path_mtu_bytes
        if isinstance(fabric, ClosSpec):
            return cls(
                path,
                document,
                fabric.ranks,
                fabric.rank_rate_bps,
                False,
                fabric.leaves,
                fabric.hosts_per_leaf,
                fabric.spines,
                fabric.super_spines,
                mtu,
            )
        return cls(path, document, fabric.ranks, fabric.rank_rate_bps, True, path_mtu_bytes=mtu)

    def leaf_of(self, rank: int) -> int:
        return rank // self.hosts_per_leaf if self.hosts_per_leaf else 0

    def trial(
        self,
        name: str,
        *,
        traffic: Sequence[Mapping[str, Any]] = (),
        streams: Sequence[Mapping[str, Any]] = (),
        workload: Mapping[str, Any] | None = None,
        fabric: Mapping[str, Any] | None = None,
        transport: Mapping[str, Any] | None = None,
        sim: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The base with the procedure's work and changes (nested keys merged)."""
        doc = copy.deepcopy(self.document)
        for key in WORK_KEYS:
            doc.pop(key, None)
        doc["name"] = name
        if traffic:
            doc["traffic"] = [dict(t) for t in traffic]
        if streams:
            doc["streams"] = [dict(s) for s in streams]
        if workload is not None:
            doc["workload"] = dict(workload)
        for key, changes in (
            ("fabric", fabric),
            ("transport", transport),
            ("sim", sim),
            ("metrics", metrics),
        ):
            if changes:
                doc[key] = merged(doc.get(key) or {}, changes)
        # a study's runs serve no live exporter (its port would be busy from run to run)
        doc["metrics"] = merged(doc.get("metrics") or {}, {"prometheus": {"enabled": False}})
        return doc


def merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass(frozen=True)
class Trial:
    """One scenario of a procedure (a value of what it varies), run `repeats` times."""

    name: str  # unique within the procedure, a folder name
    params: Mapping[str, Any]  # what it varies, as the results table shows it
    document: Mapping[str, Any]
    repeats: int | None = None  # None: the procedure's


# what collectors.fidelity says of resends in a lossless fabric
RESEND_REASON = "packets were retransmitted in a fabric the scenario calls lossless"


@dataclass
class TrialRun:
    """One repeat of a trial, read back. Judged: its verdict ok and not partial, or (where
    the procedure waives it) flagged only for its resends."""

    trial: Trial
    repeat: int
    run: RunData
    kpis: dict[str, Any] = field(default_factory=dict)
    waive_resends: bool = False

    @property
    def waived(self) -> bool:
        reasons = self.run.reasons
        return (
            self.waive_resends
            and self.run.verdict == "degraded"
            and bool(reasons)
            and all(RESEND_REASON in r for r in reasons)
        )

    @property
    def judged(self) -> bool:
        if self.run.summary.get("partial"):
            return False
        return self.run.verdict == "ok" or self.waived


@dataclass(frozen=True)
class Param:
    """A parameter of a procedure: its default (the draft's value where it gives one)."""

    name: str
    default: Any
    doc: str

    def parse(self, text: str) -> Any:
        """A value given as text: a list (comma-separated) where the default is one."""
        kind = type(self.default[0]) if isinstance(self.default, tuple) else type(self.default)
        try:
            if isinstance(self.default, tuple):
                return tuple(kind(v) for v in text.split(",") if v.strip())
            if kind is bool:
                return text.lower() in ("1", "true", "yes", "on")
            return kind(text)
        except ValueError:
            raise InputError(
                f"--param {self.name}={text}: expected {kind.__name__}"
                + (" values, comma-separated" if isinstance(self.default, tuple) else "")
            ) from None


def params_of(declared: Sequence[Param], given: Sequence[str], procedure: str) -> dict[str, Any]:
    """The procedure's parameters: its defaults, with each --param KEY=VALUE applied."""
    by_name = {p.name: p for p in declared}
    out = {p.name: p.default for p in declared}
    for item in given:
        key, sep, text = item.partition("=")
        if not sep or key not in by_name:
            names = ", ".join(by_name) or "none"
            raise InputError(f"--param {item}: {procedure} takes KEY=VALUE with KEY one of {names}")
        out[key] = by_name[key].parse(text)
    return out
