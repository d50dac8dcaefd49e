"""Account for a `train_ddp.py` run: which steps count, and was every graph trained on exactly once?

    python examples/ddp_coverage.py RUN_DIR --store qm9.h5 [--compare OTHER_RUN_DIR] [--json]

A restart rolls the model back to the checkpoint it resumes from, so the steps an attempt took
after that checkpoint left no trace in the model. The *committed* history is: for every attempt,
its steps up to the global step the next attempt resumed from (``attempts.jsonl``), and all steps
of the last attempt, which must have finished. Checked on the committed history:

* every rank has exactly one record per global step (so equal steps per rank);
* in each epoch, every graph of the store appears exactly once across ranks and steps;
* every rank logged the same global loss for a step.

Steps past a resume point are reported as ``rolled_back`` (trained, then discarded). With
``--compare`` the committed loss curves of two runs are compared step by step. Exit status 1
when a check fails. Reads JSON only (nothing is unpickled).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def committed_history(run: Path) -> dict:
    """Attempts, committed and rolled-back step records of a run folder; raises ValueError when
    the run did not finish or its attempts are out of order."""
    attempts = read_jsonl(run / "attempts.jsonl")
    starts = [a for a in attempts if "resume_step" in a]
    finished = [a for a in attempts if a.get("finished")]
    if [a["attempt"] for a in starts] != list(range(len(starts))):
        raise ValueError(f"{run}: attempts.jsonl has attempts {[a['attempt'] for a in starts]}")
    if not finished or finished[-1]["attempt"] != starts[-1]["attempt"]:
        raise ValueError(f"{run}: the last attempt ({starts[-1]['attempt']}) did not finish")
    resume = [a["resume_step"] for a in starts]
    if resume != sorted(resume):
        raise ValueError(f"{run}: resume steps go backwards: {resume}")
    # attempt a's steps count up to where attempt a+1 resumed; the last attempt's all count
    cutoff = {a: resume[a + 1] for a in range(len(starts) - 1)}
    cutoff[len(starts) - 1] = finished[-1]["global_step"]
    committed, rolled_back = [], []
    for path in sorted((run / "steps").glob("rank*.jsonl")):
        for rec in read_jsonl(path):
            ok = rec["global_step"] <= cutoff[rec["attempt"]]
            (committed if ok else rolled_back).append(rec)
    return dict(attempts=starts, world_size=starts[-1]["world_size"], committed=committed,
                rolled_back=rolled_back, final_step=finished[-1]["global_step"])


def check(history: dict, num_graphs: int) -> tuple[list[str], dict]:
    """(problems, summary) of a committed history for a dataset of ``num_graphs`` graphs."""
    problems: list[str] = []
    world, final = history["world_size"], history["final_step"]
    per_rank_step = Counter((r["rank"], r["global_step"]) for r in history["committed"])
    for rank in range(world):
        missing = [s for s in range(1, final + 1) if per_rank_step[(rank, s)] == 0]
        extra = [s for s in range(1, final + 1) if per_rank_step[(rank, s)] > 1]
        if missing or extra:
            problems.append(f"rank {rank}: global steps missing {missing[:10]}, "
                            f"repeated {extra[:10]}")
    graphs_by_epoch: dict[int, Counter] = defaultdict(Counter)
    losses: dict[int, set] = defaultdict(set)
    steps_by_rank_epoch: Counter = Counter()
    for r in history["committed"]:
        graphs_by_epoch[r["epoch"]].update(r["graphs"])
        losses[r["global_step"]].add(r["loss"])
        steps_by_rank_epoch[(r["epoch"], r["rank"])] += 1
    for epoch, seen in sorted(graphs_by_epoch.items()):
        lost = [g for g in range(num_graphs) if seen[g] == 0]
        dup = sorted(g for g, c in seen.items() if c > 1)
        if lost or dup:
            problems.append(f"epoch {epoch}: {len(lost)} graphs never trained on "
                            f"(first {lost[:5]}), {len(dup)} trained on more than once "
                            f"(first {dup[:5]})")
    for step, values in sorted(losses.items()):
        if len(values) > 1:
            problems.append(f"global step {step}: ranks logged different losses {values}")
            break
    epochs = sorted(graphs_by_epoch)
    summary = dict(
        world_size=world, attempts=len(history["attempts"]),
        resume_steps=[a["resume_step"] for a in history["attempts"]],
        committed_steps=final, epochs=epochs,
        steps_per_rank_per_epoch={e: sorted({steps_by_rank_epoch[(e, r)] for r in range(world)})
                                  for e in epochs},
        graphs_per_epoch={e: sum(graphs_by_epoch[e].values()) for e in epochs},
        rolled_back_steps=len({(r["attempt"], r["global_step"])
                               for r in history["rolled_back"]}),
        losses=[min(losses[s]) for s in sorted(losses)],
    )
    return problems, summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="--out folder of train_ddp.py")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--store", help="the graph store the run trained on (reads its size only)")
    src.add_argument("--num-graphs", type=int)
    p.add_argument("--compare", help="another run folder: compare committed loss curves")
    p.add_argument("--rtol", type=float, default=1e-5, help="loss-curve tolerance (relative)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = p.parse_args(argv)
    if args.store:
        from graphbatch.datasets import GraphStore

        num_graphs = len(GraphStore(args.store).graph_sizes())
    else:
        num_graphs = args.num_graphs
    try:
        problems, summary = check(committed_history(Path(args.run)), num_graphs)
        if args.compare:
            other_problems, other = check(committed_history(Path(args.compare)), num_graphs)
            problems += [f"{args.compare}: {m}" for m in other_problems]
            a, b = summary["losses"], other["losses"]
            worst = max((abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b)), default=0.0)
            summary["compare"] = dict(run=args.compare, steps=[len(a), len(b)],
                                      max_rel_diff=worst)
            if len(a) != len(b) or worst > args.rtol:
                problems.append(f"loss curves differ: {len(a)} vs {len(b)} steps, max relative "
                                f"difference {worst:.3g} > {args.rtol:g}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(dict(summary, problems=problems)))
    else:
        for k, v in summary.items():
            if k != "losses":
                print(f"{k:26s} {v}")
        print(f"{'loss first/last':26s} {summary['losses'][0]:.6g} / {summary['losses'][-1]:.6g}")
        print("OK: every graph exactly once per epoch" if not problems else "\n".join(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
