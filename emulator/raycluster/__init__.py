"""Ray clusters, whatever runs on them: joining one safely (join) and which code a process
runs (sources)."""
