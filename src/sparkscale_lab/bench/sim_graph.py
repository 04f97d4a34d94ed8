"""The simulated dataflow's shape (`sparkscale simulate --graph`): operators in topological order,
the source first, and the edges between them, from a short spec (GRAPH_FORMS)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

GRAPH_FORMS = "linear:N | star:N | layered:N:L | dag-linear | dag-diamond | dag-star"
SOURCE = "source"
MAX_OPERATORS = 10_000  # ten times the largest documented run (docs/results/simulate/results.md)


@dataclass(frozen=True)
class Graph:
    """Operators in topological order (the source first) and edges (upstream, downstream)."""

    operators: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]

    def upstream(self) -> dict[str, list[str]]:
        up: dict[str, list[str]] = {op: [] for op in self.operators}
        for a, b in self.edges:
            up[b].append(a)
        return up

    def out_degree(self) -> dict[str, int]:
        out = dict.fromkeys(self.operators, 0)
        for a, _b in self.edges:
            out[a] += 1
        return out


def parse_graph(spec: str, seed: int = 0) -> Graph:
    """A graph from its spec (GRAPH_FORMS); ValueError naming the problem otherwise."""
    kind, _, rest = spec.partition(":")
    args = rest.split(":") if rest else []
    try:
        numbers = [int(a) for a in args if len(a) <= 20]  # a longer one is no count (and int() may refuse it)
    except ValueError:
        numbers = []
    if len(numbers) != len(args):
        raise ValueError(f"graph {spec[:60]!r}: expected whole numbers after {kind[:20]!r} ({GRAPH_FORMS})")
    if any(n > MAX_OPERATORS for n in numbers):
        raise ValueError(f"graph {spec!r}: at most {MAX_OPERATORS} operators")
    if kind in ("dag-linear", "dag-diamond", "dag-star") and not args:
        shapes = {"dag-linear": [("a", SOURCE), ("b", "a"), ("c", "b")],
                  "dag-diamond": [("a", SOURCE), ("b", "a"), ("c", "a"), ("d", "b"), ("d", "c")],
                  "dag-star": [("a", SOURCE), ("b", SOURCE), ("hub", "a"), ("hub", "b"), ("x", "hub"),
                               ("y", "hub")]}[kind]
        ops = [SOURCE, *dict.fromkeys(d for d, _u in shapes)]
        return Graph(tuple(ops), tuple((u, d) for d, u in shapes))
    if kind in ("linear", "star") and len(numbers) == 1 and numbers[0] >= (1 if kind == "linear" else 3):
        n = numbers[0]
        if kind == "linear":
            ops = [SOURCE, *(f"op{i}" for i in range(n))]
            return Graph(tuple(ops), tuple(itertools.pairwise(ops)))
        middle = [f"op{i}" for i in range(n - 2)]
        edges = [(SOURCE, "fan")] + [("fan", m) for m in middle] + [(m, "sink") for m in middle]
        return Graph((SOURCE, "fan", *middle, "sink"), tuple(edges))
    if kind == "layered" and len(numbers) == 2 and numbers[1] >= 1 and numbers[0] >= numbers[1]:
        n, layers = numbers
        rng = random.Random(seed)
        per = [n // layers + (1 if i < n % layers else 0) for i in range(layers)]
        names = [[f"l{k}_{i}" for i in range(per[k])] for k in range(layers)]
        edges = [(SOURCE, op) for op in names[0]]
        for k in range(1, layers):
            for op in names[k]:
                for up in rng.sample(names[k - 1], min(len(names[k - 1]), rng.randint(1, 3))):
                    edges.append((up, op))
        return Graph((SOURCE, *(op for layer in names for op in layer)), tuple(edges))
    raise ValueError(f"graph {spec[:60]!r} is not one of {GRAPH_FORMS} (N operators, L layers, L <= N)")
