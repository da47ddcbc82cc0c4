"""``mfukit watch``: MFU, expected MFU and goodput of running jobs as Prometheus metrics.

follow (tail across rotation) -> kinds (diagnose's per-line parsers) -> state (diagnose's MFU over a
trailing window) -> metrics (a prometheus_client collector) -> exporter (the loop and the HTTP server).
The alert rules and the Grafana dashboard are in deploy/.
"""
