"""A tester front end: the Open Traffic Generator API (snappi) over this project's runs.

`config` maps an OTG configuration onto the project's terms, `scenario` writes the scenario a
traffic start runs, `metrics` answers metrics requests from a run's results, `service` keeps the
state between requests (configuration, protocols, traffic, the run), `server` speaks HTTP(S).
docs/otg.md says what maps to what and what is refused.
"""
