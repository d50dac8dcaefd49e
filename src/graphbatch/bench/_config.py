"""What `graphbatch bench` runs: the grid of (model, strategy, batch size, repeat) and options."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import InputError, InputTypeError, UnknownNameError

if TYPE_CHECKING:
    from .._budget import Budget
    from .._sizes import GraphSizes

__all__ = [
    "BASELINES",
    "BenchConfig",
    "DEFAULT",
    "FEED_MODES",
    "FULL",
    "JAX_BASELINES",
    "JAX_DEFAULT",
    "JAX_FULL",
    "MACE_BASELINES",
    "MACE_DEFAULT",
    "PACKING_GRAPH_CAP",
    "PADDED_STRATEGIES",
    "STEP_MODES",
    "RunSpec",
    "bench_budget",
    "is_packing",
]

#: Strategies that batch with PyG's ``DataLoader`` (no padding): PyG's SchNet (for ``schnet``;
#: our model otherwise) eager or ``torch.compile(dynamic=True)``, and our model unpadded + eager.
BASELINES = ("pyg-eager", "pyg-compile", "unpadded")
#: Fixed-shape strategies of the paper and of graphbatch, batched by ``graphbatch.torch``.
#: Baselines of ``--framework jax`` (jraph users' own batching, feeding the same Flax model):
#: ``jraph-dynamic`` (``jraph.dynamically_batch`` to the dynamic strategy's budget),
#: ``jraph-pad64`` (``jraph.pad_with_graphs`` to the next multiples of 64: one compilation per
#: new shape), ``unpadded`` (exact-size batches; update time measured after a warm-up call).
JAX_BASELINES = ("jraph-dynamic", "jraph-pad64", "unpadded")
#: Baselines of ``--models mace`` (MACE's own unpadded batches): ``mace-eager`` (MACE's usual
#: path) and ``mace-compile`` (``mace.tools.compile.prepare`` + ``torch.compile(dynamic=None)``).
MACE_BASELINES = ("mace-eager", "mace-compile")
PADDED_STRATEGIES = (
    "static-constant",
    "static-64",
    "static-pow2",
    "dynamic",
    "pack-lpf",
    "buckets",
)
COMPILE_MODES = ("auto", "on", "off")
#: How a padded run trains (``--step``): ``captured`` -- `graphbatch.torch.TrainStep`, one CUDA
#: graph per padded shape on CUDA (`EagerBackend` on CPU); ``loop`` -- the bench's own loop
#: (the model, ``torch.compile``d or not, called step by step); ``auto``: captured on CUDA (loop
#: with a ``--compile-mode`` that makes CUDA graphs of its own), loop on CPU.
STEP_MODES = ("auto", "captured", "loop")
#: How batches reach the device (``--feed``): ``device`` -- `graphbatch.torch.DeviceFeed`
#: (copies on a side stream; workers' slots for store-fed loaders); ``loader`` -- the loader's
#: batches and ``.to(device)`` (with ``--prefetch N`` a background thread: recorded as
#: ``prefetch``); ``auto``: device on CUDA without ``--prefetch``, loader otherwise.
FEED_MODES = ("auto", "device", "loader")
#: Graph slots per batch-size unit that packing strategies get by default (``graph_cap=None``):
#: packs are limited by nodes and edges (tuple-packing and IPU papers); a graph cap of twice the
#: batch size leaves room for packs of many small graphs, so the node/edge caps bind and the
#: padded nodes are filled to ~99% instead of the ~93% left when 128 graph slots run out first.
PACKING_GRAPH_CAP = 2.0


def is_packing(strategy: str) -> bool:
    """Whether ``strategy`` packs to node/edge limits (``pack-*``, ``buckets``)."""
    return strategy.startswith("pack-") or strategy == "buckets"


@dataclass
class BenchConfig:
    """One benchmark invocation. ``steps`` optimizer steps per run; ``eval_every`` steps between
    test evaluations (and one at the end); ``subset`` molecules (``None`` = all of QM9).

    Budget-using strategies share one budget per batch size, estimated once from ``seed``
    (Algorithm 1), in every repeat, so a compiled model meets the same shape in each repeat;
    ``graph_cap`` scales its graph slots (``n_graph = round(graph_cap * batch_size)``; > 1 lets
    the node/edge caps bind instead of the graph cap). ``graph_cap=None`` (default): packing
    strategies get `PACKING_GRAPH_CAP`, the others (``dynamic``, ...) Algorithm 1's 1.

    ``threads=None``: torch's default intra-op threads (the machine's cores)."""

    dataset: str = "qm9"
    #: where training batches come from: "memory" (QM9 graphs built in memory, batched by
    #: `graphbatch.torch.loader`) or "store" (the graph store at ``store``, read by the store
    #: batch path; the wait for a batch is the read from the store)
    data: str = "memory"
    store: str | None = None
    framework: str = "torch"
    models: tuple[str, ...] = ("schnet",)
    strategies: tuple[str, ...] = ("pack-lpf", "dynamic", "unpadded", "pyg-eager")
    batch_sizes: tuple[int, ...] = (32, 128)
    steps: int = 80
    repeats: int = 3
    subset: int | None = 5000
    device: str = "cpu"
    compile: str = "auto"
    eval_every: int = 80
    num_workers: int = 0
    prefetch: int = 0  # batches made ahead by a background thread (graphbatch.torch.prefetch)
    sharing_strategy: str | None = None  # torch.multiprocessing's, for batches from workers
    threads: int | None = None
    seed: int = 0
    graph_cap: float | None = None
    lr: float = 1e-3
    cutoff: float = 6.0
    full: bool = False
    interleave: bool = True
    compile_backend: str = "inductor"
    compile_mode: str | None = None  # e.g. "reduce-overhead" (CUDA graphs; static shapes only)
    step: str = "auto"  # STEP_MODES: how padded runs train
    feed: str = "auto"  # FEED_MODES: how padded runs' batches reach the device
    #: steps after the timed ones run under torch.profiler (torch runs; 0: none), summarised
    #: in the record's ``profile`` (`graphbatch.bench._profile.profile_steps`)
    profile_steps: int = 0
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    strategy_options: dict[str, Any] = field(default_factory=lambda: {"buckets": {"num_shapes": 4}})

    def validate(self) -> BenchConfig:
        if self.framework not in ("torch", "jax"):
            raise InputError(f"framework must be torch or jax, got {self.framework!r}")
        jax = self.framework == "jax"
        if jax:
            from ..jax.models import MODELS
        else:
            from ..models import MODELS
        baselines: tuple[str, ...] = JAX_BASELINES if jax else BASELINES
        if "mace" in self.models and not jax:
            self._validate_mace()
            baselines = MACE_BASELINES
        for m in self.models:
            if m not in MODELS and not (m == "mace" and not jax):
                raise InputError(f"unknown model {m!r}; known: {', '.join(sorted(MODELS))}")
        if not self.models or not self.strategies or not self.batch_sizes:
            raise InputError("--models, --strategies and --batch-sizes must each name something")
        for s in self.strategies:
            if s not in baselines:
                from ..planners import strategy_names

                if s not in strategy_names():
                    raise InputError(
                        f"unknown strategy {s!r} for --framework {self.framework}; known: "
                        f"{', '.join(sorted(set(strategy_names()) | set(baselines)))}"
                    )
        for b in self.batch_sizes:
            if int(b) < 2:
                raise InputError(
                    f"batch sizes must be >= 2 (one slot is the padding graph), got {b}"
                )
        for name in ("steps", "repeats", "eval_every"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.subset is not None and int(self.subset) < 10:
            raise InputError(f"subset must be >= 10 molecules, got {self.subset}")
        if self.device not in ("cpu", "cuda"):
            raise InputError(f"device must be cpu or cuda, got {self.device!r}")
        if self.compile not in COMPILE_MODES:
            raise InputError(f"compile must be one of {COMPILE_MODES}, got {self.compile!r}")
        if self.threads is not None and int(self.threads) < 1:
            raise InputError(f"threads must be >= 1, got {self.threads}")
        if self.graph_cap is not None and not float(self.graph_cap) >= 1.0:
            raise InputError(f"graph_cap must be >= 1, got {self.graph_cap}")
        if self.sharing_strategy not in (None, "file_descriptor", "file_system"):
            raise InputError(
                "sharing_strategy must be file_descriptor or file_system, got "
                f"{self.sharing_strategy!r}"
            )
        if int(self.num_workers) < 0:
            raise InputError(f"num_workers must be >= 0, got {self.num_workers}")
        if int(self.prefetch) < 0:
            raise InputError(f"prefetch must be >= 0, got {self.prefetch}")
        if int(self.profile_steps) < 0:
            raise InputError(f"profile_steps must be >= 0, got {self.profile_steps}")
        if jax and self.profile_steps:
            raise InputError("--profile-steps is for torch runs (JAX has jax.profiler)")
        if not jax:
            self._validate_compile_backend()
        if self.data not in ("memory", "store"):
            raise InputError(f"data must be 'memory' or 'store', got {self.data!r}")
        if self.data == "store" and self.store is None:
            raise InputError("--data store needs a graph store: --store PATH")
        self._validate_modes()
        return self

    def _validate_modes(self) -> None:
        """``step`` and ``feed`` are known, and the feed is one thing at a time."""
        if self.step not in STEP_MODES:
            raise InputError(f"step must be one of {', '.join(STEP_MODES)}, got {self.step!r}")
        if self.feed not in FEED_MODES:
            raise InputError(f"feed must be one of {', '.join(FEED_MODES)}, got {self.feed!r}")
        if self.feed == "device" and int(self.prefetch) > 0:
            raise InputError(
                f"--feed device with --prefetch {self.prefetch}: the device feed needs no "
                "background thread (drop --prefetch, or use --feed loader)"
            )
        if self.step == "captured" and self.compile_mode in ("reduce-overhead", "max-autotune"):
            raise InputError(
                f"--step captured with --compile-mode {self.compile_mode}: that mode makes CUDA "
                "graphs of its own (use --step loop, or the default compile mode)"
            )

    def _validate_compile_backend(self) -> None:
        """A ``torch.compile`` backend torch knows (checked before any run starts: an unknown
        one used to fail with ``InvalidBackend`` only at the first compiled step)."""
        backend = self.compile_backend
        if not isinstance(backend, str):
            raise InputTypeError(f"compile_backend must be a backend name, got {backend!r}")
        if backend == "inductor":  # torch's default, always there (no need to import dynamo)
            return
        from torch.compiler import list_backends

        known = list_backends(exclude_tags=())  # debug/experimental ones (eager) included
        if backend not in known:
            shown = sorted(b for b in known if "TESTING" not in b and "minifier" not in b)
            raise UnknownNameError(
                f"unknown --compile-backend {backend!r}; torch.compile "
                f"backends here: {', '.join(shown)}"
            )

    def _validate_mace(self) -> None:
        """``mace`` runs alone (its own data and baselines) on the memory path."""
        if self.models != ("mace",):
            raise InputError(
                f"model mace runs alone (its own data and baselines), got models "
                f"{', '.join(self.models)}"
            )
        if self.data != "memory" and self.store is None:
            raise InputError(
                "model mace with --data store needs an atomistic store: --store "
                "PATH (graphbatch data build extxyz FILE --cutoff R --out PATH)"
            )
        wrong = [s for s in self.strategies if s in BASELINES]
        if wrong:
            raise InputError(
                f"strategy {wrong[0]!r} is a PyG baseline; model mace's baselines "
                f"are {', '.join(MACE_BASELINES)}"
            )

    def graph_cap_for(self, strategy: str) -> float:
        """Graph-slot factor of ``strategy``'s budget: ``graph_cap``, or by default
        `PACKING_GRAPH_CAP` for packing strategies and 1 for the others."""
        if self.graph_cap is not None:
            return float(self.graph_cap)
        return PACKING_GRAPH_CAP if is_packing(strategy) else 1.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("models", "strategies", "batch_sizes"):
            d[k] = list(d[k])
        return d


#: Default: finishes on 2 CPU cores in under 10 minutes (QM9 subset, SchNet, batch sizes 32 and
#: 128, 80 steps, 3 repeats; measured in benchmarks/RESULTS.md).
DEFAULT = BenchConfig()

#: ``--full``: the paper's grid (3 models x 4 batch sizes x all strategies x 10 repeats).
FULL = BenchConfig(
    models=("schnet", "mpeu", "painn"),
    strategies=PADDED_STRATEGIES + BASELINES,
    batch_sizes=(16, 32, 64, 128),
    steps=2000,
    repeats=10,
    subset=None,
    compile="on",
    eval_every=200,
    threads=None,
    full=True,
)


#: ``--models mace``: a small MACE on 512 QM9 molecules at r_max 5 Å, batch size 32, padded
#: ``dynamic`` (eager, and compiled once; ``--compile auto``) against MACE eager and
#: ``torch.compile(dynamic=None)`` unpadded.
MACE_DEFAULT = BenchConfig(
    models=("mace",),
    strategies=("dynamic", *MACE_BASELINES),
    batch_sizes=(32,),
    steps=100,
    repeats=1,
    subset=512,
    cutoff=5.0,
    eval_every=100,
)

#: ``--framework jax`` default: finishes on 2 shared CPU cores in under 10 minutes (measured in
#: benchmarks/RESULTS.md): SchNet, pack-lpf and dynamic against jraph.dynamically_batch, the
#: loader as users run it (`graphbatch.jax.loader`'s default ``prefetch=2``); 40 steps (about
#: one epoch of the subset at batch size 128), as the 80 steps' runs took 10-25 minutes there.
JAX_DEFAULT = BenchConfig(
    framework="jax",
    strategies=("pack-lpf", "dynamic", "jraph-dynamic"),
    prefetch=2,
    steps=40,
    eval_every=40,
)

#: ``--framework jax --full``: the paper's grid in JAX.
JAX_FULL = BenchConfig(
    framework="jax",
    models=("schnet", "mpeu", "painn"),
    strategies=PADDED_STRATEGIES + JAX_BASELINES,
    batch_sizes=(16, 32, 64, 128),
    steps=2000,
    repeats=10,
    subset=None,
    eval_every=200,
    prefetch=2,
    full=True,
)


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid: ``model`` trained with ``strategy`` at ``batch_size`` in repeat
    ``repeat`` (0-based), ``compiled`` or eager."""

    model: str
    strategy: str
    batch_size: int
    repeat: int
    compiled: bool


def bench_budget(cfg: BenchConfig, sizes: GraphSizes, batch_size: int, strategy: str) -> Budget:
    """The budget ``strategy`` gets at ``batch_size``: Algorithm 1's node and edge caps from
    ``cfg.seed`` (the same in every repeat, so compiled runs of later repeats reuse the shape),
    with ``round(cfg.graph_cap_for(strategy) * batch_size)`` graph slots; raised to fit the
    largest graph (heavy-tailed sets, e.g. atomistic stores, at small batch sizes)."""
    from .._budget import Budget, estimate_budget
    from .._random import seed_rng

    # the run-wide generator of plan/compare (graphbatch._random.seed_rng): same seed, same budget
    est = estimate_budget(sizes, int(batch_size), rng=seed_rng(cfg.seed))
    slots = int(round(cfg.graph_cap_for(strategy) * batch_size))
    n_node = max(est.n_node, int(sizes.n_node.max()) + 1)
    n_edge = max(est.n_edge, int(sizes.n_edge.max()))
    return Budget(n_node, n_edge, max(slots, est.n_graph))
