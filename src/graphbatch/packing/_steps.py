"""Step fill: the greedy fill for data-parallel plans, ``ranks`` evenly filled batches a step.

The step boundaries are a chain (each step's end depends on its start: `_StepTargets`,
`_chain`) over a window of prefix sums (`_Window`); blocks of steps are dealt at once
(`deal_block`, module `_step_deal`) and a step that does not fit as dealt goes through the
per-step dealing, repair and shortening (`_one_step`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .._budget import Budget
from .._errors import InputError
from .._exact import decimal, share_keys, sortable
from . import _memory
from ._exchange import swap_repair
from ._greedy import batches_lower_bound
from ._memory import index_dtype
from ._step_deal import ShareRanks, SizePairs, deal_block

__all__ = ["step_fill", "StepFill", "SizePairs"]


class StepFill(NamedTuple):
    """The batches of `step_fill`: ``order`` the graphs' positions in batch order (int32 below
    2**31 graphs, else int64; ``None`` where the order was not asked for), ``offsets`` the int64
    batch boundaries into it, ``real_nodes``/``real_edges`` the int64 real totals of each
    batch. The number of batches is a multiple of the ranks."""

    order: NDArray[Any] | None
    offsets: NDArray[np.int64]
    real_nodes: NDArray[np.int64]
    real_edges: NDArray[np.int64]


def step_fill(
    nodes: np.ndarray,
    edges: np.ndarray,
    budget: Budget,
    ranks: int,
    fill: float = 0.99,
    steps: int | None = None,
    *,
    with_order: bool = True,
    perm_out: np.ndarray | None = None,
    pairs: SizePairs | None = None,
    totals: tuple[int, int] | None = None,
) -> StepFill:
    """Greedy fill by steps of ``ranks`` batches, for data-parallel plans.

    Consecutive graphs (in the given order) make up a step while they fit ``fill`` (read by
    `decimal`: ``0.99`` is 99/100) of the step's capacity (``ranks`` times the budget's real
    capacities, rounded down); within the step they are dealt,
    largest share of the capacities first, in snake order over the ``ranks`` batches, so the
    batches of a step are filled evenly. A step whose dealt batches do not fit the budget is
    shortened until they do. Every step but possibly the last holds ``ranks`` non-empty batches;
    the last holds at least ``min(ranks, graphs)`` graphs spread over its batches.

    ``steps`` (default: the fewest at ``fill``) is the number of steps aimed at; a step that
    had to be shortened leaves its graphs to the following ones, and graphs left after the last
    planned step make further steps.

    ``nodes``/``edges`` may be any integer dtype (e.g. int32); sums are int64. Memory beyond the
    result is one window of prefix sums (``STEP_WINDOW`` graphs) and one block of steps.

    Vectorised: the step boundaries are a chain (each step's end depends on its start), found
    one step at a time from the prefix sums; the dealing and the fit check of up to
    ``STEP_BLOCK_STEPS`` consecutive steps are then done together (one sort by step and share),
    and only a step whose dealt batches do not fit goes through the per-step repair and
    shortening (after a shortened step the chain is found again from its new end).

    Returns a `StepFill`: the order (positions in batch order), the batch boundaries and the
    real node and edge totals of each batch. The number of batches is a multiple of ``ranks``
    (empty batches only when there are fewer graphs than ``ranks`` in total).
    ``with_order=False`` leaves ``order`` ``None`` (the same batches; their graphs are not
    recorded). ``perm_out``: an array of the order's dtype and length to write the order to
    (returned as ``order``). ``pairs``: `SizePairs` of these graphs (in any order),
    ``totals``: their int node and edge sums, when already known."""
    num_graphs = int(nodes.shape[0])
    ranks = int(ranks)
    caps = (budget.node_capacity, budget.edge_capacity, budget.graph_capacity)
    if totals is None:
        totals = (int(nodes.sum(dtype=np.int64)), int(edges.sum(dtype=np.int64)))
    # a step's room: `fill` of its capacity, rounded down (integers: exact)
    fraction = decimal(fill)
    room_n = ranks * caps[0] * fraction.numerator // fraction.denominator
    room_e = ranks * caps[1] * fraction.numerator // fraction.denominator
    room_g = ranks * caps[2]
    # steps needed at `fill` of the capacity; every step then gets an even share of what is left
    if steps is None:
        steps = batches_lower_bound(*totals, num_graphs, room_n, room_e, room_g)
    reach = ranks * caps[2] + 1  # a step never spans more graphs than this
    vectorised = _memory.STEP_BLOCK_STEPS and num_graphs
    ranker = ShareRanks(nodes, edges, caps[0], caps[1], pairs) if vectorised else None
    window = _Window(nodes, edges)
    target = _StepTargets(num_graphs, ranks, steps, (*totals, room_n, room_e, room_g), window)
    record = _StepRecord(_perm_array(num_graphs, with_order, perm_out), ranks)
    pos = 0
    while pos < num_graphs:
        window.cover(pos, reach)
        if ranker is None:  # the sequential path: one step at a time
            end = target.end(pos, record.n_steps)
            placed, step_totals, pos_next = _one_step(nodes, edges, pos, end, ranks, caps)
            record.keep(pos, placed, step_totals[None])
            pos = pos_next
            continue
        # the chain of step ends inside this window, then the block dealt at once
        ends = _chain(target, pos, record.n_steps, reach)
        # the block's graphs go straight into perm[pos:ends[-1]]: a step that does not fit as
        # dealt, and the steps after a shortened one, are written over later (never a range
        # below pos: positions are placed in increasing order)
        block_totals, fits = deal_block(
            nodes, edges, pos, np.asarray(ends, np.int64), ranks, caps, ranker, record.perm
        )
        pos = _keep_block(record, nodes, edges, pos, ends, block_totals, fits, ranks, caps)
    return record.result()


def _perm_array(m: int, with_order: bool, perm_out: np.ndarray | None) -> np.ndarray | None:
    """The array `step_fill` writes its order to: ``perm_out`` (checked), a new one, or
    ``None`` without ``with_order``."""
    if not with_order:
        return None
    if perm_out is None:
        return np.empty(m, index_dtype(m))
    if perm_out.dtype != index_dtype(m) or perm_out.shape != (m,):
        raise InputError(
            f"perm_out must be a {np.dtype(index_dtype(m))} array of {m} items, "
            f"got {perm_out.dtype} of shape {perm_out.shape}"
        )
    return perm_out


class _Window:
    """Prefix sums of the node and edge counts over graphs ``start .. stop``:
    ``node_prefix[i]`` is the sum of ``nodes[:start + i]`` (int64), slid forward as the fill
    goes (memory O(`STEP_WINDOW`))."""

    def __init__(self, nodes: np.ndarray, edges: np.ndarray) -> None:
        self.nodes, self.edges = nodes, edges
        self.start = self.stop = 0
        self.node_prefix = self.edge_prefix = np.zeros(1, np.int64)

    def cover(self, pos: int, reach: int) -> None:
        """Slide the window to start at ``pos`` (inside it) when a step from ``pos`` could
        reach past its end and the end is not the last graph."""
        num_graphs = self.nodes.shape[0]
        if pos + reach <= self.stop or self.stop >= num_graphs:
            return
        # the prefix sums at pos
        base_n = int(self.node_prefix[pos - self.start])
        base_e = int(self.edge_prefix[pos - self.start])
        start, stop = pos, min(num_graphs, pos + max(_memory.STEP_WINDOW, reach))
        node_prefix = np.empty(stop - start + 1, np.int64)
        edge_prefix = np.empty(stop - start + 1, np.int64)
        node_prefix[0], edge_prefix[0] = base_n, base_e
        np.cumsum(self.nodes[start:stop], out=node_prefix[1:], dtype=np.int64)
        np.cumsum(self.edges[start:stop], out=edge_prefix[1:], dtype=np.int64)
        node_prefix[1:] += base_n
        edge_prefix[1:] += base_e
        self.start, self.stop = start, stop
        self.node_prefix, self.edge_prefix = node_prefix, edge_prefix


class _StepTargets:
    """Where a step ends before the dealing's fit check (`end`): each step aims at an even
    share of what is left, at most its room; ``totals`` = ``(total nodes, total edges, node
    room, edge room, graph room)`` of the graphs and of a step."""

    def __init__(
        self,
        num_graphs: int,
        ranks: int,
        steps: int,
        totals: tuple[int, int, int, int, int],
        window: _Window,
    ) -> None:
        self.num_graphs, self.ranks, self.steps = num_graphs, ranks, steps
        self.totals, self.window = totals, window

    def end(self, pos: int, k: int) -> int:
        """End of the step starting at ``pos`` when ``k`` steps came before. Scalar code: it
        runs once per step."""
        num_graphs, ranks = self.num_graphs, self.ranks
        total_n, total_e, room_n, room_e, room_g = self.totals
        start = self.window.start
        node_prefix, edge_prefix = self.window.node_prefix, self.window.edge_prefix
        i = pos - start
        before_n, before_e = node_prefix.item(i), edge_prefix.item(i)
        left = self.steps - k
        if left < 1:
            left = 1
        # integer targets (an even share of what is left, at most the room), exact
        x = (total_n - before_n) // left
        target_n = before_n + (x if x < room_n else room_n)
        x = (total_e - before_e) // left
        target_e = before_e + (x if x < room_e else room_e)
        # the end: the first of the graph bound, the last position whose prefix sums stay
        # within the node and edge targets (prefix sums never fall: a bound is searched only
        # where it binds; the window holds the graph bound)
        g = -(-(num_graphs - pos) // left)
        j = pos + (g if g < room_g else room_g)
        if j > num_graphs:
            j = num_graphs
        if node_prefix.item(j - start) > target_n:
            # the last position whose prefix sum is <= target_n
            j = start + int(node_prefix.searchsorted(target_n + 1)) - 1
        if edge_prefix.item(j - start) > target_e:
            j = start + int(edge_prefix.searchsorted(target_e + 1)) - 1
        if left == 1:
            rest_fits = (
                total_n - before_n <= room_n
                and total_e - before_e <= room_e
                and num_graphs - pos <= room_g
            )
            j = num_graphs if rest_fits else j
        g = pos + ranks
        if j < g:
            j = g if g < num_graphs else num_graphs
        if 0 < num_graphs - j < ranks:  # leave the last step at least `ranks` graphs
            j = max(pos + 1, num_graphs - ranks)
        return j


class _StepRecord:
    """The steps made so far: their graphs in batch order (``perm``, ``None``: not recorded)
    and per step the [3, ranks] totals (graphs, real nodes, real edges) of its batches."""

    def __init__(self, perm: np.ndarray | None, ranks: int) -> None:
        self.perm = perm
        self.per_step = np.zeros((64, 3, ranks), np.int64)  # grown by doubling
        self.n_steps = 0

    def keep(self, pos: int, placed: np.ndarray | None, step_totals: np.ndarray) -> None:
        """Record consecutive steps from ``pos`` on: their graphs in batch order (``None``:
        already in ``perm``) and [steps, 3, ranks] totals."""
        if self.perm is not None and placed is not None:
            self.perm[pos : pos + placed.shape[0]] = placed
        k = step_totals.shape[0]
        while self.n_steps + k > self.per_step.shape[0]:
            self.per_step = np.concatenate([self.per_step, np.zeros_like(self.per_step)])
        self.per_step[self.n_steps : self.n_steps + k] = step_totals
        self.n_steps += k

    def result(self) -> StepFill:
        """`step_fill`'s result."""
        per_step = self.per_step[: self.n_steps]
        ranks = per_step.shape[2]
        offsets = np.zeros(self.n_steps * ranks + 1, np.int64)
        np.cumsum(per_step[:, 0].reshape(-1), out=offsets[1:])
        return StepFill(self.perm, offsets, per_step[:, 1].reshape(-1), per_step[:, 2].reshape(-1))


def _keep_block(
    record: _StepRecord,
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    ends: list[int],
    block_totals: np.ndarray,
    fits: np.ndarray,
    ranks: int,
    caps: tuple[int, int, int],
) -> int:
    """Record a dealt block of steps ending at ``ends``: the runs that fit as dealt as they
    are, a step that does not through the per-step repair (`_one_step`); after a shortened
    step the rest of the block is dropped (the chain goes on from its new end). Returns the
    position reached."""
    i = 0
    while i < len(ends):
        misfits = np.flatnonzero(~fits[i:])
        first_misfit = len(ends) if misfits.size == 0 else i + int(misfits[0])
        if first_misfit > i:  # steps i..first_misfit-1 fit as dealt
            record.keep(pos, None, block_totals[i:first_misfit])
            pos, i = ends[first_misfit - 1], first_misfit
            if i == len(ends):
                break
        # step i does not fit as dealt: the per-step repair, and shortening if needed
        placed, step_totals, end = _one_step(nodes, edges, pos, ends[i], ranks, caps)
        record.keep(pos, placed, step_totals[None])
        shortened = end != ends[i]
        pos, i = end, i + 1
        if shortened:  # the chain goes on from the new end
            break
    return pos


def _chain(target: _StepTargets, pos: int, k: int, reach: int) -> list[int]:
    """The ends of consecutive steps from ``pos`` (``k`` steps before it) while a step may
    start: below the last graph, its ``reach`` inside ``target``'s window, at most
    `STEP_BLOCK_STEPS` steps and `STEP_BLOCK_GRAPHS` graphs from ``pos``. Each end is
    ``target.end(p, k)``; while more than one planned step is left and a step can take
    ``ranks`` graphs before the last graph they are computed here inline (the same arithmetic,
    no call per step), the last steps by ``target.end`` itself."""
    num_graphs, ranks, steps = target.num_graphs, target.ranks, target.steps
    total_n, total_e, room_n, room_e, room_g = target.totals
    window = target.window
    start = window.start
    # a step may start at p while p < lim (p + reach <= window.stop unless the window reaches
    # the last graph)
    lim = min(
        num_graphs,
        pos + _memory.STEP_BLOCK_GRAPHS,
        num_graphs if window.stop >= num_graphs else window.stop - reach + 1,
    )
    n_max = _memory.STEP_BLOCK_STEPS
    ends: list[int] = []
    append = ends.append
    node_at, edge_at = window.node_prefix.item, window.edge_prefix.item
    node_search, edge_search = window.node_prefix.searchsorted, window.edge_prefix.searchsorted
    p = pos
    last = num_graphs - ranks  # an end above this leaves the last step fewer than `ranks` graphs
    n = 0  # len(ends)
    # the inline steps: while more than one step is left (left = steps - k - n > 1) and the
    # step can take `ranks` graphs before the last graph (p + ranks < num_graphs: p < last)
    n_fast = min(n_max, steps - k - 1)
    lim_fast = min(lim, last)
    while p < lim_fast and n < n_fast:
        left = steps - k - n
        i = p - start
        before_n = node_at(i)
        before_e = edge_at(i)
        x = (total_n - before_n) // left
        target_n = before_n + (x if x < room_n else room_n)
        x = (total_e - before_e) // left
        target_e = before_e + (x if x < room_e else room_e)
        g = -(-(num_graphs - p) // left)
        j = p + (g if g < room_g else room_g)
        if j > num_graphs:
            j = num_graphs
        if node_at(j - start) > target_n:
            j = start + int(node_search(target_n + 1)) - 1
        if edge_at(j - start) > target_e:
            j = start + int(edge_search(target_e + 1)) - 1
        if j < p + ranks:
            j = p + ranks  # below num_graphs here
        if j > last and j < num_graphs:
            j = max(p + 1, last)
        append(j)
        n += 1
        p = j
    step_end = target.end
    while p < lim and n < n_max:  # the last steps: target.end itself
        p = step_end(p, k + n)
        append(p)
        n += 1
    return ends


def _one_step(
    nodes: NDArray[np.integer[Any]],
    edges: NDArray[np.integer[Any]],
    pos: int,
    end: int,
    ranks: int,
    caps: tuple[int, int, int],
) -> tuple[NDArray[np.int64], NDArray[np.int64], int]:
    """One step from ``pos`` to at most ``end``: the graphs sorted by share, dealt in snake
    order over the ``ranks`` batches, repaired by one-for-one exchanges when a batch is over
    the budget (``caps``: node, edge and graph capacities of a batch), and shortened until the
    batches fit. Returns ``(placed positions in batch order, int64 [3, ranks] totals (graphs,
    nodes, edges) per batch, the step's end)``."""
    node_cap, edge_cap, graph_cap = caps
    while True:
        step_nodes = nodes[pos:end].astype(np.int64)
        step_edges = edges[pos:end].astype(np.int64)
        # exact order of the shares
        share = sortable(share_keys(step_nodes, step_edges, node_cap, edge_cap))
        order = np.argsort(-share, kind="stable")  # positions relative to pos
        place = np.arange(order.shape[0])
        row, col = place // ranks, place % ranks
        batch = np.where(row % 2 == 0, col, ranks - 1 - col)
        grid = np.full((ranks, int(row.max()) + 1), -1, np.int64)
        grid[batch, row] = place
        sorted_nodes, sorted_edges = step_nodes[order], step_edges[order]
        for repaired in (False, True):
            present = grid >= 0
            safe = np.where(present, grid, 0)
            batch_nodes = np.where(present, sorted_nodes[safe], 0).sum(axis=1)
            batch_edges = np.where(present, sorted_edges[safe], 0).sum(axis=1)
            within = (batch_nodes <= node_cap).all() and (batch_edges <= edge_cap).all()
            if repaired or within:
                break  # (the repair leaves a grid without over-full batches as it is)
            # one-for-one exchanges bring over-full batches within the shape
            grid = swap_repair(sorted_nodes, sorted_edges, grid, caps)
        batch_graphs = present.sum(axis=1)
        within = (
            (batch_nodes <= node_cap).all()
            and (batch_edges <= edge_cap).all()
            and (batch_graphs <= graph_cap).all()
        )
        if within or end - pos <= 1:
            break
        # shorten the step; its last graphs go to the following steps
        end = pos + max(1, min(end - pos - 1, (end - pos) * 49 // 50))
    return order[grid[present]] + pos, np.stack([batch_graphs, batch_nodes, batch_edges]), end
