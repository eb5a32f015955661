"""The cluster's placement, its scenario key and its security checks (no Ray, no root)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from emulator.backends import backend_name
from emulator.backends.cluster.placement import plan_cluster
from emulator.errors import EnvironmentProblem, ScenarioError
from emulator.raycluster.join import (
    check_security,
    cluster_auth_problem,
    parse_address,
    token_problem,
)
from emulator.scenario import load_scenario
from emulator.scenario.cluster import SERVER_RESOURCE_PREFIX, ClusterSpec, ServerSpec, UnderlaySpec
from fabrics.spec import ClosSpec

CLOS = ClosSpec(hosts_per_leaf=2, leaves=2, spines=2)
UA = UnderlaySpec(interface="ul0", address="10.9.0.1")
UB = UnderlaySpec(interface="ul0", address="10.9.0.2")


def _two(**b: object) -> ClusterSpec:
    return ClusterSpec(
        address="127.0.0.1:6379",
        servers=(
            ServerSpec(name="a", leaves=(0,), spines=(0, 1), underlay=UA),
            ServerSpec(**{"name": "b", "leaves": (1,), "underlay": UB, **b}),  # type: ignore[arg-type]
        ),
    )


def test_split_by_leaf_gives_each_server_its_ranks_and_both_ends_of_each_tunnel() -> None:
    plan = plan_cluster(_two(), CLOS, "emu-")
    a, b = plan.shares
    assert (a.ranks, b.ranks) == ((0, 1), (2, 3))
    assert (a.prefix, b.prefix) == ("emu-a-", "emu-b-")
    assert a.part is not None and b.part is not None
    assert a.part.nodes == {"h0", "h1", "l0", "s0", "s1"}
    assert b.part.nodes == {"h2", "h3", "l1"}
    # l1's two uplinks cross: one tunnel end on each side, same VNI, addresses swapped
    assert plan.cross_cables() == 2
    assert a.part.tunnels.keys() == b.part.tunnels.keys()
    for index, end in a.part.tunnels.items():
        far = b.part.tunnels[index]
        assert end.vni == far.vni
        assert (
            (end.local_ip, end.remote_ip)
            == (far.remote_ip, far.local_ip)
            == ("10.9.0.1", "10.9.0.2")
        )
    assert plan.server_of_rank() == {0: "a", 1: "a", 2: "b", 3: "b"}


def test_unnamed_spines_go_to_the_first_server() -> None:
    cluster = ClusterSpec(
        servers=(
            ServerSpec(name="a", leaves=(0,), underlay=UA),
            ServerSpec(name="b", leaves=(1,), underlay=UB),
        )
    )
    a, _ = plan_cluster(cluster, CLOS, "emu-").shares
    assert a.part is not None and {"s0", "s1"} <= a.part.nodes


@pytest.mark.parametrize(
    ("cluster", "message"),
    [
        (ClusterSpec(), "run.cluster.servers: a run over a cluster needs"),
        (
            ClusterSpec(servers=(ServerSpec(name="a", leaves=(0,)),)),
            "run.cluster.servers: leaf 1 is on no server",
        ),
        (
            ClusterSpec(
                servers=(
                    ServerSpec(name="a", leaves=(0, 1)),
                    ServerSpec(name="b", leaves=(1,), underlay=UB),
                )
            ),
            "run.cluster.servers[1].leaves: l1 is already on server a",
        ),
        (
            ClusterSpec(servers=(ServerSpec(name="a", leaves=(0, 7)),)),
            "run.cluster.servers[0].leaves: the fabric has no l7",
        ),
        (
            ClusterSpec(
                servers=(
                    ServerSpec(name="a", leaves=(0,), underlay=UA),
                    ServerSpec(name="b", leaves=(1,)),
                )
            ),
            "run.cluster.servers[1].underlay: server b has cables to other servers",
        ),
    ],
)
def test_bad_placements_are_refused_naming_the_key(cluster: ClusterSpec, message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan_cluster(cluster, CLOS, "emu-")


def test_server_names_are_short_and_unique() -> None:
    with pytest.raises(ValueError, match="name"):
        ServerSpec(name="Server-A")
    with pytest.raises(ValueError, match="named twice"):
        ClusterSpec(servers=(ServerSpec(name="a"), ServerSpec(name="a")))
    assert ServerSpec(name="a").ray_resource == "emulator-server-a"


def test_a_scenario_with_servers_runs_over_the_cluster(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: split\n"
        "workload: {generate: {kind: allreduce, ranks: 4}}\n"
        "fabric: {kind: clos, hosts_per_leaf: 2, leaves: 2, spines: 2}\n"
        "run:\n"
        "  time_dilation: 1000\n"
        "  cluster:\n"
        "    address: 10.0.0.1:6379\n"
        "    servers:\n"
        "      - {name: a, leaves: [0], underlay: {interface: ens5, address: 10.9.0.1}}\n"
        "      - {name: b, leaves: [1], underlay: {interface: ens5, address: 10.9.0.2}}\n"
    )
    scenario = load_scenario(path)
    assert scenario.run.cluster.servers[1].underlay == UnderlaySpec("ens5", "10.9.0.2")
    assert backend_name(scenario) == "cluster"
    assert backend_name(scenario, "netns") == "netns"  # --backend netns: this machine
    plain = tmp_path / "p.yaml"
    plain.write_text(path.read_text().split("  cluster:")[0])
    assert backend_name(load_scenario(plain)) == "netns"


def test_a_run_without_a_cluster_never_imports_ray() -> None:
    import subprocess

    code = (
        "import sys; import emulator.run.pipeline, emulator.backends, emulator.engine.worker; "
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_addresses_and_tokens() -> None:
    assert parse_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert parse_address("[::1]:6379") == ("::1", 6379)
    with pytest.raises(ScenarioError, match="not host:port"):
        parse_address("10.0.0.1")
    home = Path("/nonexistent-home")
    assert token_problem({}, home) == "RAY_AUTH_MODE=token is not set"
    assert token_problem({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "x"}, home) is None
    assert "no token" in str(token_problem({"RAY_AUTH_MODE": "token"}, home))


def test_a_driver_without_a_token_is_refused_on_any_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loopback is no exemption: Ray's servers listen on the node's network address anyway, and
    other nodes may have joined over the network."""
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    for address in ("127.0.0.1:6379", "192.0.2.7:6379"):
        with pytest.raises(EnvironmentProblem, match="Ray token authentication is off here"):
            check_security(address)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    check_security("192.0.2.7:6379")


def _node(address: str, port: int, alive: bool = True, server: str | None = None) -> dict:
    resources = {"CPU": 1.0, **({f"{SERVER_RESOURCE_PREFIX}{server}": 1.0} if server else {})}
    return {
        "NodeManagerAddress": address,
        "NodeManagerPort": port,
        "NodeManagerHostname": f"host-{address}",
        "Alive": alive,
        "Resources": resources,
    }


def test_the_cluster_itself_must_refuse_a_caller_without_the_token() -> None:
    """The GCS and every live node's raylet are asked without a token; the first that does not
    refuse is named (a dead node is not asked)."""
    nodes = [
        _node("10.0.0.1", 7001),
        _node("10.0.0.2", 7002, server="b"),
        _node("10.0.0.3", 1, False),
    ]
    asked: list[str] = []

    def probe(open_to: set[str]):  # type: ignore[no-untyped-def]
        def ask(target: str, call: object) -> str | None:
            asked.append(target)
            return "it answered a call that carried no token" if target in open_to else None

        return ask

    assert cluster_auth_problem("10.0.0.1:6379", nodes, probe(set())) is None
    assert asked == ["10.0.0.1:6379", "10.0.0.1:7001", "10.0.0.2:7002"]
    assert cluster_auth_problem("10.0.0.1:6379", nodes, probe({"10.0.0.1:6379"})) == (
        "the head's GCS at 10.0.0.1:6379: it answered a call that carried no token"
    )
    assert cluster_auth_problem("10.0.0.1:6379", nodes, probe({"10.0.0.2:7002"})) == (
        "node 10.0.0.2 (host-10.0.0.2, server b), raylet at 10.0.0.2:7002: it answered a call "
        "that carried no token"
    )
