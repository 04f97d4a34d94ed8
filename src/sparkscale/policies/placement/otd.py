"""OTD: N-Storm's online task deployment (Zhang, Jin et al., §4) as a cluster placement policy.

Why: OTD moves one executor per cycle, towards a worker that is less loaded (Algorithm 1) or
towards the host that holds more of its traffic (Algorithm 2). A small step each cycle costs
less than a full re-deployment. Storm terms become Spark terms as in docs/internals.md ("Placement"):
node = worker host, worker = standalone worker, executor = a managed app's executor,
CC_{e->e'} = shuffle bytes/s from e to e' (`Traffic`). AS and ASC are computed per host, so a move
between two workers on one host has ASC 0, as in the paper.

From the paper: eq. (4) (AS), eq. (5) (ASC), Algorithms 1 and 2, the four cases of §4.2, and one
migration per cycle.

Not from the paper:
- the load thresholds and `threshold_asc` (the paper gives no values; `OtdSettings`);
- the tie-break: higher ASC, then lower target load, then executor key order, then target worker id;
- Spark's constraints. They are applied to the targets before the per-host choice and the argmax.
  A target must have room for one more executor of e's shape. It must not be e's own worker. It
  must be the master's landing worker for e's app (`model.landing[app]`; an entry of None excludes
  every target). When `landing` has no entry for the app, no landing restriction applies, only the
  room check. In Algorithm 2 a target on e's own host is never a candidate (its ASC is 0, which
  can never pass a threshold >= 0); in Algorithm 1 it is;
- Case 1 with no realisable target gives no move (the paper always has one);
- executors whose worker is not in the model, and traffic to or from them or to oneself, are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pydantic import BaseModel, Field, model_validator

from sparkscale.config.base import ConfigSection
from sparkscale.policies.placement.base import register_placement, settings_as
from sparkscale.policies.placement.model import (
    ClusterModel,
    ExecutorKey,
    Move,
    PlacedExecutor,
    PlacementPlan,
    PlacementWarning,
    Worker,
)


class OtdSettings(ConfigSection):
    """`placement.otd`: N-Storm's online task deployment, one executor move a round: from the most
    loaded worker to the least loaded, or, when none is overloaded, towards the host its shuffle
    traffic comes from.

    The paper gives no threshold: it classifies workers by "the length of message
    queues and the CPU utilization" and compares ASC with an unspecified `threshold_ASC`. Defaults:
    - high_load 0.85: near saturation, with headroom left for a batch spike;
    - low_load 0.5: at most half busy, so it can take an executor's work. The 0.35 gap between
      the two thresholds stops one move from turning the target into a high-load worker;
    - threshold_asc 1 MB/s: a move restarts an executor and reloads its state partitions from the
      checkpoint, which is not worth less than ~1% of a 1 Gbit/s link.
    """

    high_load: float = Field(0.85, ge=0.0, le=1.0, description=(
        "A worker whose executors keep at least this share of its cores busy is high-load."))
    low_load: float = Field(0.5, ge=0.0, le=1.0, description=(
        "A worker with at most this share busy is low-load (below high_load)."))
    threshold_asc: float = Field(1_000_000.0, ge=0.0, description=(  # the paper's threshold_ASC
        "Communication optimisation moves an executor only when it removes more than this much shuffle "
        "traffic between hosts, in bytes/s."))

    @model_validator(mode="after")
    def _order(self) -> OtdSettings:
        if not self.low_load < self.high_load:
            raise ValueError(f"low_load ({self.low_load}) must be below high_load ({self.high_load})")
        return self


Pairs = dict[frozenset[ExecutorKey], float]


def executor_hosts(model: ClusterModel) -> dict[ExecutorKey, str]:
    """Executor -> the host of its worker (the paper's getNode); executors on unknown workers are left out."""
    hosts = model.host_of()
    return {e.key: hosts[e.worker] for e in model.executors if e.worker in hosts}


def pair_traffic(model: ClusterModel) -> Pairs:
    # N-Storm §4.3 eqs. (4)/(5): the summand CC_{e'->e} + CC_{e->e'}, per unordered pair
    pairs: Pairs = {}
    for t in model.traffic:
        if t.src != t.dst:
            pair = frozenset((t.src, t.dst))
            pairs[pair] = pairs.get(pair, 0.0) + t.bytes_per_s
    return pairs


def _neighbours(model: ClusterModel) -> dict[ExecutorKey, dict[ExecutorKey, float]]:
    """Executor -> {other executor: pair traffic}, over placed executors only."""
    placed = executor_hosts(model)
    out: dict[ExecutorKey, dict[ExecutorKey, float]] = {k: {} for k in placed}
    for pair, cc in pair_traffic(model).items():
        a, b = tuple(pair)
        if a in placed and b in placed:
            out[a][b] = cc
            out[b][a] = cc
    return out


def _with_host(nbrs: dict[ExecutorKey, float], hosts: dict[ExecutorKey, str], host: str) -> float:
    """s(e, n): traffic between e and the executors other than e on host n."""
    return sum(cc for other, cc in nbrs.items() if hosts[other] == host)


def allocation_score(model: ClusterModel, key: ExecutorKey, host: str) -> float:
    # N-Storm §4.3 eq. (4): AS_{e,n} = intra-node cost of e on n - inter-node cost (sums exclude e)
    hosts = executor_hosts(model)
    nbrs = _neighbours(model).get(key, {})
    intra = sum(cc for other, cc in nbrs.items() if hosts[other] == host)
    inter = sum(cc for other, cc in nbrs.items() if hosts[other] != host)
    return intra - inter


def asc(model: ClusterModel, key: ExecutorKey, target_host: str) -> float:
    # N-Storm §4.3 eq. (5), second form: s(e,n) - s(e,n0) (= (AS_{e,n} - AS_{e,n0}) / 2)
    hosts = executor_hosts(model)
    nbrs = _neighbours(model).get(key, {})
    return _with_host(nbrs, hosts, target_host) - _with_host(nbrs, hosts, hosts[key])


def inter_node_traffic(model: ClusterModel) -> float:
    """Total CC between executors on different hosts, bytes/s (what Algorithm 2 lowers by each move's ASC)."""
    hosts = executor_hosts(model)
    return sum(cc for pair, cc in pair_traffic(model).items()
               if all(k in hosts for k in pair) and len({hosts[k] for k in pair}) == 2)


def classify(model: ClusterModel, settings: OtdSettings) -> tuple[list[Worker], list[Worker]]:
    # N-Storm §4.2 Fig. 6: high- and low-load workers; a worker with busy_share None is neither
    known = [(w, w.busy_share) for w in model.workers if w.busy_share is not None]
    high = [w for w, share in known if share >= settings.high_load]
    low = [w for w, share in known if share <= settings.low_load]
    return high, low


def _load(w: Worker) -> float:
    return w.busy_share if w.busy_share is not None else 1.0


def _realisable(model: ClusterModel, e: PlacedExecutor, w: Worker) -> bool:
    """Spark's constraints: room for e's shape, the app's landing worker when known, not e's own worker."""
    if w.id == e.worker or w.cores_free < e.cores or w.memory_free_mb < e.memory_mb:
        return False
    return e.key.app not in model.landing or model.landing[e.key.app] == w.id


def _best(model: ClusterModel, candidates: Iterable[PlacedExecutor], low: list[Worker],
          same_host: bool) -> Move | None:
    """argmax over (e, w) of ASC, w the lowest-load realisable low-load worker of its host for e
    (Algorithms 1 and 2, lines 3-11 / 1-9); ties: lower target load, executor key, worker id."""
    hosts, nbrs, worker_host = executor_hosts(model), _neighbours(model), model.host_of()
    best: tuple[tuple[float, float, ExecutorKey, str], PlacedExecutor, Worker, float] | None = None
    for e in sorted(candidates, key=lambda x: x.key):
        if e.key not in hosts:
            continue
        n0 = hosts[e.key]
        per_host: dict[str, Worker] = {}
        for w in sorted(low, key=lambda x: (_load(x), x.id)):
            if _realisable(model, e, w) and (same_host or worker_host[w.id] != n0):
                per_host.setdefault(worker_host[w.id], w)  # min_load_workers: one per host
        base = _with_host(nbrs[e.key], hosts, n0)
        for n, w in per_host.items():
            score = _with_host(nbrs[e.key], hosts, n) - base  # eq. (5)
            rank = (-score, _load(w), e.key, w.id)
            if best is None or rank < best[0]:
                best = (rank, e, w, score)
    if best is None:
        return None
    _, e, w, score = best
    return Move(key=e.key, source=e.worker, target=w.id, score=score, reason="")


def load_balancing(model: ClusterModel, high: list[Worker], low: list[Worker]) -> Move | None:
    # N-Storm §4.3 Algorithm 1: from the most loaded high-load worker, argmax ASC even when negative
    if not high:
        return None
    source = min(high, key=lambda w: (-_load(w), w.id))
    return _best(model, model.executors_on(source.id), low, same_host=True)


def communication_optimisation(model: ClusterModel, low: list[Worker], settings: OtdSettings) -> Move | None:
    # N-Storm §4.3 Algorithm 2: argmax ASC over all executors, returned only if ASC > threshold_ASC
    move = _best(model, model.executors, low, same_host=False)
    return move if move is not None and move.score > settings.threshold_asc else None


def _figures(model: ClusterModel, high: list[Worker], low: list[Worker]) -> dict[str, float]:
    """worker_load_imbalance = max / mean busy share over workers with a known load (1.0 when the
    mean is 0: all idle is balanced; absent when no load is known)."""
    loads = [w.busy_share for w in model.workers if w.busy_share is not None]
    figures = {"inter_node_bytes_per_s": inter_node_traffic(model),
               "high_load_workers": float(len(high)), "low_load_workers": float(len(low))}
    if loads:
        mean = sum(loads) / len(loads)
        figures["mean_busy_share"] = mean
        figures["worker_load_imbalance"] = max(loads) / mean if mean > 0 else 1.0
    return figures


@register_placement
class Otd:
    """One OTD cycle (N-Storm §4.2): classify the workers, then one of the four cases; at most one move."""

    name: ClassVar[str] = "otd"
    config_model: ClassVar[type[OtdSettings]] = OtdSettings

    def place(self, model: ClusterModel, settings: BaseModel | None) -> PlacementPlan:
        return self._cycle(model, settings_as(settings, OtdSettings))

    def _cycle(self, model: ClusterModel, settings: OtdSettings) -> PlacementPlan:
        high, low = classify(model, settings)
        figures = _figures(model, high, low)
        if high and low:  # Case 1
            source = min(high, key=lambda w: (-_load(w), w.id))
            move = load_balancing(model, high, low)
            head = f"case 1: {source.id} at {_load(source):.2f} busy"
            if move is None:
                return self._plan(figures, f"{head}, but no low-load worker can take one of its executors")
            return self._move(move, figures, f"{head}, move {move.key} to {move.target}")
        if high:  # Case 2
            loads = {f"busy_share.{w.id}": _load(w) for w in high}
            text = (f"case 2: {len(high)} high-load worker(s) ({', '.join(f'{w.id} {_load(w):.2f}' for w in high)})"
                    " and none low-load: add workers or capacity")
            warning = PlacementWarning(kind="short_of_resources", message=text,
                                       figures={**loads, "mean_busy_share": figures["mean_busy_share"],
                                                "high_load": settings.high_load, "low_load": settings.low_load})
            return self._plan(figures, text, warnings=(warning,))
        if low:  # Case 3
            move = communication_optimisation(model, low, settings)
            if move is None:
                return self._plan(figures, f"case 3: no realisable move's ASC exceeds {settings.threshold_asc:.3g} B/s")
            return self._move(move, figures, f"case 3: move {move.key} from {move.source} to {move.target}")
        unknown = sum(w.busy_share is None for w in model.workers)
        return self._plan(figures, "case 4: no high- or low-load worker, nothing to do"
                          + (f" ({unknown} worker(s) of unknown load)" if unknown else ""))

    def _move(self, move: Move, figures: dict[str, float], head: str) -> PlacementPlan:
        reason = f"{head} (ASC {move.score:.3g} B/s)"
        chosen = Move(key=move.key, source=move.source, target=move.target, score=move.score, reason=reason)
        return self._plan({**figures, "asc": move.score}, reason, moves=(chosen,))

    def _plan(self, figures: dict[str, float], reason: str, moves: tuple[Move, ...] = (),
              warnings: tuple[PlacementWarning, ...] = ()) -> PlacementPlan:
        return PlacementPlan(policy=self.name, figures=figures, reason=reason, moves=moves, warnings=warnings)
