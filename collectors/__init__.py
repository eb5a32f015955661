"""Collectors: turn the engine's events and the samplers' counters into records, live metrics,
a results folder with tables and plots, and the Grafana dashboard that reads the live metrics.

Data flows one way: events (emulator.events) -> RunRecorder (collectors.recorder) ->
records (collectors.records), live counters (collectors.live) scraped by the Prometheus exporter
(collectors.prometheus), and at the end the results folder (collectors.results). Collectors
never drive the run.

How a run coordinator wires them (every time handed in is target time = wall time / TDF):

    flows, collectives = metas_from_plan(instances, ideal_time_s_by_instance)
    info = RunInfo(scenario.name, tdf, marker_name, fabric_description)
    recorder = RunRecorder(flows, collectives, info, nic_line_rate_bps=target_link_bps)
    exporter = exporter_for(scenario.metrics.prometheus, recorder.live)
    writer = ResultsWriter(out_dir, scenario_text=scenario_yaml_text)
    sampler = NicSampler({rank: NetlinkCounters(ifname, netns) for rank, ...})
    with exporter:
        for batch in engine_events:                      # FlowStarted/FlowFinished/... batches
            recorder.on_events(batch)
        every sample interval:
            recorder.on_events(sampler.sample(now_target_s))
            recorder.on_events(port_samples(read_port_counters(live).values(), now_target_s))
        at checkpoints / on Ctrl-C:  writer.write(RunMeta.from_info(info, ...), recorder.tables(), partial=True)
    writer.write(RunMeta.from_info(info, fidelity, job_time_s), recorder.tables(), partial=False)
    if pushgateway_url: push(exporter.registry, pushgateway_url)
"""
