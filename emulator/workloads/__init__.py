"""Synthetic workloads that write real Chakra ET sets (one file per rank + comm-group JSON).

params.py: the parameter dataclass per kind (GENERATORS_PARAMS); registry.py: the builders and
write_workload(); moe_mix.py, single.py: the generators.
"""
