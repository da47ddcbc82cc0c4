"""The simulator checked against a replay on a real Slurm, as a command output (``sched dev-cluster
replay`` and ``check``): the passes and starts that agree, and the first differences."""

from __future__ import annotations

from pathlib import Path

from mfukit import units
from mfukit.core.results import Output, Table
from mfukit.sched.slurm.conf import ClusterOptions
from mfukit.sched.slurm.validate import Agreement, check_replay, differences, load_replay


def _table(directory: Path, agreement: Agreement, plans: int) -> Table:
    difference = agreement.max_start_difference_s
    table = Table(f"simulator vs Slurm: {directory.name}", ["check", "agree", "of"])
    for kind in ("main", "backfill"):
        passes = [c for c in agreement.passes if c.kind == kind]
        table.add(f"{kind} passes (starts{' and plans' if kind == 'backfill' else ''})",
                  sum(c.agrees for c in passes), len(passes))  # fmt: skip
    table.add("planned starts checked in those passes", plans, "")
    table.add(
        "job starts replayed open loop (same pass, same nodes)",
        agreement.starts_agreeing,
        len(agreement.starts),
    )
    table.add("start order", "same" if agreement.order_matches else "differs", "")
    table.add(
        "largest start difference", "—" if difference is None else units.format_duration(difference), ""
    )
    return table


def agreement_output(directory: Path, schema: str) -> Output:
    """Check the ``slurm`` policy against the replay in ``directory``; exits 1 on any difference."""
    options = ClusterOptions()
    agreement = check_replay(load_replay(directory), options)
    plans = sum(len(c.real_planned) for c in agreement.passes)
    return Output(
        schema=schema,
        inputs={"replay_dir": str(directory)},
        result={
            "agrees": agreement.agrees,
            "passes": len(agreement.passes),
            "passes_agreeing": agreement.passes_agreeing,
            "plans_compared": plans,
            "starts": len(agreement.starts),
            "starts_agreeing": agreement.starts_agreeing,
            "order_matches": agreement.order_matches,
            "max_start_difference_s": agreement.max_start_difference_s,
        },
        assumptions=[
            f"the dev cluster's scheduler settings: sched_interval={options.sched_interval_s}s, "
            f"bf_interval={options.bf_interval_s}s, bf_max_time={options.bf_max_time_s}s, "
            f"bf_resolution={options.bf_resolution_s}s, bf_window={options.bf_window_min}min",
            "the open-loop replay runs on the controller's clock (the logged instants of its passes, each job "
            "as long as it really ran); on the simulator's own clock a job that ends waits 0-1 s less for the "
            "next pass than on the real one, and those waits add up along chains of jobs",
        ],
        warnings=differences(agreement),
        tables=[_table(directory, agreement, plans)],
        exit_code=0 if agreement.agrees else 1,
    )
