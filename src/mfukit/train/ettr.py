"""The ETTR ``mfukit ft``'s model expects of a training run, beside the one its goodput ledger measured.

Both predictions are :func:`mfukit.ft.interval.expected_run` (Daly's exact model, term by term) on the
run's own checkpoint policy as measured: productive compute per save (the interval), the training loop's
wait per save (blocking) and the background time until a save is durable (persist). They differ in the
failures:

* ``ettr_predicted``: the failures the run itself saw (restarts over its training phase, graceful stops
  left out, as one per-job rate) with its measured recovery per restart as the restart cost. It checks the model on the
  run's own events: compare it with ``ettr_steady_state`` (start-up and shutdown are in neither).
* ``ettr_expected``: the scenario's failure model for the run's size (``[ft] failure_model``, or
  ``[cluster] failure_rate_per_1000_node_days``), restarts costing what they cost in this run, or, when it
  never restarted, ``mfukit ft``'s sourced defaults (detection, replacement, init) with a checkpoint load
  as long as one save. What the same run should see over a long production stretch.
"""

from __future__ import annotations

from mfukit.core.scenario import FtSection
from mfukit.ft.failures import JobFailures, observed_failures
from mfukit.ft.interval import expected_run
from mfukit.ft.ledger import Goodput
from mfukit.ft.restart import RestartParts, restart_parts
from mfukit.ft.run import RunModel


def _run(goodput: Goodput, failures: JobFailures, restart: RestartParts) -> RunModel | None:
    interval, blocking = goodput.interval_s, goodput.blocking_per_save_s
    if interval is None or blocking is None or interval <= 0:
        return None
    return RunModel(
        work_s=goodput.productive_s,
        interval_s=interval,
        blocking_s=blocking,
        persist_s=goodput.persist_per_save_s,
        save_s=goodput.commit_per_save_s or blocking,
        failures=failures,
        restart=restart,
    )


def _measured_restart(ft: FtSection, recovery_s: float) -> RestartParts:
    return restart_parts(ft.model_copy(update={"restart_s": recovery_s}), load_s=0.0, assumptions=[])


def predicted_ettr(goodput: Goodput, ft: FtSection, *, num_gpus: int, num_nodes: int) -> float | None:
    """``mfukit ft``'s expected ETTR for the run's own failures and costs (None without a save)."""
    failures = observed_failures(
        goodput.failures, goodput.training_phase_s, num_gpus=num_gpus, num_nodes=num_nodes
    )
    run = _run(goodput, failures, _measured_restart(ft, goodput.recovery_per_restart_s or 0.0))
    return None if run is None else expected_run(run).ettr


def expected_ettr(
    goodput: Goodput, ft: FtSection, failures: JobFailures, assumptions: list[str]
) -> float | None:
    """``mfukit ft``'s expected ETTR for the run's checkpoint policy under the scenario's ``failures``."""
    recovery = goodput.recovery_per_restart_s
    if recovery is not None:
        restart = _measured_restart(ft, recovery)
    else:
        parts: list[str] = []
        restart = restart_parts(ft, load_s=goodput.commit_per_save_s or 0.0, assumptions=parts)
        assumptions.append(
            "ettr_expected: no restart was measured, so a restart costs `mfukit ft`'s defaults ("
            + "; ".join(parts)
            + ") plus a checkpoint load as long as one save"
        )
    run = _run(goodput, failures, restart)
    return None if run is None else expected_run(run).ettr
