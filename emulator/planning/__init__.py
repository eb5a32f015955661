"""Planning a run: a scenario's workload made into what a backend replays (the schedule's driver,
its flows' QP profiles and attribution classes, the ideal times), before anything is brought up.

  workload.py     the trace set or workloads placed on the fabric, planned (PlannedWorkload)
  iterations.py   how repeated iterations are numbered
  attribution.py  which attribution class (the BTH tag) each collective's packets carry
"""
