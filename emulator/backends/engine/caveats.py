"""What the engine runs as asked but reads otherwise than the simulator, said as a run's warning.

The NIC's transmit arbiter gives a backlogged queue pair turns of `engine.nic_quantum_bytes`
(one GSO send each, for the workers' CPU: emulator/engine/params.py), where the simulator's NIC
goes packet by packet. Where a switch spreads every packet (spray or adaptive routing) or the
queue pair does (per-packet entropy), a turn's packets leave back to back over several paths:
measured on the main job (docs/multipath.md, 2026-11-29), the All-to-All read 6-12% below the
simulation and adaptive routing reordered 17% of the packets against 0.0%; packet by packet
(nic_quantum_bytes 0, TDF 18000) 2.3% below and 0.004%.
"""

from __future__ import annotations

from emulator.scenario.model import Scenario
from fabrics.spec import ClosSpec

SPREADING_MODES = ("spray", "adaptive")  # per packet; flowlets move a flow, not its packets


def transmit_turn_caveats(scenario: Scenario) -> list[str]:
    """One warning when the NIC's turns hold more than one packet and packets are spread."""
    quantum = scenario.engine.nic_quantum_bytes
    if quantum <= scenario.transport.path_mtu_bytes:
        return []
    spread = []
    fabric = scenario.fabric
    if isinstance(fabric, ClosSpec):
        spread = [
            f"fabric.{name}.load_balancing.mode {tier.load_balancing.mode}"
            for name, tier in fabric.tiers.items()
            if tier.load_balancing.mode in SPREADING_MODES
            and not (
                tier.load_balancing.mode == "adaptive"
                and tier.load_balancing.adaptive_granularity != "packet"
            )
        ]
    if scenario.transport.entropy == "per_packet":
        spread.append("transport.entropy per_packet")
    if not spread:
        return []
    return [
        f"{', '.join(spread)} with engine.nic_quantum_bytes {quantum}: a queue pair's "
        f"{quantum}-byte transmit turns leave back to back over several paths, so collectives "
        "that spread evenly read low and reordering high against the simulator's packet-by-packet "
        "NIC (the main job's All-to-All 6-12% below it; docs/multipath.md); set "
        "engine.nic_quantum_bytes: 0 and a higher TDF for those numbers"
    ]
