"""Run a scenario's workload on a Mininet network your own script built and started.

    from mininet.net import Mininet
    from emulator.mininet import run_on_mininet

    net = Mininet(topo=MyTopo(), ...)   # hosts, Linux routers, links, addresses, routes: yours
    net.start()
    try:
        result = run_on_mininet(net, "my_scenario.yaml")
        print(result.summary["fidelity"]["verdict"], result.out_dir)
    finally:
        net.stop()

The scenario's fabric section names the ranks' hosts (`fabric: {kind: mininet, hosts: [h1, h2,
h3, h4], host_link_gbps: 100}`); its workload, transport, collectives and metrics are any
scenario's. The run takes what it needs from the network and gives it back
(fabrics/user_mininet.py), and writes the same results folder as any run (docs/mininet.md says
what is measured on a user's network and what is not). The network stays the caller's: it is
neither started nor stopped here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from emulator.backends.mininet.backend import network_in_use
from emulator.errors import ScenarioError
from emulator.run import RunOptions, RunResult, run_scenario
from emulator.scenario import load_scenario
from emulator.scenario.model import Scenario
from fabrics.spec import MininetSpec
from fabrics.user_mininet import DEFAULT_PREFIX


def run_on_mininet(
    net: Any,
    scenario: str | Path | Scenario,
    *,
    out_dir: str | Path | None = None,
    tdf: float | None = None,
    progress: bool = False,
    report: bool = True,
    prefix: str = DEFAULT_PREFIX,
) -> RunResult:
    """Replay the scenario's workload on the started Mininet network `net` and return the run's
    result (its results folder, summary and verdict). `scenario`: a YAML path or a loaded
    Scenario whose fabric is `kind: mininet`; `tdf` overrides run.time_dilation (auto: the
    factor the hosts' TCLink rates imply); `prefix`: of the names given to the hosts'
    namespaces while the run lasts."""
    loaded = scenario if isinstance(scenario, Scenario) else load_scenario(Path(scenario))
    if not isinstance(loaded.fabric, MininetSpec):
        raise ScenarioError(
            f"{loaded.source or 'scenario'}: fabric: run_on_mininet needs kind: mininet (the "
            "ranks' Mininet hosts by name)"
        )
    options = RunOptions(
        out_dir=Path(out_dir) if out_dir is not None else None,
        progress=progress,
        tdf=tdf,
        fabric_prefix=prefix,
        report=report,
        backend="mininet",
    )
    with network_in_use(net):
        return run_scenario(loaded, dataclasses.replace(options))
