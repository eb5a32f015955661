"""Mininet without a network: the scenario keys, the refusals (one line each, before anything
is made), how a user's nodes are sorted into read and left-alone switches, the link-rate check
and the time dilation a network's links imply. Fake nodes stand for Mininet's."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from emulator.backends import backend_name
from emulator.backends.base import BackendOptions, TimescaleRequest
from emulator.backends.mininet.backend import (
    NO_NETWORK,
    MininetEngineBackend,
    mininet_timescale,
    network_in_use,
)
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.scenario import load_scenario
from fabrics import mininet_builder
from fabrics.spec import MininetSpec
from fabrics.user_mininet import _rate_warnings, _switches, check_network

SCENARIO = """\
name: user_net
workload:
  generate: {{kind: moe_mix, ranks: 2, expert_parallel_size: 2, dispatch_bytes: 65536,
             allreduce_bytes: 65536, iterations: 1}}
fabric:
  kind: mininet
  hosts: [h1, h2]
  host_link_gbps: 100
{extra}"""


class FakeIntf:
    def __init__(self, name: str, bw: float | None = None) -> None:
        self.name = name
        self.params = {"bw": bw} if bw else {}

    def __str__(self) -> str:
        return self.name


class FakeShell:
    def poll(self) -> None:
        return None


class Node:
    """A Mininet Node's face: a shell, a namespace, interfaces, an IP."""

    def __init__(self, name: str, ip: str = "", bw: float | None = None, ns: bool = True) -> None:
        self.name, self.ip, self.inNamespace = name, ip, ns
        self.shell: Any = FakeShell()
        self.pid = 1000
        self.intf = FakeIntf(f"{name}-eth0", bw)

    def IP(self) -> str:
        return self.ip

    def defaultIntf(self) -> FakeIntf:
        return self.intf

    def intfList(self) -> list[FakeIntf]:
        return [self.intf]


class OVSSwitch(Node):
    pass


def net(**nodes: Node) -> Any:
    return SimpleNamespace(nameToNode=nodes)


def spec(**kw: Any) -> MininetSpec:
    return MininetSpec(**{"hosts": ("h1", "h2"), "host_link_gbps": 100.0, **kw})


def loaded(tmp_path: Path, extra: str = "") -> Any:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(extra=extra))
    return load_scenario(path)


def test_the_scenario_keys_and_their_one_line_refusals(tmp_path: Path) -> None:
    scenario = loaded(tmp_path)
    assert isinstance(scenario.fabric, MininetSpec)
    assert scenario.fabric.rank_rate_bps == 100e9 and scenario.fabric.port_rate_bps == 100e9
    assert backend_name(scenario) == "mininet"
    for bad, said in (
        ({"hosts": ()}, "hosts: name the Mininet host of each rank"),
        ({"hosts": ("h1", "h1")}, "hosts: a Mininet host can carry one rank"),
        ({"switches": ("h1",)}, "switches: h1 is also a rank's host"),
    ):
        with pytest.raises(ValueError, match=said):
            spec(**bad)
    with pytest.raises(ScenarioError, match=r"run\.backend: netns runs a clos fabric"):
        backend_name(scenario, "netns")


def test_emulate_run_alone_has_no_network_and_says_how_to_get_one(tmp_path: Path) -> None:
    scenario = loaded(tmp_path)
    with pytest.raises(ScenarioError) as err:
        MininetEngineBackend().check(scenario, BackendOptions(say=print))
    assert str(err.value) == NO_NETWORK and "\n" not in NO_NETWORK
    assert "run_on_mininet" in NO_NETWORK and "builder: mininet" in NO_NETWORK


def test_the_networks_hosts_are_checked_before_anything_is_made() -> None:
    good = net(h1=Node("h1", "10.0.0.1"), h2=Node("h2", "10.0.0.2"))
    assert set(check_network(good, spec())) == {"h1", "h2"}
    with pytest.raises(ScenarioError, match=r"fabric.hosts: no node 'h2' in the Mininet network"):
        check_network(net(h1=Node("h1", "10.0.0.1"), r1=Node("r1")), spec())
    stopped = Node("h2", "10.0.0.2")
    stopped.shell = None
    with pytest.raises(ScenarioError, match=r"fabric\.hosts: h2 is not running"):
        check_network(net(h1=Node("h1", "10.0.0.1"), h2=stopped), spec())
    with pytest.raises(ScenarioError, match="h2 is in the root namespace"):
        check_network(net(h1=Node("h1", "10.0.0.1"), h2=Node("h2", "10.0.0.2", ns=False)), spec())
    with pytest.raises(ScenarioError, match="h2 has no IPv4 address"):
        check_network(net(h1=Node("h1", "10.0.0.1"), h2=Node("h2", "fe80::1")), spec())
    with pytest.raises(ScenarioError, match=r"fabric\.switches: no node 'r9'"):
        check_network(good, spec(switches=("r9",)))


def test_switches_are_read_where_they_are_linux_nodes_in_namespaces() -> None:
    nodes = {
        "h1": Node("h1"),
        "h2": Node("h2"),
        "r1": Node("r1"),
        "s1": OVSSwitch("s1", ns=False),
        "br0": Node("br0", ns=False),
    }
    read, left = _switches(nodes, spec())
    assert read == ["r1"]
    assert set(left) == {"s1", "br0"}
    assert "OVSSwitch" in left["s1"] and "root namespace" in left["br0"]
    assert _switches(nodes, spec(switches=("r1",))) == (["r1"], {})


def test_a_links_rate_must_be_the_scenarios_at_the_tdf() -> None:
    # 100 Gb/s at TDF 1000 is 100 Mb/s: a 100 Mb/s TCLink agrees, a 50 Mb/s one does not
    assert _rate_warnings(spec(), [Node("h1", bw=100), Node("h2", bw=100.5)], 1 / 1000) == []
    with pytest.raises(ScenarioError, match="is 100 Mb/s per NIC, but h2-eth0's link carries 50"):
        _rate_warnings(spec(), [Node("h1", bw=100), Node("h2", bw=50)], 1 / 1000)
    (said,) = _rate_warnings(spec(), [Node("h1"), Node("h2", bw=100)], 1 / 1000)
    assert said.startswith("h1-eth0: no rate of its own")


def request(scenario: Any, tdf: float | None = None) -> TimescaleRequest:
    planned = SimpleNamespace(world_size=2)
    return TimescaleRequest(scenario, BackendOptions(say=print, tdf=tdf), planned, None)  # type: ignore[arg-type]


def test_auto_takes_the_factor_the_links_imply(tmp_path: Path) -> None:
    scenario = loaded(tmp_path, "run: {time_dilation: auto}\n")
    links = net(h1=Node("h1", bw=100), h2=Node("h2", bw=100))
    with network_in_use(links):
        choice = mininet_timescale(request(scenario))
    assert choice.tdf == 1000.0 and choice.how == "mininet links"
    with network_in_use(net(h1=Node("h1", bw=100), h2=Node("h2"))):
        with pytest.raises(ScenarioError, match="do not all have one rate"):
            mininet_timescale(request(scenario))
        assert mininet_timescale(request(scenario, tdf=500)).tdf == 500
    number = loaded(tmp_path, "run: {time_dilation: 250}\n")
    assert mininet_timescale(request(number)).tdf == 250


def test_the_builder_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mininet.node", None)  # import fails
    with pytest.raises(
        EnvironmentProblem, match=r"fabric\.builder: mininet needs Mininet's Python"
    ):
        mininet_builder.mininet_api()
    with pytest.raises(ScenarioError, match="builder: mininet builds a fabric on one machine"):
        mininet_builder.refuse_part()
