"""The factory protocol: how `tune` builds the user's model and its training step.

A factory is a callable ``factory(*, device, compile, source)`` returning either a step
callable or a `TuneStep`:

* ``device``: ``"cpu"``/``"cuda"`` (torch) or ``"cpu"``/``"gpu"`` (JAX);
* ``compile``: whether to return the compiled step (torch: ``torch.compile(...,
  dynamic=False)``, one compilation per padded shape) or the eager one; JAX factories always
  return a jitted step and may ignore it;
* ``source``: the dataset or graph store tune plans over (to read feature sizes from).

The step takes one padded batch exactly as ``graphbatch.torch.loader`` (a PyG ``Batch``) or
``graphbatch.jax.loader`` (a device-resident `PaddedGraphs`) yields it, runs forward, backward
and the optimizer update, and returns the loss (torch; tune synchronises CUDA before stopping
the clock) or, for JAX, arrays that are ready only when the whole step is done -- the loss and
the updated parameters and optimizer state (tune calls ``jax.block_until_ready`` on them;
the loss alone is ready before the update is). ``"MODULE:FACTORY"`` names a factory importable
from ``MODULE``. The built-in names
(`builtin_models`) are factories over ``graphbatch.models`` / ``graphbatch.jax.models`` with the
training step of ``graphbatch bench``, both from the recipe they share (`graphbatch.recipes`).
"""

from __future__ import annotations

import contextlib
import importlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import InputError, UnknownNameError
from ._pairs import reverse_paired

if TYPE_CHECKING:
    import torch

__all__ = ["TuneStep", "as_tune_step", "builtin_models", "resolve_factory"]


@dataclass
class TuneStep:
    """What a factory returns: ``step(batch) -> loss`` (one training step on a padded batch);
    ``loader_options``: extra keyword arguments for ``graphbatch.torch.loader`` /
    ``graphbatch.jax.loader`` (``preset``, ``collation``; JAX: ``cutoff``, ...); ``dataset``:
    what the loader iterates instead of the source (e.g. the source converted for the model), whose
    sizes tune then plans over; ``memory_bytes(batch)``: the step's peak memory where the
    framework gives no other measure (JAX: the compiled executable's memory analysis)."""

    step: Callable[[Any], Any]
    loader_options: dict[str, Any] = field(default_factory=dict)
    dataset: Any = None
    memory_bytes: Callable[[Any], int] | None = None


def as_tune_step(obj: object) -> TuneStep:
    """A factory's result as a `TuneStep` (a plain callable is its step)."""
    if isinstance(obj, TuneStep):
        return obj
    if callable(obj):
        return TuneStep(step=obj)
    raise InputError(
        f"a tune factory must return a step callable or a TuneStep, got {type(obj).__name__}"
    )


# --------------------------------------------------------------------------- torch built-ins
def _target(batch: Any) -> torch.Tensor:
    """The regression target of a padded batch: column 0 of the graph field ``y`` (QM9 stores:
    ``mu``; any column times the same), zeros when the batch has none."""
    import torch

    y = getattr(batch, "y", None)
    if y is None:
        return torch.zeros(int(batch.num_graphs), device=batch.graph_mask.device)
    return (y[:, 0] if y.dim() > 1 else y).to(torch.float32)


def _options(name: str, source: Any) -> dict[str, dict[str, Any]]:
    """The bench's model options for ``source``: SchNet's paired filter (the bench's, for
    radius graphs) only where the source's edges come in reverse pairs (`reverse_paired`)."""
    if name != "schnet":
        return {}
    return {"schnet": {"pair_edges": reverse_paired(source)}}


def _torch_reference(name: str) -> Callable[..., TuneStep]:
    def factory(*, device: str, compile: bool, source: Any) -> TuneStep:
        import torch

        from ..models import batch_inputs
        from ..recipes import LEARNING_RATE
        from ..recipes.torch import compile_padded, padded_mse, reference_model

        model = reference_model(name, options=_options(name, source).get(name)).to(device)
        fn = compile_padded(model) if compile else model
        opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

        def step(batch: Any) -> torch.Tensor:
            b = batch.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = padded_mse(fn(**batch_inputs(b)), _target(b), b.graph_mask)
            loss.backward()
            opt.step()
            return loss

        return TuneStep(step)

    factory.__qualname__ = f"{name}_factory"
    return factory


_MACE_GRAPHS: weakref.WeakKeyDictionary[Any, list] = weakref.WeakKeyDictionary()


def _mace_graphs(source: Any, r_max: float) -> list:
    """MACE ``AtomicData`` of the source's atoms (``z``, ``pos``) by MACE's own neighbour list
    at ``r_max`` Å, energy and force targets 0; cached per source (the compiled and the eager
    step convert once) where the source is weakly referenceable."""
    import numpy as np
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from ..recipes.mace import MACE_ELEMENTS

    try:
        graphs = _MACE_GRAPHS.get(source)
    except TypeError:  # not weakly referenceable: converted per call
        graphs = None
    if graphs is not None:
        return graphs
    table = AtomicNumberTable(list(MACE_ELEMENTS))
    graphs = []
    for i in range(len(source)):
        g = source[i]
        conf = Configuration(
            atomic_numbers=np.asarray(g["z"], np.int64),
            positions=np.asarray(g["pos"], np.float64),
            pbc=(False,) * 3,
            cell=None,
            properties={"energy": 0.0, "forces": np.zeros((len(g["z"]), 3))},
            property_weights={},
        )
        graphs.append(AtomicData.from_config(conf, z_table=table, cutoff=r_max))
    with contextlib.suppress(TypeError):
        _MACE_GRAPHS[source] = graphs
    return graphs


def _mace_factory(*, device: str, compile: bool, source: Any) -> TuneStep:
    """The bench's small MACE (energies + forces, `graphbatch.atomistic.energy_force_loss`) on
    MACE ``AtomicData`` built from the source's atoms (``z``, ``pos``) by MACE's own neighbour
    list at r_max = 5 Å; energy and force targets 0 (tune measures speed)."""
    import torch

    import graphbatch.atomistic as ga

    from ..recipes import LEARNING_RATE
    from ..recipes.mace import ENERGY_WEIGHT, FORCES_WEIGHT, small_mace
    from ..recipes.torch import compile_padded

    r_max = 5.0
    graphs = _mace_graphs(source, r_max)
    n_node = sum(int(d.positions.shape[0]) for d in graphs)
    n_edge = sum(int(d.edge_index.shape[1]) for d in graphs)
    model = small_mace(
        r_max=r_max,
        avg_num_neighbors=float(n_edge / max(n_node, 1)),
        compiled=compile,
        seed=0,
    ).to(device)
    fn = compile_padded(model) if compile else model
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)

    def step(batch: dict[str, Any]) -> torch.Tensor:
        d = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        opt.zero_grad(set_to_none=True)
        if compile:  # MACE's prepare_graph leaves this to the caller
            d["positions"].requires_grad_(True)
        out = fn(d, training=True)
        loss = ga.energy_force_loss(
            out, d, energy_weight=ENERGY_WEIGHT, forces_weight=FORCES_WEIGHT
        )
        loss.backward()
        opt.step()
        return loss

    return TuneStep(step, loader_options={"preset": ga.mace(r_max=r_max)}, dataset=graphs)


# --------------------------------------------------------------------------- JAX built-ins
def _jax_reference(name: str) -> Callable[..., TuneStep]:
    def factory(*, device: str, compile: bool, source: Any) -> TuneStep:
        import jax
        import optax

        from ..jax.models import graph_inputs
        from ..recipes import LEARNING_RATE
        from ..recipes.jax import reference_model, train_step

        model = reference_model(name, options=_options(name, source).get(name))
        opt = optax.adam(LEARNING_RATE)
        jitted = jax.jit(train_step(model, opt))
        state: dict[str, Any] = {}

        def init(pg: Any) -> None:
            params = jax.jit(model.init, static_argnames="num_graphs")(
                jax.random.PRNGKey(0), **graph_inputs(pg)
            )
            state["params"], state["opt"] = params, opt.init(params)

        def step(pg: Any) -> tuple[Any, Any, Any]:
            if not state:
                init(pg)
            state["params"], state["opt"], loss = jitted(state["params"], state["opt"], pg)
            return loss, state["params"], state["opt"]  # ready only when the update is done

        def memory_bytes(pg: Any) -> int:
            if not state:
                init(pg)
            lowered = jitted.lower(state["params"], state["opt"], pg)
            mem: Any = lowered.compile().memory_analysis()
            return int(
                mem.argument_size_in_bytes
                + mem.output_size_in_bytes
                - mem.alias_size_in_bytes
                + mem.temp_size_in_bytes
            )

        return TuneStep(step, memory_bytes=memory_bytes)

    factory.__qualname__ = f"{name}_jax_factory"
    return factory


def builtin_models(framework: str = "torch") -> dict[str, Callable[..., TuneStep]]:
    """The built-in factories of ``framework``: ``schnet``, ``mpeu``, ``painn`` (and ``mace``
    for torch, which needs ``mace-torch``)."""
    if framework == "torch":
        out = {n: _torch_reference(n) for n in ("schnet", "mpeu", "painn")}
        out["mace"] = _mace_factory
        return out
    if framework == "jax":
        return {n: _jax_reference(n) for n in ("schnet", "mpeu", "painn")}
    raise InputError(f"framework must be torch or jax, got {framework!r}")


def resolve_factory(
    model: str | Callable[..., Any], framework: str = "torch"
) -> Callable[..., Any]:
    """The factory for ``model``: a built-in name, ``"MODULE:FACTORY"`` (imported), or a
    callable (returned as is)."""
    if callable(model):
        return model
    if not isinstance(model, str):
        raise InputError(f"model must be a name, MODULE:FACTORY or a callable, got {model!r}")
    builtins = builtin_models(framework)
    if model in builtins:
        return builtins[model]
    if ":" not in model:
        raise UnknownNameError(
            f"unknown model {model!r} for --framework {framework}; known: "
            f"{', '.join(sorted(builtins))}, or MODULE:FACTORY"
        )
    mod_name, _, attr = model.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InputError(f"model {model!r}: cannot import module {mod_name!r} ({exc})") from None
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise InputError(f"model {model!r}: module {mod_name!r} has no {attr!r}")
    if not callable(obj):
        raise InputError(f"model {model!r}: {attr!r} is not callable")
    return obj
