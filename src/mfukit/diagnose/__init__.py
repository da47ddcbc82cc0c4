"""Diagnosis: why a running job sits below its expected MFU, from its own artifacts.

``sources/`` turns each artifact (profiler trace, training log, telemetry, kernel log, accounting) into
records; ``rules/`` turns records into findings, one family per module; :mod:`engine` runs them and
ranks the findings by what they cost; :mod:`gates` judges the five MFU-first gates.
"""
