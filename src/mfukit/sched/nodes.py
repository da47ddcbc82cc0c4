"""The free GPUs of every node, grouped under leaf switches, with O(GPUs-per-node) fit tests.

Nodes with the same number of free GPUs sit in one bucket (an insertion-ordered dict used as a set),
and ``at_least[g]`` counts the nodes with at least ``g`` free, so "are there k nodes with g free
GPUs" is one lookup (kept up to date in O(GPUs moved) per allocation), and a
best-fit allocation takes nodes from the fullest eligible bucket first (packing small jobs keeps
whole nodes free for gangs). Nodes that are down or draining sit in no bucket: they take no work.
"""

from __future__ import annotations

from itertools import islice


class Nodes:
    __slots__ = (
        "accepting",
        "at_least",
        "bucket",
        "free",
        "gpus_per_node",
        "leaf",
        "num_leaves",
        "num_nodes",
        "state_changes",
    )

    def __init__(self, num_nodes: int, gpus_per_node: int, nodes_per_leaf: int) -> None:
        self.num_nodes = num_nodes
        self.gpus_per_node = gpus_per_node
        self.free = [gpus_per_node] * num_nodes
        self.leaf = [index // nodes_per_leaf for index in range(num_nodes)]
        self.num_leaves = (num_nodes + nodes_per_leaf - 1) // nodes_per_leaf
        self.accepting = [True] * num_nodes
        self.bucket: list[dict[int, None]] = [{} for _ in range(gpus_per_node + 1)]
        self.bucket[gpus_per_node] = dict.fromkeys(range(num_nodes))
        self.at_least = [num_nodes] * (gpus_per_node + 1)
        self.state_changes = 0  # bumped whenever a node stops or resumes taking work

    # ----------------------------------------------------------------------------------------- queries
    def count_fit(self, gpus: int) -> int:
        """Nodes that accept work and have at least ``gpus`` free GPUs."""
        return self.at_least[gpus]

    def can_fit(self, num_nodes: int, gpus: int) -> bool:
        return self.at_least[gpus] >= num_nodes

    def free_gpus(self) -> int:
        """Free GPUs on nodes that accept work (a node with f free counts once at each level 1..f)."""
        return sum(self.at_least) - self.at_least[0]

    def stranded_gpus(self, smallest_request: int) -> int:
        """Free GPUs on nodes whose free count is below ``smallest_request``: no queued job can use them."""
        if smallest_request <= 1:
            return 0
        at_least = self.at_least
        # free GPUs on nodes with fewer than s free: sum over levels 1..s-1 of the nodes that have
        # that level but not s
        return sum(at_least[level] - at_least[smallest_request] for level in range(1, smallest_request))

    def eligible_by_leaf(self, gpus: int) -> list[list[int]]:
        """Nodes with at least ``gpus`` free, per leaf switch, fullest nodes first."""
        per_leaf: list[list[int]] = [[] for _ in range(self.num_leaves)]
        for b in self.bucket[gpus:]:
            for node in b:
                per_leaf[self.leaf[node]].append(node)
        return per_leaf

    # ------------------------------------------------------------------------------------- allocation
    def take(self, num_nodes: int, gpus: int, max_switches: int = 0) -> tuple[int, ...] | None:
        """Allocate ``gpus`` GPUs on each of ``num_nodes`` nodes (best fit), or None when they don't fit.

        ``max_switches`` > 0 confines the nodes to at most that many leaf switches (Slurm's
        ``--switches``): one leaf if any fits (the tightest), else the fullest leaves first.
        """
        if max_switches > 0 and self.num_leaves > 1:
            chosen = self._pick_within_leaves(num_nodes, gpus, max_switches)
        else:
            chosen = self._pick_best_fit(num_nodes, gpus)
        if chosen is None:
            return None
        self.take_nodes(chosen, gpus)
        return chosen

    def _pick_best_fit(self, num_nodes: int, gpus: int) -> tuple[int, ...] | None:
        if self.at_least[gpus] < num_nodes:
            return None
        picked: list[int] = []
        for b in self.bucket[gpus:]:
            picked.extend(islice(b, num_nodes - len(picked)))
            if len(picked) == num_nodes:
                break
        return tuple(picked)

    def _pick_within_leaves(self, num_nodes: int, gpus: int, max_switches: int) -> tuple[int, ...] | None:
        return self.pick_within_leaves(self.eligible_by_leaf(gpus), num_nodes, max_switches)

    @staticmethod
    def pick_within_leaves(per_leaf: list[list[int]], need: int, max_switches: int) -> tuple[int, ...] | None:
        """``need`` of the candidate nodes listed per leaf switch: one leaf if any holds them all (the
        tightest), else the fullest leaves first, at most ``max_switches`` of them."""
        single = [nodes for nodes in per_leaf if len(nodes) >= need]
        if single:
            return tuple(min(single, key=len)[:need])
        picked: list[int] = []
        for nodes in sorted(per_leaf, key=len, reverse=True)[:max_switches]:
            picked.extend(nodes[: need - len(picked)])
        return tuple(picked) if len(picked) == need else None

    def take_nodes(self, nodes: tuple[int, ...], gpus: int) -> None:
        free = self.free
        bucket = self.bucket
        at_least = self.at_least
        for node in nodes:
            before = free[node]
            if before < gpus or not self.accepting[node]:
                raise RuntimeError(f"node {node} has {before} free GPUs, asked for {gpus}")
            del bucket[before][node]
            free[node] = before - gpus
            bucket[before - gpus][node] = None
            for level in range(before - gpus + 1, before + 1):
                at_least[level] -= 1

    def give(self, nodes: tuple[int, ...], gpus: int) -> None:
        free = self.free
        bucket = self.bucket
        accepting = self.accepting
        for node in nodes:
            before = free[node]
            free[node] = before + gpus
            if accepting[node]:
                del bucket[before][node]
                bucket[before + gpus][node] = None
                for level in range(before + 1, before + gpus + 1):
                    self.at_least[level] += 1

    # ---------------------------------------------------------------------------------- node states
    def stop_accepting(self, node: int) -> None:
        """Down or draining: the node takes no new work (its running jobs are the engine's business)."""
        if self.accepting[node]:
            self.state_changes += 1
            self.accepting[node] = False
            del self.bucket[self.free[node]][node]
            for level in range(self.free[node] + 1):
                self.at_least[level] -= 1

    def resume(self, node: int) -> None:
        if not self.accepting[node]:
            self.state_changes += 1
            self.accepting[node] = True
            self.bucket[self.free[node]][node] = None
            for level in range(self.free[node] + 1):
                self.at_least[level] += 1
