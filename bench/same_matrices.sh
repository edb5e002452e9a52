#!/usr/bin/env bash
# Behaviour unchanged? Probe the demo's refaccel matrices (both generations) with this checkout and
# with REV (default: the merge base with main), then `opmatrix diff` them: exit 1 when any cell got
# worse or better, appeared or vanished. Numerics-only changes are printed, not failed.
# Usage: bench/same_matrices.sh [REV]        (from the project root, after `make setup`)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
REV=${1:-$(git -C "$ROOT" merge-base HEAD main)}
OPS=${DEMO_OPS:-add,mul,sum,mm,bmm,addmm,nn.functional.linear,softmax,sort,topk,addcmul}
DTYPES=${DEMO_DTYPES:-float32,bfloat16,float16,int32,int64}
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/rev" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
git -C "$ROOT" worktree add -q --detach "$WORK/rev" "$REV"
# REV's code on this checkout's installed packages: a venv that sees .venv's site-packages
python3 -m venv "$WORK/venv"
"$ROOT/.venv/bin/python" -c "import site; print(site.getsitepackages()[0])" > "$WORK/venv/lib/$(ls "$WORK/venv/lib")/site-packages/base.pth"
(cd "$WORK/rev" && "$WORK/venv/bin/pip" install -q --no-deps -e . >/dev/null)
status=0
for gen in g1 g2; do
  for side in rev head; do
    if [ $side = rev ]; then dir=$WORK/rev; opm=$WORK/venv/bin/opmatrix; else dir=$ROOT; opm=$ROOT/.venv/bin/opmatrix; fi
    (cd "$dir" && OPMATRIX_CACHE_DIR="$WORK/cache-$side" "$opm" probe --backend refaccel --generation "$gen" \
      --ops "$OPS" --dtypes "$DTYPES" --out "$WORK/$side-$gen" --quiet >"$WORK/$side-$gen.log" 2>&1) || {
      echo "probe of refaccel $gen at $side failed: $(tail -n 1 "$WORK/$side-$gen.log")"; exit 2; }
  done
  echo "== refaccel $gen: $REV -> this checkout"
  out=$("$ROOT/.venv/bin/opmatrix" diff "$WORK/rev-$gen/matrix.yaml" "$WORK/head-$gen/matrix.yaml")
  printf '%s\n' "$out" | head -n 20
  printf '%s\n' "$out" | grep -q "^cells: 0 worse, 0 better, 0 new, 0 removed" || status=1
done
exit $status
