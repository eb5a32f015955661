"""The IETF BMWG AI-fabric benchmark procedures (`emulate bmwg PROCEDURE SCENARIO`,
docs/bmwg.md): draft-calabria-bmwg-ai-fabric-training-bench-02 on the simulator, the emulated
fabric or a switch under test.

- procedure, registry: what a procedure is, and the procedures by name;
- common: the base scenario, trials, their runs, parameters;
- kpis: the draft's KPIs from a run's results folder;
- thresholds, congestion, balancing, tenants, failure: the procedures;
- runner, report: running the trials, and the report with the draft's sections.
"""
