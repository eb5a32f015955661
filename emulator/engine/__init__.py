"""The engine: the thin I/O adapter that runs the sans-I/O transport on real sockets.

Worker processes (one uvloop loop each) own a shard of ranks; each rank is an IPv4 address in a
network namespace and gets UDP sockets created inside that namespace. A coordinator starts the
workers, hands out the plan, releases them at a common start time, relays completions across
workers and turns what they report into collectors events (docs/architecture.md, "Data path speed",
"Time dilation").

Entry points: `emulator.engine.coordinator.run_plan(ranks, flows, ...)` runs a static plan
(EngineFlow with deps and start delays, resolved in the workers) or, with `driver=`, the flows a
driver such as emulator.schedule.job.JobSchedule releases at run time (compute delays run in the
coordinator); `python -m emulator.engine PLAN.json` runs a static plan from a JSON file.
The transport core runs on a dilated clock in TARGET time (emulator.engine.clock), so pass it
the target's TransportParams as they are: do not also apply tests.integration.dilation.dilate.
"""
