"""What-if replay of a pipeline-parallel job's steps: how much faster it would run without stragglers.

Method of Lin et al., "Understanding Stragglers in Large Model Training Using What-if Analysis" (OSDI '25,
github.com/ByteDance-Seed/StragglerAnalysis), implemented here from the paper's description:

1. The dependency graph of one step, built from the trace's own op order: on every (DP rank, stage) the
   compute ops (forward/backward of each micro-batch) run one after another in the order traced; a forward
   on stage s waits for the same micro-batch's forward on stage s-1 and a backward on stage s for the one on
   stage s+1, each through a point-to-point transfer posted after the receiver's previous compute; the
   step opens with the DP all-gather of the parameters and closes with gc, the layernorm and embedding
   gradient all-reduces, the DP reduce-scatter of the gradients, the gradient-norm all-reduce (every rank)
   and the optimizer. A collective ends when its last member has started plus its transfer time.
2. Replayed with every op at its traced duration (launch delays dropped) it gives each step's time ``T``;
   replayed with every op at its *ideal* duration (compute: the mean of its op type over DP ranks, stages
   and steps; communication: the median) it gives ``T_ideal``. The straggler slowdown is
   ``S = mean(T) / mean(T_ideal)`` (the paper's Eq. 1).
3. Attribution (Eq. 2): the ideal replay with only one group's ops at their traced durations (one DP rank,
   one stage, one op type), over ``T_ideal``. Cause metrics: ``M_s`` is the share of ``T - T_ideal``
   removed by giving the last stage's ops their ideal durations; ``M_w`` (a slow worker) the share removed
   by doing so for the single worst (DP rank, stage). ``M_s`` also counts variation inside the last stage
   (long sequences cost the last stage most), so stage *partitioning* is judged by the share the stages'
   means explain: every op at its own stage's typical duration. What neither a stage's mean, one worker
   nor one DP replica in every step explains is load that moves between DP ranks: uneven sequence lengths.

Replays are vectorised over steps (every step has the same graph): one numpy max and add per node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mfukit.diagnose.records import StepChain, TimelineOps

COMPUTE_TYPES = frozenset({"forward-compute", "backward-compute", "gc", "optimizer"})
TAIL = ("layernorm-grads-all-reduce", "embedding-grads-all-reduce", "grads-reduce-scatter",
        "optimizer-clip-main-grad")  # fmt: skip
PP_COMM = {"forward-recv": "forward-pp-comm", "forward-send": "forward-pp-comm",
           "backward-recv": "backward-pp-comm", "backward-send": "backward-pp-comm"}  # fmt: skip
# The paper calls a group a cause when restoring it alone slows the ideal step by more than this
# (StragglerAnalysis --decompose-thres, default 1.03).
DECOMPOSE_THRESHOLD = 1.03
# the same DP rank slowest in this share of steps: a slow replica, not load that moves between ranks
PERSISTENT = 0.8
VARIANT_CELLS = 4_000_000  # durations replayed side by side in one pass (32 MB of float64)

Array = npt.NDArray[np.float64]
Key = tuple[int, int, str, int]
"""(dp rank, stage, op type, seq): one op of every step"""


@dataclass
class WhatIf:
    steps: list[int]
    step_s: Array
    """each step's replayed time with the traced durations"""
    ideal_step_s: Array
    slowdown: float
    by_dp_rank: dict[int, float]
    by_stage: dict[int, float]
    by_optype: dict[str, float]
    stage_metric: float
    """M_s: share of the slowdown removed by making the last stage ideal"""
    worker_metric: float
    """M_w: share removed by making the worst single (DP rank, stage) ideal"""
    worst_worker: tuple[int, int]
    cause: str
    replay_error: float
    """|replayed - traced| / traced mean step time: how well the graph explains the trace"""
    traced_step_s: Array
    partition_metric: float = 0.0
    """share of the slowdown the stages' mean durations explain (each stage at its own typical durations)"""
    dp_persistence: float = 1.0
    """share of steps in which the same DP rank is the one that slows the step most"""
    problems: list[str] = field(default_factory=list)

    @property
    def named(self) -> str:
        """The straggling group in words."""
        if self.cause == "stage partitioning":
            return f"the last pipeline stage ({max(self.by_stage)})"
        if self.cause == "slow worker" and self.worker_metric >= 0.5:
            return f"DP rank {self.worst_worker[0]}, stage {self.worst_worker[1]}"
        if self.cause == "slow worker":
            return f"DP rank {max(self.by_dp_rank, key=lambda k: self.by_dp_rank[k])} (every stage of it)"
        if self.cause == "communication":
            return max(self.by_optype, key=lambda k: self.by_optype[k])
        return (
            f"the DP ranks in turn (rank {max(self.by_dp_rank, key=lambda k: self.by_dp_rank[k])} the slowest on "
            f"average, and the slowest in only {self.dp_persistence:.0%} of the steps)"
        )


class _Graph:
    """One step's dependency graph: nodes are ops or collectives (a collective is one node whose
    dependencies are its members'), in topological order."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.deps: dict[str, list[str]] = {}
        self.members: dict[str, list[Key]] = {}
        self.is_comm: dict[str, bool] = {}

    def add(self, node: str, members: list[Key], deps: list[str], comm: bool) -> None:
        if node in self.deps:
            self.deps[node].extend(d for d in deps if d not in self.deps[node])
            self.members[node].extend(m for m in members if m not in self.members[node])
            return
        self.order.append(node)
        self.deps[node] = list(deps)
        self.members[node] = list(members)
        self.is_comm[node] = comm

    def sorted(self) -> list[str]:
        """Kahn's order (the insertion order may add a collective's later members after its users)."""
        indegree = {node: len(set(self.deps[node])) for node in self.order}
        users: dict[str, list[str]] = defaultdict(list)
        for node in self.order:
            for dep in set(self.deps[node]):
                users[dep].append(node)
        ready = [node for node in self.order if indegree[node] == 0]
        out: list[str] = []
        while ready:
            node = ready.pop()
            out.append(node)
            for user in users[node]:
                indegree[user] -= 1
                if indegree[user] == 0:
                    ready.append(user)
        if len(out) != len(self.order):
            raise ValueError("the timeline's ops do not form a pipeline schedule (a dependency cycle)")
        return out


def _build(keys: set[Key], dps: list[int], stages: list[int], order: dict[Key, float]) -> _Graph:
    graph = _Graph()
    last = max(stages)
    compute: dict[tuple[int, int], list[Key]] = defaultdict(list)
    for key in keys:
        if key[2] in ("forward-compute", "backward-compute"):
            compute[(key[0], key[1])].append(key)
    for chain in compute.values():
        chain.sort(key=lambda k: order[k])

    def node(key: Key) -> str:
        return "|".join(str(part) for part in key)

    for stage in stages:  # the step opens with the DP all-gather of each stage's parameters
        for seq in sorted({k[3] for k in keys if k[1] == stage and k[2] == "params-all-gather"}):
            members = [k for k in ((d, stage, "params-all-gather", seq) for d in dps) if k in keys]
            graph.add(f"pag|{stage}|{seq}", members, [], True)
    for dp in dps:
        for stage in stages:
            previous: str | None = None
            opening = [f"pag|{stage}|{seq}" for seq in sorted({k[3] for k in keys if k[1] == stage and
                                                                k[2] == "params-all-gather"})]  # fmt: skip
            for key in compute[(dp, stage)]:
                deps = [previous] if previous else list(opening)
                forward = key[2] == "forward-compute"
                peer = stage - 1 if forward else stage + 1
                source = (dp, peer, key[2], key[3])
                if 0 <= peer <= last and source in keys:
                    recv = (dp, stage, "forward-recv" if forward else "backward-recv", key[3])
                    link = f"p2p|{node(recv)}"
                    graph.add(link, [recv] if recv in keys else [], [*( [previous] if previous else opening),
                              node(source)], True)  # fmt: skip
                    deps.append(link)
                graph.add(node(key), [key], deps, False)
                previous = node(key)
            gc = (dp, stage, "gc", 0)
            tail_previous = previous or (opening[0] if opening else None)
            if gc in keys:
                graph.add(node(gc), [gc], [tail_previous] if tail_previous else [], False)
                tail_previous = node(gc)
            layernorm = (dp, stage, "layernorm-grads-all-reduce", 0)
            if layernorm in keys:
                graph.add(node(layernorm), [layernorm], [tail_previous] if tail_previous else [], True)
                tail_previous = node(layernorm)
            graph.add(f"tail|{dp}|{stage}", [], [tail_previous] if tail_previous else [], False)
    for dp in dps:  # the embedding all-reduce ties the first and last stages of one model replica
        members = [
            k for k in ((dp, s, "embedding-grads-all-reduce", 0) for s in (stages[0], last)) if k in keys
        ]
        if members:
            graph.add(f"emb|{dp}", members, [f"tail|{dp}|{m[1]}" for m in members], True)
    for stage in stages:  # the DP reduce-scatter of each stage's gradients, then the world's grad-norm
        for seq in sorted({k[3] for k in keys if k[1] == stage and k[2] == "grads-reduce-scatter"}):
            members = [k for k in ((d, stage, "grads-reduce-scatter", seq) for d in dps) if k in keys]
            deps = [
                f"emb|{d}" if (d, stage, "embedding-grads-all-reduce", 0) in keys else f"tail|{d}|{stage}"
                for d in dps
            ]
            graph.add(f"rs|{stage}|{seq}", members, deps + ([f"rs|{stage}|{seq - 1}"] if seq else []), True)
    clip = [k for k in keys if k[2] == "optimizer-clip-main-grad"]
    reduce_scatters = [n for n in graph.order if n.startswith("rs|")]
    closing = reduce_scatters or [n for n in graph.order if n.startswith(("tail|", "emb|"))]
    if clip:
        graph.add("clip", clip, closing, True)
        closing = ["clip"]
    for key in sorted(k for k in keys if k[2] == "optimizer"):
        graph.add(node(key), [key], closing, False)
    return graph


class Replay:
    """The trace as durations per op and step, and the graph that replays them."""

    def __init__(self, ops: TimelineOps) -> None:
        counts: dict[int, int] = defaultdict(int)
        for step in ops.step:
            counts[step] += 1
        usual = max(counts.values())
        self.problems: list[str] = []
        self.steps = sorted(s for s, n in counts.items() if n == usual)
        if len(self.steps) < len(counts):
            self.problems.append(
                f"{len(counts) - len(self.steps)} step(s) with a different set of ops left out"
            )
        column = {step: i for i, step in enumerate(self.steps)}
        self.keys: list[Key] = []
        index: dict[Key, int] = {}
        durations: list[list[float]] = []
        starts: dict[int, list[tuple[float, float]]] = defaultdict(list)
        order_sum: dict[Key, float] = defaultdict(float)
        for step, dp, stage, optype, seq, start, duration in zip(
            ops.step, ops.dp, ops.stage, ops.optype, ops.seq, ops.start_s, ops.duration_s, strict=True
        ):
            if step not in column:
                continue
            key = (dp, stage, optype, seq)
            if key not in index:
                index[key] = len(self.keys)
                self.keys.append(key)
                durations.append([np.nan] * len(self.steps))
            durations[index[key]][column[step]] = duration
            starts[step].append((start, start + duration))
        opened = {step: min(b for b, _ in spans) for step, spans in starts.items()}
        for step, dp, stage, optype, seq, start in zip(
            ops.step, ops.dp, ops.stage, ops.optype, ops.seq, ops.start_s, strict=True
        ):
            if step in column:
                order_sum[(dp, stage, optype, seq)] += start - opened[step]
        self.index = index
        self.duration = np.array(durations, dtype=np.float64)
        if np.isnan(self.duration).any():
            raise ValueError(
                "an op is traced in some steps and not in others: the steps do not share a schedule"
            )
        self.traced_step_s = np.array(
            [max(e for _, e in starts[s]) - min(b for b, _ in starts[s]) for s in self.steps]
        )
        dps = sorted({k[0] for k in self.keys})
        stages = sorted({k[1] for k in self.keys})
        self.dps, self.stages = dps, stages
        self.graph = _build(set(self.keys), dps, stages, order_sum)
        self.plan = self._plan()
        types = np.array([k[2] for k in self.keys])
        stage_of = np.array([k[1] for k in self.keys])
        self.ideal = self.duration.copy()
        self.stage_means = self.duration.copy()
        for optype in set(types.tolist()):
            rows = types == optype
            self.ideal[rows] = self._typical(optype, self.duration[rows])
            for stage in stages:  # each stage at its own typical durations: only the stages' means differ
                here = rows & (stage_of == stage)
                if here.any():
                    self.stage_means[here] = self._typical(optype, self.duration[here])

    @staticmethod
    def _typical(optype: str, durations: Array) -> float:
        """An op type's ideal duration: the mean for compute, the median for communication (the paper's)."""
        return float(durations.mean() if optype in COMPUTE_TYPES else np.median(durations))

    def _plan(self) -> list[tuple[int, list[int], npt.NDArray[np.int64], bool]]:
        """For each node in topological order: its slot, its dependencies' slots, its members' rows, comm."""
        slots = {name: i for i, name in enumerate(self.graph.sorted())}
        plan = []
        for name in self.graph.sorted():
            rows = np.array([self.index[m] for m in self.graph.members[name]], dtype=np.int64)
            plan.append(
                (slots[name], [slots[d] for d in set(self.graph.deps[name])], rows, self.graph.is_comm[name])
            )
        return plan

    def run(self, duration: Array) -> Array:
        """Each step's time with ``duration`` (ops x steps): the latest end of any node."""
        end = np.zeros((len(self.plan), duration.shape[1]))
        for slot, deps, rows, comm in self.plan:
            start = end[deps].max(axis=0) if deps else np.zeros(duration.shape[1])
            if rows.size:
                # a collective takes the transfer of its slowest member once all have arrived
                start = start + (duration[rows].max(axis=0) if comm else duration[rows].sum(axis=0))
            end[slot] = start
        steps: Array = end.max(axis=0)
        return steps

    def run_many(self, variants: dict[object, Array]) -> dict[object, Array]:
        """:meth:`run` of several duration sets at once (side by side along the step axis, in batches
        that bound the memory), each set's step times back under its key."""
        out: dict[object, Array] = {}
        keys = list(variants)
        width = len(self.steps)
        batch = max(1, VARIANT_CELLS // max(1, self.duration.size))
        for first in range(0, len(keys), batch):
            chunk = keys[first : first + batch]
            times = self.run(np.concatenate([variants[k] for k in chunk], axis=1))
            for index, key in enumerate(chunk):
                out[key] = times[index * width : (index + 1) * width]
        return out

    def restored(self, rows: npt.NDArray[np.bool_]) -> Array:
        """The ideal durations, with the selected ops at their traced ones."""
        mixed = self.ideal.copy()
        mixed[rows] = self.duration[rows]
        return mixed

    def removed(self, rows: npt.NDArray[np.bool_]) -> Array:
        """The traced durations, with the selected ops at their ideal ones."""
        mixed = self.duration.copy()
        mixed[rows] = self.ideal[rows]
        return mixed


def analyse(ops: TimelineOps) -> WhatIf:
    replay = Replay(ops)
    dp_of = np.array([k[0] for k in replay.keys])
    stage_of = np.array([k[1] for k in replay.keys])
    kind_of = np.array([PP_COMM.get(k[2], k[2]) for k in replay.keys])
    last = max(replay.stages)
    names = sorted(set(kind_of.tolist()))
    workers = [(d, s) for d in replay.dps for s in replay.stages]
    masks: dict[object, npt.NDArray[np.bool_]] = {
        **{("dp", d): dp_of == d for d in replay.dps},
        **{("stage", s): stage_of == s for s in replay.stages},
        **{("optype", n): kind_of == n for n in names},
        **{("worker", w): (dp_of == w[0]) & (stage_of == w[1]) for w in workers},
    }
    variants: dict[object, Array] = {"actual": replay.duration, "ideal": replay.ideal, "stage_means": replay.stage_means,
                "no_last": replay.removed(stage_of == last)}  # fmt: skip
    times = replay.run_many({**variants, **{key: replay.restored(mask) for key, mask in masks.items()}})
    actual, ideal = times["actual"], times["ideal"]
    base = float(ideal.mean())
    gap = float(actual.mean()) - base

    def ratio(key: object) -> float:
        return float(times[key].mean()) / base

    def share_removed(key: object) -> float:
        return (float(actual.mean()) - float(times[key].mean())) / gap if gap > 0 else 0.0

    by_dp = {d: ratio(("dp", d)) for d in replay.dps}
    # which DP rank, restored alone, slows each step most: the same one every step is a slow replica; a
    # different one from step to step is load that moves (uneven sequence lengths)
    worst_per_step = np.array(
        [max(replay.dps, key=lambda d: times[("dp", d)][i]) for i in range(len(replay.steps))]
    )
    top_dp = max(by_dp, key=lambda d: by_dp[d])
    persistent = float(np.mean(worst_per_step == top_dp)) if len(replay.dps) > 1 else 1.0
    by_stage = {s: ratio(("stage", s)) for s in replay.stages}
    by_optype = {n: ratio(("optype", n)) for n in names}
    stage_metric = share_removed("no_last")
    # the share of T - T_ideal left when every op runs at its own stage's typical duration: what the
    # stages' different means explain (partitioning), as opposed to variation inside each stage
    partition = (float(times["stage_means"].mean()) - base) / gap if gap > 0 else 0.0
    worst = max(workers, key=lambda w: ratio(("worker", w)))
    times |= replay.run_many({"no_worst": replay.removed(masks[("worker", worst)])})
    worker_metric = share_removed("no_worst")
    traced = replay.traced_step_s
    slowdown = float(actual.mean()) / base
    return WhatIf(
        steps=replay.steps,
        step_s=actual,
        ideal_step_s=ideal,
        slowdown=slowdown,
        by_dp_rank=by_dp,
        by_stage=by_stage,
        by_optype=by_optype,
        stage_metric=stage_metric,
        worker_metric=worker_metric,
        worst_worker=worst,
        cause=_cause(slowdown, by_dp, by_optype, partition, worker_metric, persistent),
        partition_metric=partition,
        dp_persistence=persistent,
        replay_error=abs(float(actual.mean()) - float(traced.mean())) / float(traced.mean()),
        traced_step_s=traced,
        problems=replay.problems,
    )


def _cause(
    slowdown: float,
    by_dp: dict[int, float],
    by_optype: dict[str, float],
    partition: float,
    worker_metric: float,
    persistence: float,
) -> str:
    """The paper's cause classes, by which restoration explains the slowdown: the last stage (stage
    partitioning), one worker or one DP replica every step (a slow worker), one communication op type, or
    the DP ranks taking turns being slowest (uneven sequence lengths)."""
    if slowdown < DECOMPOSE_THRESHOLD:
        return "none"
    if partition >= 0.5:
        return "stage partitioning"
    if worker_metric >= 0.5:
        return "slow worker"
    replica = (max(by_dp.values()) - 1.0) / (slowdown - 1.0)
    if replica >= 0.8 and persistence >= PERSISTENT:
        return "slow worker"
    comm = {k: v for k, v in by_optype.items() if k not in COMPUTE_TYPES and not k.endswith("-compute")}
    compute = {k: v for k, v in by_optype.items() if k not in comm}
    if comm and max(comm.values()) > max(compute.values(), default=1.0):
        return "communication"
    return "sequence-length imbalance" if len(by_dp) > 1 else "slow worker"


@dataclass
class ChainWhatIf:
    """The what-if replay of ranks that run the same collectives in the same order (data parallelism, FSDP)."""

    slowdown: float
    by_rank: dict[int, float]
    straggler: int
    persistence: float
    """share of steps in which the straggler is the rank that slows the step most"""
    cause: str
    steps: int
    collectives_per_step: int
    replay_error: float


def _chain_step(gaps: Array, transfers: Array, tails: Array) -> float:
    """One step: every rank works ``gaps[r, j]`` after collective j-1 ends, then joins collective j, which
    ends when the last rank has joined plus its transfer; the step ends with the slowest tail."""
    done = 0.0
    for j in range(transfers.size):
        done = float((done + gaps[:, j]).max()) + float(transfers[j])
    return done + float(tails.max())


def chain_analyse(chains: dict[int, list[StepChain]]) -> ChainWhatIf | None:
    """What-if replay of a data-parallel job from each rank's per-step collective chain (Kineto traces).

    Per step, rank r's gap before collective j is the time from the end of its collective j-1 (the step's
    start for j = 0) to the start of its collective j; the transfer of collective j is its shortest
    duration over the ranks (the last rank to arrive waits for no one); the ideal gives every rank the
    mean gap. A rank restored alone to its traced gaps gives its share (Lin et al., OSDI '25, Eq. 2). None
    when the ranks' steps do not line up (different collectives: TP/PP groups the chain cannot pair)."""
    ranks = sorted(chains)
    if len(ranks) < 2:
        return None
    count = min(len(chains[r]) for r in ranks)
    per_step: list[tuple[Array, Array, Array, float]] = []
    for k in range(count):
        steps = [chains[r][k] for r in ranks]
        sizes = {len(c.starts_s) for c in steps}
        if len(sizes) != 1 or 0 in sizes:
            continue
        starts = np.array([c.starts_s for c in steps])
        durations = np.array([c.durations_s for c in steps])
        ends = starts + durations
        gaps = np.maximum(0.0, starts - np.concatenate([np.zeros((len(ranks), 1)), ends[:, :-1]], axis=1))
        tails = np.maximum(0.0, np.array([c.end_s for c in steps]) - ends[:, -1])
        per_step.append((gaps, durations.min(axis=0), tails, float(np.median([c.end_s for c in steps]))))
    if not per_step:
        return None

    def replay(restore: int | None) -> tuple[Array, Array]:
        actual, ideal = [], []
        for gaps, transfers, tails, _ in per_step:
            mean_gaps = np.broadcast_to(gaps.mean(axis=0), gaps.shape).copy()
            mean_tails = np.full_like(tails, tails.mean())
            if restore is not None:
                mean_gaps[restore] = gaps[restore]
                mean_tails[restore] = tails[restore]
            actual.append(_chain_step(gaps, transfers, tails))
            ideal.append(_chain_step(mean_gaps, transfers, mean_tails))
        return np.array(actual), np.array(ideal)

    actual, ideal = replay(None)
    base = float(ideal.mean())
    restored = {rank: replay(index)[1] for index, rank in enumerate(ranks)}
    by_rank = {rank: float(times.mean()) / base for rank, times in restored.items()}
    straggler = max(by_rank, key=lambda r: by_rank[r])
    worst = [max(restored, key=lambda r: restored[r][i]) for i in range(len(per_step))]
    persistence = float(np.mean([w == straggler for w in worst]))
    slowdown = float(actual.mean()) / base
    traced = float(np.mean([s[3] for s in per_step]))
    if slowdown < DECOMPOSE_THRESHOLD:
        cause = "none"
    elif persistence >= PERSISTENT and (by_rank[straggler] - 1.0) >= 0.5 * (slowdown - 1.0):
        cause = "slow worker"
    else:
        cause = "sequence-length imbalance"
    return ChainWhatIf(
        slowdown, by_rank, straggler, persistence, cause, len(per_step), per_step[0][1].size,
        abs(float(actual.mean()) - traced) / traced if traced > 0 else 0.0,
    )  # fmt: skip
