"""The published dual longest-pack-first histogram packing (tuple-packing paper, Listing 2),
re-implemented as printed, for side-by-side benchmarks. Copyright of the original: Graphcore 2022.

Kept as published, including its behaviour: each histogram bin becomes one pattern when it is
first placed (so graphs of one size are not combined with each other), the search walks every
integer heuristic value, and the efficiency is reported against the shrunken maxima. Fixed only
where the printed listing does not run:

* the indentation of the inner loop (``break``/``offset += 1``) is restored to the loop nesting
  the text implies;
* where the listing stores a pack as ``(len_a, len_b, count)`` with plain ints (lines 62, 76,
  78), the remaining packs keep their lists ``(lens_a, lens_b)`` and a new pack is stored as
  ``([len_a], [len_b])``; with ints the next ``sum(lens_a)`` raises ``TypeError``.
"""

from collections import defaultdict

import numpy as np


def pack_using_dlpfhp(
    histogram,
    max_tuple_length,
    max_tuples_per_pack,
    heuristic=lambda x, y: int(x * y),
    verbose=True,
):
    """Dual Longest-pack-first histogram-packing algorithm (Listing 2)."""
    # heuristic assignment
    heuristic_data_list = [(heuristic(a, b), a, b, histogram[(a, b)]) for a, b in histogram]
    heuristic_data_list.sort()
    heuristic_data_list.reverse()
    data_list = heuristic_data_list
    max_a, max_b = max_tuple_length[0], max_tuple_length[1]
    max_size = heuristic(max_a, max_b)
    if max_tuples_per_pack == "max":
        max_tuples_per_pack = min(max_tuple_length)
    # Initialize main strategy data dictionary.
    # The key indicates how much space is left.
    # The value is a list of tuples, consisting of counts and respective packs/tuples.
    tmp_strategies_per_length = defaultdict(list)
    strategies_per_length = defaultdict(list)
    for i in range(len(data_list)):  # distribute each bin of histogram
        size, len_a, len_b, n_sequences_to_bin = data_list[i]
        left_size = heuristic(max_a - len_a, max_b - len_b)  # noqa: F841 (unused, as published)
        offset = 0  # smallest possible offset for perfect fit
        while n_sequences_to_bin > 0:
            keys = [key for key in tmp_strategies_per_length if key >= size + offset]
            if not keys:
                offset = max_size + 1
            else:
                offset = min(keys) - size
            if (size + offset) in tmp_strategies_per_length:
                for i in range(len(tmp_strategies_per_length[size + offset])):
                    lens_a, lens_b, n_sequences_to_pack = tmp_strategies_per_length[size + offset][i]
                    if (len_a + sum(lens_a)) <= max_a and (len_b + sum(lens_b)) <= max_b:
                        tmp_strategies_per_length[size + offset].pop(i)
                        new_lens_a = lens_a.copy()
                        new_lens_a.append(len_a)
                        new_lens_b = lens_b.copy()
                        new_lens_b.append(len_b)
                        new_size = heuristic(max_a - sum(new_lens_a), max_b - sum(new_lens_b))
                        new_count = min(n_sequences_to_pack, n_sequences_to_bin)
                        # adjust strategies
                        if n_sequences_to_pack > new_count:
                            tmp_strategies_per_length[size + offset].append(
                                (lens_a, lens_b, n_sequences_to_pack - new_count))  # fixed
                        if not tmp_strategies_per_length[size + offset]:
                            tmp_strategies_per_length.pop(size + offset)
                        if new_size == 0 or max_tuples_per_pack == len(new_lens_a):
                            strategies_per_length[0].append((new_lens_a, new_lens_b, new_count))
                        else:
                            tmp_strategies_per_length[new_size].append(
                                (new_lens_a, new_lens_b, new_count))
                        n_sequences_to_bin -= new_count
                        offset = 0
                        break
            offset += 1
            if offset + size > max_size:
                new_size = heuristic(max_a - len_a, max_b - len_b)
                if new_size == 0 or max_tuples_per_pack == 1:
                    strategies_per_length[new_size].append(
                        ([len_a], [len_b], n_sequences_to_bin))  # fixed
                else:
                    tmp_strategies_per_length[new_size].append(
                        ([len_a], [len_b], n_sequences_to_bin))  # fixed
                n_sequences_to_bin = 0
                break
    # merge all strategies
    for key in tmp_strategies_per_length:
        strategies_per_length[key].extend(tmp_strategies_per_length[key])
    # flatten strategies dictionary
    strategy_set = []
    strategy_repeat_count = []
    sum_lens_a, sum_lens_b = [], []
    for key in strategies_per_length:
        for lens_a, lens_b, n_sequences_to_pack in strategies_per_length[key]:
            strategy_set.append((lens_a, lens_b))
            strategy_repeat_count.append(n_sequences_to_pack)
            sum_lens_a.append(sum(lens_a))
            sum_lens_b.append(sum(lens_b))
    if not (max_a == max(sum_lens_a) and max_b == max(sum_lens_b)):
        if verbose:
            print("max discrepancy, reducing sequence length", max_a, max(sum_lens_a), max_b,
                  max(sum_lens_b))
        max_a, max_b = max(sum_lens_a), max(sum_lens_b)
    # efficiency calculation
    empty_tokens_a = int(sum([
        count * (max_a - sum(pack_a)) for count, (pack_a, pack_b) in
        zip(strategy_repeat_count, strategy_set)]))
    empty_tokens_b = int(sum([
        count * (max_b - sum(pack_b)) for count, (pack_a, pack_b) in
        zip(strategy_repeat_count, strategy_set)]))
    packs = int(sum(strategy_repeat_count))
    total_tokens_a, total_tokens_b = int(max_a * packs), int(max_b * packs)
    token_efficiency = (100 - empty_tokens_a / total_tokens_a * 100,
                        100 - empty_tokens_b / total_tokens_b * 100)
    return strategy_set, np.array(strategy_repeat_count), token_efficiency
