"""Multi-node DDP training of SchNet on a QM9 graph store, with checkpoints and automatic resume.

Launched with torchrun, one command per node (docs/distributed.md):

    graphbatch data build qm9 --out qm9.h5
    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        --rdzv-id qm9-run --max-restarts 3 examples/train_ddp.py --store qm9.h5 --out run/

Every rank plans its own share of each epoch with ``graphbatch.torch.loader`` (no plan is sent
between processes) and checks at start-up and at each epoch that all ranks hold the same plan
(`graphbatch.torch.check_plan_consistency`). ``--out`` (a folder every node can read and write)
holds:

* ``checkpoint.pt`` -- model, optimizer, every rank's loader state, the global step; written
  atomically by rank 0 every ``--checkpoint-every`` steps and at each epoch's end, and loaded
  automatically when the job (re)starts;
* ``attempts.jsonl`` -- one line per (re)start: attempt number and the global step it resumed from;
* ``steps/rank{r}.jsonl`` -- one line per training step of rank ``r``: attempt, epoch, step,
  global step, the dataset indices trained on, the global loss. Steps of an attempt after the
  checkpoint the next attempt resumed from were rolled back; ``examples/ddp_coverage.py`` counts
  the committed steps and checks that each graph was trained on exactly once per epoch.

Faults: a rank that dies (e.g. SIGKILL) makes its peers' collectives fail; torchrun
(``--max-restarts``) then restarts every worker, which resume from the last checkpoint. A rank
that stalls is caught by the process-group timeout (``--timeout``: peers waiting in a collective
fail) and by a per-step watchdog (``--step-timeout``: the stalled process exits), both of which
turn into the same restart. ``--fault kill:RANK:EPOCH:STEP`` / ``stall:RANK:EPOCH:STEP`` injects
such a fault once per ``--out`` folder (for tests and demonstrations).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import graphbatch
import graphbatch.torch as gt
from graphbatch.datasets import QM9_TARGETS, GraphStore
from graphbatch.models import SchNet, batch_inputs

CHECKPOINT = "checkpoint.pt"
STALL_EXIT_CODE = 75  # the watchdog's exit status: "no step finished within --step-timeout"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", required=True, help="QM9 graph store (graphbatch data build qm9)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, attempts, step logs")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--strategy", default="dynamic", help="graphbatch planning strategy")
    p.add_argument("--batch-size", type=int, default=32, help="graphs per batch (planner target)")
    p.add_argument("--seed", type=int, default=0, help="plan and model-initialisation seed")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--target", default="U0", choices=[t[0] for t in QM9_TARGETS])
    p.add_argument("--hidden", type=int, default=64, help="SchNet hidden features = filters")
    p.add_argument("--interactions", type=int, default=3)
    p.add_argument("--gaussians", type=int, default=25)
    p.add_argument("--cutoff", type=float, default=6.0, help="SchNet cutoff (Å)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="steps between checkpoints (also one at each epoch's end)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="process-group timeout in seconds: a collective waiting longer fails")
    p.add_argument("--step-timeout", type=float, default=0.0,
                   help="watchdog: exit when no step finished for this many seconds (0: off)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p.add_argument("--fault", action="append", default=[], metavar="KIND:RANK:EPOCH:STEP",
                   help="inject a fault once per --out folder after that step: kill (SIGKILL "
                        "itself) or stall (sleep forever)")
    args = p.parse_args(argv)
    args.faults = [parse_fault(f) for f in args.fault]
    if not Path(args.store).is_file():
        p.error(f"--store {args.store!r} does not exist (build it: graphbatch data build qm9 ...)")
    for name in ("epochs", "batch_size", "checkpoint_every", "hidden", "interactions"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def parse_fault(text: str) -> tuple[str, int, int, int]:
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in ("kill", "stall"):
        raise SystemExit(f"--fault {text!r}: expected kill|stall:RANK:EPOCH:STEP")
    try:
        return parts[0], int(parts[1]), int(parts[2]), int(parts[3])
    except ValueError:
        raise SystemExit(f"--fault {text!r}: RANK, EPOCH and STEP must be integers") from None


def model_config(args) -> dict:
    """Everything that must be equal on every rank and across restarts (besides the plan)."""
    return dict(strategy=args.strategy, batch_size=args.batch_size, seed=args.seed, lr=args.lr,
                target=args.target, hidden=args.hidden, interactions=args.interactions,
                gaussians=args.gaussians, cutoff=args.cutoff)


# ----------------------------------------------------------------------------- files
def atomic_torch_save(obj, path: Path) -> None:
    """Write ``path`` through a temporary file, fsync and rename: readers see old or new."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, record: dict) -> None:
    """One JSON line, written with a single write and flushed (survives a SIGKILL after it)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        fh.flush()


def fault_fires(out: Path, fault: tuple[str, int, int, int]) -> bool:
    """True exactly once per run folder (an exclusive marker file records that it fired)."""
    marker = out / "faults" / "{}-r{}-e{}-s{}".format(*fault)
    marker.parent.mkdir(exist_ok=True)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.fsync(fd)
    os.close(fd)
    return True


class Watchdog:
    """Exits the process (status `STALL_EXIT_CODE`) when `beat` was not called for
    ``seconds``; torchrun then restarts the whole group. ``seconds <= 0`` disables it."""

    def __init__(self, seconds: float, rank: int) -> None:
        self.seconds, self.rank = float(seconds), rank
        self.last = time.monotonic()
        if self.seconds > 0:
            threading.Thread(target=self._run, daemon=True, name="step-watchdog").start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def _run(self) -> None:
        while True:
            time.sleep(min(1.0, self.seconds / 4))
            idle = time.monotonic() - self.last
            if idle > self.seconds:
                print(f"rank {self.rank}: no training step finished for {idle:.1f} s "
                      f"(--step-timeout {self.seconds:g}); exiting so that torchrun restarts "
                      "the group from the last checkpoint", file=sys.stderr, flush=True)
                os._exit(STALL_EXIT_CODE)


# ----------------------------------------------------------------------------- data
def normalised_targets(store: GraphStore, target: str) -> torch.Tensor:
    """Per-graph target, float32 [G]: minus a per-atom reference (the mean of target/atoms),
    divided by the standard deviation of that residual. Same on every rank (from the store)."""
    col = [t[0] for t in QM9_TARGETS].index(target)
    y = np.asarray(store.graph_field("y"), dtype=np.float64)[:, col]
    atoms = store.graph_sizes().n_node.astype(np.float64)
    residual = y - (y / atoms).mean() * atoms
    return torch.from_numpy(((residual - residual.mean()) / max(residual.std(), 1e-12))
                            .astype(np.float32))


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if "RANK" not in os.environ:  # plain `python train_ddp.py`: a group of one process
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo",
                            timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps").mkdir(exist_ok=True)

    store = GraphStore(args.store)
    dataset = gt.GraphStoreDataset(store)
    targets = normalised_targets(store, args.target).to(device)
    loader = gt.loader(dataset, strategy=args.strategy, batch_size=args.batch_size,
                       seed=args.seed, num_replicas=world, rank=rank,
                       dataloader_kwargs={"num_workers": args.num_workers})

    torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    model = SchNet(hidden=args.hidden, filters=args.hidden, num_interactions=args.interactions,
                   num_gaussians=args.gaussians, cutoff=args.cutoff).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.lr)

    # ---- resume: every rank reads the same checkpoint (weights_only: nothing is unpickled)
    config = model_config(args)
    global_step, loader_state = 0, None
    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=True)
        if ckpt["config"] != config:
            diff = {k: (ckpt["config"].get(k), v) for k, v in config.items()
                    if ckpt["config"].get(k) != v}
            raise SystemExit(f"{ckpt_path} was written with other settings (saved, given): "
                             f"{diff}; use another --out")
        if len(ckpt["loader"]) != world:
            raise SystemExit(f"{ckpt_path} holds {len(ckpt['loader'])} ranks' loader states; "
                             f"this job has world size {world}")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        global_step, loader_state = int(ckpt["global_step"]), ckpt["loader"][rank]

    # ---- attempt number (rank 0 counts the starts recorded so far) shared with every rank
    attempt = torch.zeros(1, dtype=torch.int64, device=device)
    if rank == 0:
        attempts = out / "attempts.jsonl"
        lines = attempts.read_text().splitlines() if attempts.exists() else []
        n = sum(1 for line in lines if '"resume_step"' in line)
        append_line(attempts, dict(attempt=n, resume_step=global_step, world_size=world,
                                   graphbatch=graphbatch.__version__, time=time.time()))
        attempt[0] = n
    dist.broadcast(attempt, src=0)
    attempt = int(attempt.item())

    steps_log = out / "steps" / f"rank{rank}.jsonl"
    watchdog: Watchdog | None = None
    start_epoch = int(loader_state["epoch"]) if loader_state is not None else 0
    for epoch in range(start_epoch, args.epochs):
        if loader_state is not None and int(loader_state["epoch"]) == epoch:
            loader.load_state_dict(loader_state)  # continue mid-epoch where the checkpoint says
            loader_state = None
        else:
            loader.set_epoch(epoch)
        # all ranks: same store, plan arguments, graphbatch, settings and resume point
        gt.check_plan_consistency(loader, extra=dict(config=config, resume_step=global_step))
        if watchdog is None:
            watchdog = Watchdog(args.step_timeout, rank)
        watchdog.beat()
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            pred = ddp(**batch_inputs(batch))
            t = targets[batch.graph_index.clamp(min=0)]
            loss = gt.masked_mean((pred - t) ** 2, batch.graph_mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss)  # sum over ranks of total*W/count -> W * global mean
            global_step += 1
            step = int(loader.state_dict()["offset"])  # batches of this epoch consumed
            idx = batch.graph_index[batch.graph_mask].tolist()
            append_line(steps_log, dict(
                attempt=attempt, epoch=epoch, step=step, global_step=global_step, rank=rank,
                graphs=idx, shape=[int(batch.z.shape[0]), int(batch.edge_index.shape[1]),
                                   int(batch.num_graphs)],
                loss=float(global_loss.item()) / world))
            watchdog.beat()
            for fault in args.faults:
                if fault[1:] == (rank, epoch, step) and fault_fires(out, fault):
                    print(f"rank {rank}: injected fault {fault[0]} after epoch {epoch} step "
                          f"{step}", file=sys.stderr, flush=True)
                    if fault[0] == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    while True:  # stall
                        time.sleep(3600)
            last_of_epoch = step == len(loader.plan.rank_batches(rank))
            if global_step % args.checkpoint_every == 0 or last_of_epoch:
                states = [None] * world
                dist.all_gather_object(states, loader.state_dict())
                if rank == 0:
                    atomic_torch_save(dict(
                        model=model.state_dict(), optimizer=optimizer.state_dict(),
                        loader=states, global_step=global_step, epoch=epoch, attempt=attempt,
                        config=config), ckpt_path)
    if rank == 0:
        append_line(out / "attempts.jsonl", dict(attempt=attempt, finished=True,
                                                 global_step=global_step, time=time.time()))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
