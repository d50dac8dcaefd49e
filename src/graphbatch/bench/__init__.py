"""The training benchmark of the static-vs-dynamic study (``graphbatch bench``) and its
statistics. The statistics need only NumPy/SciPy; the runner imports torch when it runs."""

from ._stats import PairwiseTests, bonferroni, pairwise_mannwhitney, pairwise_ttest

__all__ = ["PairwiseTests", "bonferroni", "pairwise_mannwhitney", "pairwise_ttest"]
