"""Fabrics: topology as data (topology.py), the backends that make it real (netns.py for the
emulated Clos, dut.py for real NICs toward a device under test), ECN markers (ecn/), resource
ownership (ownership.py) and per-port counters (counters.py). Entry point: registry.bring_up_fabric.
"""
