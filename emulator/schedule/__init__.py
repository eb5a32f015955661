"""Schedule: the sans-I/O brain between a Chakra trace and the wire.

Modules, in data-flow order:
  nodes.py        protobuf node -> NodeInfo (kind, delay, deps, comm fields); PyTorch pg init
  feeder.py       per-rank ready queue (streaming Kahn, ready policies, cycle handling)
  matching.py     process groups; k-th collective of a group = one instance; send/recv pairs
  algorithms/     collective algorithms -> logical transfers (registry by type and name)
  collectives.py  transfers -> flows (chunks, queue pairs, UDP source ports from sports.py)
  plan.py         Transfer, Flow, CollectiveInstance records
  job.py          JobSchedule: the whole job as a state machine driven by poll/…_done(now)
  fluid.py        max-min fair fluid network; ideal.py drives a JobSchedule over it
  fabric.py       path functions (fabrics.topology Clos, DUT star); tracesource.py, planner.py
  busbw.py        nccl-tests algbw/busbw; summary.py the per-type table of `emulate plan`
  params.py       scenario sections `collectives:` and `compute:`
"""
