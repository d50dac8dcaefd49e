#!/usr/bin/env bash
# The package as users install it: build the sdist and the wheel (`python -m build`), check the
# wheel holds every file of src/graphbatch and the licence, install the wheel (not editable) into
# a fresh virtual environment, and run `graphbatch demo` and .ci/wheel_smoke.py from it.
# Usage: .ci/wheel_smoke.sh [PYTHON]   (PYTHON: an interpreter with `build`; default .venv's)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${1:-.venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PIP=(--quiet --disable-pip-version-check)

echo "== build the sdist and the wheel"
"$PY" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
if grep -i -E "deprecat|BuildBackendWarning|SetuptoolsWarning" "$WORK/build.log"; then
  echo "wheel_smoke: the build printed the warnings above" >&2
  exit 1
fi
WHEEL=$(ls "$WORK"/dist/graphbatch-*.whl)
SDIST=$(ls "$WORK"/dist/graphbatch-*.tar.gz)
echo "built $(basename "$WHEEL") and $(basename "$SDIST")"

echo "== the wheel holds every file of src/graphbatch, py.typed and the licence"
git ls-files src/graphbatch > "$WORK/tracked.txt"
"$PY" - "$WHEEL" "$SDIST" "$WORK/tracked.txt" <<'PYEOF'
import sys, tarfile, zipfile
wheel, sdist, tracked = sys.argv[1:]
names = set(zipfile.ZipFile(wheel).namelist())
want = {line.strip()[len("src/"):] for line in open(tracked) if line.strip()}
want |= {"graphbatch/py.typed"}
missing = sorted(want - names)
if missing:
    sys.exit(f"wheel_smoke: the wheel lacks {len(missing)} files: {missing[:10]}")
licences = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
meta = [n for n in names if n.endswith(".dist-info/METADATA")]
text = zipfile.ZipFile(wheel).read(meta[0]).decode()
if not licences or "License-Expression: Apache-2.0" not in text:
    sys.exit("wheel_smoke: the wheel lacks its LICENSE file or License-Expression: Apache-2.0")
with tarfile.open(sdist) as tar:
    members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
lost = sorted(n for n in ("LICENSE", "README.md", "pyproject.toml") if n not in members)
if lost:
    sys.exit(f"wheel_smoke: the sdist lacks {lost}")
print(f"wheel: {len(want)} package files present; licence and metadata present")
PYEOF

echo "== a fresh virtual environment with the wheel (not editable)"
python3 -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install "${PIP[@]}" --upgrade pip
"$VPY" -m pip install "${PIP[@]}" torch==2.13.0          # the CPU pin, first (see Makefile)
"$VPY" -m pip install "${PIP[@]}" "$WHEEL[pyg,bench]" 2>&1 | tee "$WORK/install.log"
"$VPY" -m pip freeze | grep -q '^torch==2.13.0' || {   # the extras state ranges: pin kept
  echo "wheel_smoke: installing the wheel replaced torch==2.13.0" >&2; exit 1; }
if grep -i -E "deprecat" "$WORK/install.log"; then
  echo "wheel_smoke: installing the wheel printed the warnings above" >&2
  exit 1
fi

cd "$WORK"   # away from the checkout: nothing may come from src/
echo "== graphbatch demo (from the wheel)"
"$WORK/venv/bin/graphbatch" demo --out "$WORK/report.html" | tee "$WORK/demo.log"
grep -q "shipped with graphbatch" "$WORK/demo.log" || {
  echo "wheel_smoke: the demo did not use the size table shipped in the wheel" >&2; exit 1; }
test -s "$WORK/report.html"
echo "== import, plan, collate (from the wheel)"
"$VPY" "$REPO/.ci/wheel_smoke.py"
echo "wheel smoke test passed"
