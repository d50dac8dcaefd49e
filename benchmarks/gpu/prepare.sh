#!/usr/bin/env bash
# Prepare the device check HERE (a machine with the project's venv and PyPI), into ignored
# folders: .gpucheck/ (data: a trimmed, gzipped qm9pack -- run.sh builds the QM9 store from it
# on the device, and the JAX bench reads it -- and an EMT extxyz built into a store) and .whl/
# (the wheels the device lacks).
# Usage: bash benchmarks/gpu/prepare.sh [--tiny]   (PY=python to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-/work/main/.venv/bin/python}
export PYTHONPATH=$PWD/src
G=.gpucheck
QM9=20000; EMT=3000  # QM9: benchmarks/gpu/check.py's QM9_MOLECULES
if [[ "${1:-}" == "--tiny" ]]; then QM9=200; EMT=120; fi
EXC=$(git rev-parse --git-path info/exclude)
for d in /.gpucheck/ /.whl/; do grep -qx "$d" "$EXC" 2>/dev/null || echo "$d" >> "$EXC"; done
mkdir -p $G/site/qm9pack/data
# 1. the first $QM9 molecules of qm9pack's CSVs, as a package named qm9pack (224 MB in full),
#    the CSVs gzipped (run.sh unpacks them on the device and builds the store there: the store
#    of 20,000 molecules is 64 MB, over what the device tool carries)
$PY - "$G/site/qm9pack" "$QM9" <<'PY'
import sys
from pathlib import Path
from graphbatch.datasets._resources import package_data_path
dst, n = Path(sys.argv[1]), int(sys.argv[2])
src = package_data_path("qm9pack", "data")
(dst / "__init__.py").write_text('"""The first molecules of qm9pack, for the device check."""\n')
left = n
for part in sorted(src.glob("qm9_part*.csv")):
    with part.open() as fin, (dst / "data" / part.name).open("w") as fout:
        fout.write(fin.readline())
        for line in fin:
            if left <= 0:
                break
            fout.write(line)
            left -= 1
print(f"trimmed qm9pack: {n} molecules")
PY
gzip -9f $G/site/qm9pack/data/*.csv
# 2. the EMT store (cutoff 4 A); the QM9 store is built on the device (run.sh)
rm -rf $G/qm9.h5 $G/emt.h5
$PY -m benchmarks.gpu.make_emt $G/emt.extxyz --n "$EMT"
$PY -m graphbatch.cli data build extxyz $G/emt.extxyz --cutoff 4.0 --energy-key energy --forces-key forces --no-progress --out $G/emt.h5
rm -f $G/emt.extxyz
# 3. wheels the device image lacks (mace-torch and its imports, ase, vesin, jraph)
if [[ "${1:-}" != "--tiny" ]]; then
  rm -rf .whl; mkdir -p .whl
  PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
  for pkg in mace-torch==0.3.16 ase==3.29.0 vesin==0.6.2 jraph==0.0.6.dev0 configargparse \
             matscipy lmdb orjson prettytable wcwidth torch-ema; do  # hostlist, GitPython: optional
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp $PLAT -d .whl "$pkg"
  done
fi
du -sh $G .whl 2>/dev/null || true
TOTAL=$(du -sm $G .whl 2>/dev/null | awk '{s+=$1} END {print s}')
echo "total ${TOTAL} MiB (limit ~50)"
[[ "$TOTAL" -le 50 ]] || { echo "over 50 MiB: use fewer molecules/structures" >&2; exit 1; }
