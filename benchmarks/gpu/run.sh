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
export PYTHONPATH=$PWD/src:$PWD/.gpucheck/site:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX shares the GPU with torch
timeout 470 python3 -m benchmarks.gpu.check --data .gpucheck --out "$OUT" "$@"
rc=$?
cat "$OUT/check.md" 2>/dev/null
exit $rc
