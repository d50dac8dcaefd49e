#!/usr/bin/env bash
# The device check, on the device (one command; see benchmarks/gpu/README.md):
#   bash benchmarks/gpu/run.sh            results under $OUT (at most 8 files)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-.gpucheck/out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/install.log" 2>&1 || { tail "$OUT/install.log"; exit 1; }
fi
# the trimmed qm9pack (gzipped CSVs) unpacked, then the QM9 radius-6 A store built from it
SITE=/tmp/qm9site; mkdir -p $SITE/qm9pack/data
cp .gpucheck/site/qm9pack/__init__.py $SITE/qm9pack/
for f in .gpucheck/site/qm9pack/data/*.csv.gz; do gunzip -c "$f" > "$SITE/qm9pack/data/$(basename "$f" .gz)"; done
export PYTHONPATH=$PWD/src:$SITE:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with torch
DATA=/tmp/gpucheck-data; mkdir -p $DATA; ln -sf "$PWD/.gpucheck/emt.h5" $DATA/emt.h5
if [[ ! -f $DATA/qm9.h5 ]]; then  # built outside .gpucheck: 64 MB, not to be carried back
  python3 -m graphbatch.cli data build qm9 --no-progress --out $DATA/qm9.h5 >> "$OUT/install.log" 2>&1 \
    || { tail "$OUT/install.log"; exit 1; }
fi
timeout 470 python3 -m benchmarks.gpu.check --data $DATA --out "$OUT" "$@"
rc=$?
cat "$OUT/check.md" 2>/dev/null
exit $rc
