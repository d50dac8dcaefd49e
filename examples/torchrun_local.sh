#!/bin/bash
# Start NODES torchrun agents of NPROC workers each on this machine (standing in for NODES nodes,
# c10d rendezvous on a free local port) running examples/train_ddp.py; print the exit statuses
# and the wall time. Usage (from the repository root):
#   examples/torchrun_local.sh NODES NPROC OUT_DIR [train_ddp.py arguments ...]
#   examples/torchrun_local.sh 2 2 run-2x2 --store qm9.h5 --epochs 3
# Agent logs: OUT_DIR.agentN.log. See docs/distributed.md.
set -u
if [ $# -lt 3 ]; then echo "usage: $0 NODES NPROC OUT_DIR [train_ddp.py args...]" >&2; exit 2; fi
NODES=$1; NPROC=$2; OUT=$3; shift 3
PYTHON=${PYTHON:-python}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=$("$PYTHON" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
start=$(date +%s.%N)
pids=()
for n in $(seq 1 "$NODES"); do
  timeout "${TIMEOUT:-3600}" "$PYTHON" -m torch.distributed.run --nnodes "$NODES" \
    --nproc-per-node "$NPROC" --rdzv-backend c10d --rdzv-endpoint "localhost:$PORT" \
    --rdzv-id "$(basename "$OUT")" --max-restarts "${MAX_RESTARTS:-3}" \
    "$HERE/train_ddp.py" --out "$OUT" "$@" > "$OUT.agent$n.log" 2>&1 &
  pids+=($!)
done
rcs=""
for p in "${pids[@]}"; do wait "$p"; rcs="$rcs $?"; done
end=$(date +%s.%N)
echo "$OUT: $NODES node(s) x $NPROC process(es), agent exit status:$rcs, wall $(echo "$end - $start" | bc) s"
