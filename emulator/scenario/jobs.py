"""Several jobs on one fabric (`workloads:`): each job's rank-to-host placement.

A job is a workload (a trace or a generator) with a name, the fabric hosts its ranks run on
(rank i on the i-th host listed), its own replay passes and a start offset. The placement is
checked here as far as the scenario alone allows (syntax, a host given to two jobs); the checks
that need the trace's rank count or the fabric's size are made when the run is planned
(emulator.planning.workload), with the same `workloads[i].hosts` key in the message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.config import param
from emulator.scenario.workload_spec import WorkloadSpec

_RANGE = re.compile(r"^(\d+)(?:\s*-\s*(\d+))?$")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
MAX_HOST = 1_000_000  # far above any fabric; bounds a typo like 0-99999999 before it is expanded


@dataclass(frozen=True)
class JobSpec(WorkloadSpec):
    """One job of several that share the fabric (an entry of `workloads:`)."""

    name: str = param(
        "",
        doc="the job's name in every table (the job column), the summary and the study; "
        "default job<i> (its position in the list)",
    )
    hosts: str | tuple[int, ...] | None = param(
        None,
        doc="the fabric hosts of the job's ranks, rank i on the i-th host: a list [0, 1, 8, 9] "
        "or ranges '0-3,8-11' (a host index counts hosts leaf by leaf: leaf 0's first, ...); "
        "default: the lowest hosts no other job lists, as many as the job has ranks",
    )
    start_us: float = param(
        0.0,
        doc="the job's ranks start this long after the replay starts (target time): a tenant "
        "that arrives while another runs",
        unit="us",
        min=0.0,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hosts is not None:
            parse_hosts(self.hosts)  # a placement that does not parse is refused at load time

    @property
    def host_list(self) -> tuple[int, ...] | None:
        return None if self.hosts is None else parse_hosts(self.hosts)


def parse_hosts(hosts: str | Sequence[int]) -> tuple[int, ...]:
    """Host indices from a list or from ranges such as '0-3,8-11'; ValueError('hosts: why')."""
    if isinstance(hosts, str):
        out: list[int] = []
        for part in hosts.split(","):
            match = _RANGE.match(part.strip())
            if match is None:
                where = "" if part == hosts else f" in {hosts!r}"
                raise ValueError(
                    f"hosts: {part.strip()!r}{where} does not parse; write host indices and "
                    "ranges such as '0-3,8-11'"
                )
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last < first:
                raise ValueError(f"hosts: the range {part.strip()!r} runs backwards")
            if last > MAX_HOST:
                raise ValueError(f"hosts: host {last} is beyond any fabric")
            out.extend(range(first, last + 1))
        chosen = tuple(out)
    else:
        chosen = tuple(hosts)
        bad = [h for h in chosen if h < 0 or h > MAX_HOST]
        if bad:
            raise ValueError(f"hosts: {bad[0]} is not a host index")
    if not chosen:
        raise ValueError("hosts: the list is empty")
    repeated = sorted({h for h in chosen if chosen.count(h) > 1})
    if repeated:
        raise ValueError(f"hosts: host {repeated[0]} is listed twice")
    return chosen


def format_hosts(hosts: Sequence[int]) -> str:
    """Host indices as ranges in their order: (0, 1, 2, 3, 8, 9) -> '0-3,8-9'."""
    parts: list[str] = []
    start = prev = None
    for host in [*hosts, None]:
        if prev is not None and host == prev + 1:
            prev = host
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = host
    return ",".join(parts)


@dataclass(frozen=True)
class JobPlacement:
    """Where one job runs, as the run uses it: its name, its hosts in rank order, its replay
    passes and its start offset (target seconds)."""

    name: str
    hosts: tuple[int, ...]
    iterations: int
    start_s: float


def job_names(jobs: Sequence[JobSpec]) -> list[str]:
    return [job.name or f"job{i}" for i, job in enumerate(jobs)]


def check_jobs(jobs: Sequence[JobSpec]) -> None:
    """Names unique, no host given to two jobs (ValueError naming the key)."""
    names = job_names(jobs)
    for i, name in enumerate(names):
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"workloads[{i}].name: {name!r} may hold only letters, digits, '_', '.' and '-' "
                "(it names the job in tables, folders and switch counter classes)"
            )
        if name in names[:i]:
            raise ValueError(
                f"workloads[{i}].name: {name!r} is also workloads[{names.index(name)}]"
            )
    owner: dict[int, int] = {}
    for i, job in enumerate(jobs):
        for host in job.host_list or ():
            if host in owner:
                j = owner[host]
                raise ValueError(
                    f"workloads[{i}].hosts: host {host} is also given to workloads[{j}] "
                    f"({names[j]}); a host runs one job's rank"
                )
            owner[host] = i


def place_jobs(
    jobs: Sequence[JobSpec], ranks: Sequence[int], fabric_hosts: int
) -> list[JobPlacement]:
    """Each job's hosts: its own list, or the lowest hosts no job lists. `ranks[i]` is job i's
    rank count; ValueError('workloads[i].hosts: why') when a job does not fit."""
    names = job_names(jobs)
    taken = {h for job in jobs for h in job.host_list or ()}
    free = (h for h in range(fabric_hosts) if h not in taken)
    placements = []
    for i, (job, n) in enumerate(zip(jobs, ranks, strict=True)):
        key = f"workloads[{i}].hosts"
        hosts = job.host_list
        if hosts is None:
            hosts = tuple(h for _, h in zip(range(n), free, strict=False))
            if len(hosts) < n:
                raise ValueError(
                    f"{key}: job {names[i]} has {n} ranks but only {len(hosts)} of the fabric's "
                    f"{fabric_hosts} hosts are left for it"
                )
        elif len(hosts) != n:
            raise ValueError(
                f"{key}: job {names[i]} has {n} ranks but {len(hosts)} hosts are listed"
            )
        outside = [h for h in hosts if h >= fabric_hosts]
        if outside:
            raise ValueError(
                f"{key}: host {outside[0]} of job {names[i]} is not on the fabric "
                f"(hosts 0..{fabric_hosts - 1})"
            )
        placements.append(JobPlacement(names[i], hosts, job.iterations, job.start_us * 1e-6))
    return placements
