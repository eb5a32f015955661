"""A run's streams (the scenario's `streams:`) as every backend sets them up and reports them:
one source per stream at its sending rank, one sink per receiving rank, a row per stream in
summary.json "streams" (emulator.transport.stream.stream_result)."""

from __future__ import annotations

from typing import Any

from emulator.transport.stream import StreamSink, StreamSource, stream_result

# a sender that let more than this share of a stream's frames leave late (more than the
# source's late_limit_s, 10 us of target time) did not offer the stream's rate as asked (the
# engine's generator fell behind)
LATE_SHARE_LIMIT = 0.01


def stream_sources(scenario: Any) -> list[StreamSource]:
    line_rate_bps = scenario.fabric.rank_rate_bps
    return [s.source(i, line_rate_bps) for i, s in enumerate(scenario.streams)]


def stream_sinks(scenario: Any) -> dict[int, StreamSink]:
    """The receiving ranks' sinks, each knowing the streams sent to it."""
    by_rank: dict[int, set[int]] = {}
    for i, s in enumerate(scenario.streams):
        by_rank.setdefault(s.dst, set()).add(i)
    return {rank: StreamSink(frozenset(indices)) for rank, indices in by_rank.items()}


def stream_rows(
    scenario: Any, sources: list[StreamSource], sinks: dict[int, StreamSink]
) -> list[dict[str, Any]]:
    rows = []
    for spec, source in zip(scenario.streams, sources, strict=True):
        sink = sinks.get(spec.dst)
        tally = sink.tallies.get(source.index) if sink is not None else None
        row = stream_result(spec.name, source, tally)
        rows.append({**row, "src": spec.src, "dst": spec.dst, "frames_planned": source.packets})
    return rows


def stream_extra(
    scenario: Any, sources: list[StreamSource], sinks: dict[int, StreamSink]
) -> dict[str, Any]:
    """summary.json's "streams" and the receivers' malformed datagrams (none: no key)."""
    if not scenario.streams:
        return {}
    extra: dict[str, Any] = {"streams": stream_rows(scenario, sources, sinks)}
    malformed = {str(rank): s.malformed for rank, s in sinks.items() if s.malformed}
    if malformed:
        extra["stream_malformed"] = malformed
    return extra


def stream_reasons(rows: list[dict[str, Any]]) -> list[str]:
    """Fidelity reasons of a backend whose sender can fall behind (the engine's generators):
    a stream not sent in full, or sent late, did not offer what was asked."""
    reasons = []
    for row in rows:
        if row["frames_tx"] < row["frames_planned"]:
            reasons.append(
                f"stream {row['name']}: sent {row['frames_tx']} of its {row['frames_planned']} "
                "frames before the run ended"
            )
        elif row["frames_tx"] and row["late_tx_packets"] > LATE_SHARE_LIMIT * row["frames_tx"]:
            reasons.append(
                f"stream {row['name']}: {row['late_tx_packets']} of {row['frames_tx']} frames "
                f"left more than {row['late_limit_us']:g} us late (up to {row['late_tx_us_max']:.1f} us of target "
                "time): its rate was not offered as asked; raise the TDF"
            )
    return reasons
