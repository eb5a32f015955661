"""report.html: the page kit (kit: the HTML building blocks, the escaping and the registry of
pages) and the run's page (run). Each study's page lives with its study (emulator.studies) and
registers itself with the kit; the kit and the run's page import no study.
"""
