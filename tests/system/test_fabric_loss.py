"""The loss impairment: switch ports drop a set share of packets at random (the eBPF program; the
kernel here has no netem), every drop is counted, and a replay over a lossy fabric still delivers
every byte of every flow (go-back-N) with the impairment recorded in its summary."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.errors import ScenarioError
from emulator.run import RunOptions, run_scenario
from emulator.scenario import load_scenario
from emulator.timescale.curve import CACHE_ENV
from fabrics.counters import PortCounters, read_port_counters
from fabrics.netns import bring_up
from fabrics.spec import ClosSpec, TierSpec
from fabrics.topology import build_clos
from tests.system.conftest import Receiver, paced_send, udp_socket
from tests.system.test_run_end_to_end import MINI

pytestmark = pytest.mark.system
LOSS = 0.05


def _send_h0_to_h3(
    spec: ClosSpec, prefix: str
) -> tuple[int, int, dict[tuple[str, str], PortCounters]]:
    """1,000-byte datagrams from h0 to h3 for 1 s at half the (scaled) link rate: (sent, lost,
    every switch port's counters)."""
    topo = build_clos(spec)
    with bring_up(topo, rate_scale=0.05, marker="ebpf", prefix=prefix) as live:
        dst = (str(topo.host_address("h3")), 5000)
        with Receiver(live.netns_of("h3"), port=5000) as rx:
            s = udp_socket(live.netns_of("h0"))
            sent = paced_send([(s, dst)], 1e9 * 0.05 / 2, 1000, 1.0)
            s.close()
            rx.wait_for(sent, timeout_s=3)  # returns early only if nothing was lost
        counters = read_port_counters(live)
    return sent, sent - rx.packets, counters


def test_lossy_ports_drop_their_share_and_count_every_drop(fabric_env: str) -> None:
    lossy = TierSpec(loss_probability=LOSS)
    spec = ClosSpec(
        hosts_per_leaf=2, leaves=2, spines=1, host_link_gbps=1, fabric_link_gbps=1, leaf=lossy,
        spine=lossy, mtu_bytes=1500,
    )  # fmt: skip
    sent, lost, counters = _send_h0_to_h3(spec, fabric_env)
    # every packet lost was dropped by a lossy port, and counted there: nothing else dropped
    assert sum(c.loss_drops for c in counters.values()) == lost
    assert sum(c.drops for c in counters.values()) == 0
    # h0 -> l0 -> s0 -> l1 -> h3 crosses three switch egress ports
    expected = sent * (1 - (1 - LOSS) ** 3)
    assert 0.6 * expected <= lost <= 1.4 * expected, (sent, lost, expected)


def test_loss_on_one_port_only(fabric_env: str) -> None:
    spec = ClosSpec(
        hosts_per_leaf=2, leaves=2, spines=1, host_link_gbps=1, fabric_link_gbps=1,
        mtu_bytes=1500, link_loss={"l1-h3": LOSS},
    )  # fmt: skip
    sent, lost, counters = _send_h0_to_h3(spec, fabric_env)
    assert counters[("l1", "l1-h3")].loss_drops == lost
    assert all(c.loss_drops == 0 for key, c in counters.items() if key != ("l1", "l1-h3"))
    assert 0.6 * sent * LOSS <= lost <= 1.4 * sent * LOSS, (sent, lost)


def test_loss_on_an_unknown_port_is_refused(fabric_env: str) -> None:
    spec = ClosSpec(hosts_per_leaf=1, leaves=2, spines=1, link_loss={"l9-s0": 0.01})
    with pytest.raises(ScenarioError, match=r"fabric\.link_loss\.l9-s0: no switch port"):
        bring_up(build_clos(spec), marker="ebpf", prefix=fabric_env)


def test_a_replay_over_a_lossy_fabric_delivers_every_byte(
    fabric_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "lossy.yaml"
    text = (MINI % "4000").replace(
        "  marker: ebpf\n",
        "  marker: ebpf\n  leaf: {loss_probability: 0.002}\n  spine: {loss_probability: 0.002}\n",
    )
    path.write_text(text)
    scenario = load_scenario(path)
    result = run_scenario(
        scenario,
        RunOptions(out_dir=tmp_path / "out", progress=False, fabric_prefix=fabric_env),
    )
    summary = result.summary
    assert not result.partial
    flows = pq.read_table(result.out_dir / "flows.parquet").to_pylist()
    assert flows and all(f["end_s"] is not None for f in flows)  # every flow completed
    impairments = summary["impairments"]
    assert impairments["loss_probability"] == {"leaf": 0.002, "spine": 0.002}
    assert impairments["loss_drops"] > 0 and impairments["packets_retransmitted"] > 0
    assert sum(f["retransmitted_packets"] for f in flows) > 0
    # the drops were asked for: the verdict does not hold them against a lossless fabric
    assert not any("lossless" in r for r in summary["fidelity"]["reasons"])


def test_loss_without_the_ebpf_program_is_refused(fabric_env: str) -> None:
    spec = ClosSpec(hosts_per_leaf=1, leaves=2, spines=1, leaf=TierSpec(loss_probability=0.01))
    with pytest.raises(ScenarioError, match=r"leaf\.loss_probability: random loss needs the eBPF"):
        bring_up(build_clos(spec), marker="none", prefix=fabric_env)
