"""Shared types: hardware, model, layout, cluster, scenario, results. Stdlib and pydantic only."""
