"""Communication: collective traffic of a layout and (later) the collective cost model and its judges."""
