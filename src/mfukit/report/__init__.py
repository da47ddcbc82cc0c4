"""Reports: deterministic PNG charts (matplotlib, Agg) and one self-contained HTML file (jinja2)."""
