"""Node bookkeeping and topology-constrained placement."""

from __future__ import annotations

from mfukit.sched.nodes import Nodes
from mfukit.sched.policies.plan import consecutive_best_fit


def test_counts_follow_allocations() -> None:
    nodes = Nodes(4, 8, 4)
    assert nodes.take(1, 3) == (0,)
    assert nodes.free == [5, 8, 8, 8] and nodes.count_fit(6) == 3 and nodes.count_fit(5) == 4
    assert nodes.take(2, 8) is not None and not nodes.can_fit(2, 8)
    nodes.give((0,), 3)
    assert nodes.free_gpus() == 16 and nodes.stranded_gpus(8) == 0
    nodes.take_nodes((0,), 7)
    assert nodes.stranded_gpus(2) == 1  # one free GPU on node 0, every waiting job needs two


def test_switches_confine_a_job_to_one_leaf() -> None:
    nodes = Nodes(4, 8, 2)  # leaves {0, 1} and {2, 3}
    nodes.take_nodes((0,), 8)
    nodes.take_nodes((2,), 8)
    assert nodes.take(2, 8, max_switches=1) is None  # nodes 1 and 3 sit under different leaves
    assert nodes.take(2, 8, max_switches=2) == (1, 3)


def test_down_nodes_take_no_work() -> None:
    nodes = Nodes(2, 8, 2)
    nodes.stop_accepting(0)
    assert nodes.count_fit(1) == 1 and nodes.take(2, 1) is None
    nodes.resume(0)
    assert nodes.take(2, 1) is not None


def test_consecutive_best_fit_is_slurms_choice() -> None:
    mask = sum(1 << n for n in (0, 1, 3, 4, 5, 7))  # runs [0-1], [3-5], [7]
    assert consecutive_best_fit(mask, 1) == (7,)  # the smallest run that holds the request
    assert consecutive_best_fit(mask, 2) == (0, 1)
    assert consecutive_best_fit(mask, 3) == (3, 4, 5)
    # no run holds 4: the largest goes first ([3-5]); then 1 node is left, which [7] holds tightest
    assert consecutive_best_fit(mask, 4) == (3, 4, 5, 7)
    assert consecutive_best_fit(mask, 7) is None


def test_consecutive_best_fit_weighs_runs_by_free_resources() -> None:
    # runs [0-1] and [3-4]; node 3 has 2 free, the others 8: the tighter run [3-4] wins for 2 nodes,
    # and for 1 node the emptiest-but-fitting node of the tightest run
    free = [8, 8, 0, 2, 8]
    mask = sum(1 << n for n in (0, 1, 3, 4))
    assert consecutive_best_fit(mask, 2, free) == (3, 4)
    assert consecutive_best_fit(mask, 1, free) == (3,)
    # 3 nodes: no run holds them, so the one with the most free goes first ([0-1], 16 > 10); the last
    # node comes from [3-4], the emptiest node that fits (3)
    assert consecutive_best_fit(mask, 3, free) == (0, 1, 3)
