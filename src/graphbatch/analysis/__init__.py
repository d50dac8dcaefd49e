"""Dataset and strategy analysis: numbers in, numbers out (NumPy/SciPy, no printing or plotting).

- `describe`: the tuple-packing paper's Table 1 (padding efficiency when padding every graph to
  the largest) plus quantiles, mean and excess kurtosis.
- `compare_strategies`: every registered strategy on one budget, one row each.
- `search_limits_if_available`: the efficiency-vs-limits grid when ``graphbatch.packing`` has it.
- `load_bench` / `summarize_bench` / `bench_label`: benchmark records (the one owner of their
  keys and of their summary over repeats); `step_timing_fields` / `step_list_fields`: a
  record's timing and per-step keys from a runner's per-step arrays; `break_even`: after how
  many steps a run that compiles overtakes a baseline, compile time counted.
- `load_sizes`: a size table from an ``.npz`` or a graph store; `input_files`: the files such an
  input stands for (a sharded store: the manifest and its shards), which no output may replace.
"""

from ._bench import (
    BENCH_KEYS,
    BENCH_METRICS,
    BENCH_OPTIONAL_METRICS,
    LIST_KEYS,
    bench_label,
    break_even,
    load_bench,
    step_list_fields,
    step_timing_fields,
    summarize_bench,
    validate_bench,
)
from ._compare import (
    COMPARE_COLUMNS,
    DEFAULT_VARIANTS,
    Comparison,
    StrategyResult,
    Variant,
    compare_columns,
    compare_strategies,
    comparison_variants,
)
from ._dataset import DEFAULT_QUANTILES, ColumnSummary, DatasetSummary, describe, describe_column
from ._limits import LIMIT_RECORD_KEYS, LimitSearch, search_limits_if_available
from ._sources import input_files, load_sizes

__all__ = [
    "BENCH_KEYS",
    "BENCH_METRICS",
    "BENCH_OPTIONAL_METRICS",
    "COMPARE_COLUMNS",
    "DEFAULT_QUANTILES",
    "DEFAULT_VARIANTS",
    "LIMIT_RECORD_KEYS",
    "LIST_KEYS",
    "ColumnSummary",
    "Comparison",
    "DatasetSummary",
    "LimitSearch",
    "StrategyResult",
    "Variant",
    "bench_label",
    "break_even",
    "compare_columns",
    "compare_strategies",
    "comparison_variants",
    "describe",
    "describe_column",
    "input_files",
    "load_bench",
    "load_sizes",
    "search_limits_if_available",
    "step_list_fields",
    "step_timing_fields",
    "summarize_bench",
    "validate_bench",
]
