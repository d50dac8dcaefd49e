"""The training benchmark of the static-vs-dynamic study (``graphbatch bench``) and its
statistics. The statistics need only NumPy/SciPy; running imports torch, PyG and the
`graphbatch.torch` / `graphbatch.datasets` adapters when called."""

from ._config import (
    BASELINES,
    DEFAULT,
    FEED_MODES,
    FULL,
    JAX_BASELINES,
    JAX_DEFAULT,
    JAX_FULL,
    MACE_BASELINES,
    MACE_DEFAULT,
    PACKING_GRAPH_CAP,
    PADDED_STRATEGIES,
    STEP_MODES,
    BenchConfig,
    RunSpec,
)
from ._jax_runner import build_jax_model, jax_targets, jax_train_step, run_jax_bench
from ._mace import ENERGY_WEIGHT, FORCES_WEIGHT, MACE_ELEMENTS, MaceData, mace_targets, small_mace
from ._report import break_even_lines, learning_tests, summarize, targets, write_results
from ._run import bench_model, compile_padded
from ._runner import effective_sharing_strategy, plan_runs, run_bench, run_one
from ._stats import PairwiseTests, bonferroni, pairwise_mannwhitney, pairwise_ttest

__all__ = [
    "BASELINES",
    "ENERGY_WEIGHT",
    "FORCES_WEIGHT",
    "MACE_ELEMENTS",
    "MaceData",
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
    "BenchConfig",
    "PairwiseTests",
    "RunSpec",
    "bench_model",
    "bonferroni",
    "break_even_lines",
    "build_jax_model",
    "compile_padded",
    "effective_sharing_strategy",
    "jax_targets",
    "jax_train_step",
    "learning_tests",
    "mace_targets",
    "pairwise_mannwhitney",
    "pairwise_ttest",
    "plan_runs",
    "run_bench",
    "run_jax_bench",
    "run_one",
    "small_mace",
    "summarize",
    "targets",
    "write_results",
]
