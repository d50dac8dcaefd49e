"""MACE training speed: graphbatch padded batches compiled once vs MACE's usual paths.

Three training steps (forward with forces, energy/force loss, backward, Adam) on the same QM9
molecules, batch size B, a small MACE (float32), measured **interleaved** (one step of each
mode per round, so machine load hits all alike):

- ``padded-compiled``: ``gt.loader(..., preset=ga.mace(r_max))`` (fixed-shape ``dynamic``
  plan), model built with ``mace.tools.compile.prepare`` and ``torch.compile(dynamic=False)``;
- ``eager``: MACE's own ``torch_geometric.DataLoader`` batches, model eager (MACE's default);
- ``compiled-unpadded``: MACE's batches, ``prepare`` + ``torch.compile(dynamic=None)``
  (recompiles when shapes change, then goes dynamic).

Prints per mode the first-step time (compile included), the median step time over the rounds
after the warm-up (compile excluded), the median of per-round ratios eager / padded and
compiled-unpadded / padded, and the total time including compilation.

    PYTHONPATH=src python benchmarks/mace_train.py --molecules 512 --batch-size 32 --rounds 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch


def build_data(n: int, r_max: float):
    from mace.data import AtomicData, Configuration
    from mace.tools import AtomicNumberTable

    from graphbatch.datasets import load_qm9

    table = AtomicNumberTable([1, 6, 7, 8, 9])
    mols = load_qm9(limit=n)
    ptr = np.concatenate([[0], np.cumsum(mols.n_node)])
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        z, pos = mols.z[ptr[i]:ptr[i + 1]], mols.pos[ptr[i]:ptr[i + 1]]
        conf = Configuration(atomic_numbers=z, positions=pos, pbc=(False,) * 3, cell=None,
                             properties={"energy": float(mols.y[i, 10]),
                                         "forces": rng.normal(size=(len(z), 3)) * 0.01},
                             property_weights={})
        out.append(AtomicData.from_config(conf, z_table=table, cutoff=r_max))
    return out, table


def build_model(table, r_max: float, compiled: bool, seed: int = 0):
    from e3nn import o3
    from mace import modules

    torch.manual_seed(seed)
    kw = dict(
        r_max=r_max, num_bessel=8, num_polynomial_cutoff=5, max_ell=2,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        num_interactions=2, num_elements=len(table.zs), hidden_irreps=o3.Irreps("16x0e + 16x1o"),
        MLP_irreps=o3.Irreps("16x0e"), atomic_energies=np.array([-0.5, -38.0, -54.6, -75.1, -99.7]),
        avg_num_neighbors=10.0, atomic_numbers=table.zs, correlation=2,
        gate=torch.nn.functional.silu,
    )
    if compiled:
        from mace.tools.compile import prepare

        return prepare(modules.MACE)(**kw)
    return modules.MACE(**kw)


def cycle(loader):
    while True:
        yield from loader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--molecules", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=20, help="measured rounds after warm-up")
    ap.add_argument("--warmup", type=int, default=3, help="rounds excluded (compilation)")
    ap.add_argument("--r-max", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--modes", default="padded-compiled,eager,compiled-unpadded")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import graphbatch.atomistic as ga
    import graphbatch.torch as gt
    from mace.modules.loss import WeightedEnergyForcesLoss
    from mace.tools import torch_geometric

    data, table = build_data(args.molecules, args.r_max)
    mace_loss = WeightedEnergyForcesLoss(1.0, 100.0)
    modes = args.modes.split(",")
    steps = {}
    if "padded-compiled" in modes:
        model = build_model(table, args.r_max, compiled=True)
        fn = torch.compile(model, dynamic=False)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        it = cycle(gt.loader(data, strategy="dynamic", batch_size=args.batch_size, seed=0,
                             preset=ga.mace(r_max=args.r_max)))

        def step_padded(fn=fn, opt=opt, it=it):
            batch = next(it)
            batch["positions"].requires_grad_(True)
            out = fn(batch, training=True)
            loss = ga.energy_force_loss(out, batch, forces_weight=100.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps["padded-compiled"] = step_padded
    for name, compiled in (("eager", False), ("compiled-unpadded", True)):
        if name not in modes:
            continue
        model = build_model(table, args.r_max, compiled=compiled)
        fn = torch.compile(model, dynamic=None) if compiled else model
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        it = cycle(torch_geometric.dataloader.DataLoader(data, batch_size=args.batch_size,
                                                         shuffle=True, drop_last=False))

        def step_unpadded(fn=fn, opt=opt, it=it, compiled=compiled):
            batch = next(it)
            d = batch.to_dict()
            if compiled:
                d["positions"].requires_grad_(True)
            out = fn(d, training=True)
            loss = mace_loss(batch, out)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        steps[name] = step_unpadded

    times = {k: [] for k in steps}
    total = {k: 0.0 for k in steps}
    for r in range(args.warmup + args.rounds):
        for name, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            total[name] += dt
            times[name].append(dt)
        print(f"round {r}: " + ", ".join(f"{k} {times[k][-1] * 1e3:.0f} ms" for k in steps),
              flush=True)
    w = args.warmup
    print(f"\nCPU threads {args.threads}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{args.molecules} molecules, batch size {args.batch_size}, {args.rounds} measured "
          f"rounds after {w} warm-up")
    for name in steps:
        print(f"{name:18s} first step {times[name][0]:8.1f} s   median step "
              f"{statistics.median(times[name][w:]) * 1e3:8.1f} ms   total {total[name]:8.1f} s")
    if "padded-compiled" in steps:
        for name in steps:
            if name == "padded-compiled":
                continue
            ratios = [a / b for a, b in zip(times[name][w:], times["padded-compiled"][w:])]
            print(f"{name} / padded-compiled: median per-round ratio {statistics.median(ratios):.2f}"
                  f" (min {min(ratios):.2f}, max {max(ratios):.2f})")


if __name__ == "__main__":
    main()
