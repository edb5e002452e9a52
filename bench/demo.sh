#!/usr/bin/env bash
# The main job on the built-in reference accelerator; `make demo` runs it:
# probe both refaccel generations -> matrices -> coverage -> gate -> diff -> HTML site.
# Usage: bench/demo.sh OPMATRIX OUTDIR
set -euo pipefail
OPM=${1:-opmatrix}; OUT=${2:-out}
PY=$(dirname "$OPM")/python
# elementwise, reductions, the matmul family, softmax, sort/topk, indexing, decomposed ops
OPS=add,mul,sub,div,exp,where,sum,mean,amax,mm,bmm,addmm,nn.functional.linear,softmax,sort,topk,index_select,cumsum,addcmul,lerp
DTYPES=float32,bfloat16,float16,float64,complex64,int64,int32,bool
SECONDS=0
echo "== validate the example artifacts"
"$OPM" validate schema/examples/*.yaml
for gen in g1 g2; do
  echo "== probe refaccel $gen ($OPS x $DTYPES)"
  "$OPM" probe --backend refaccel --generation "$gen" --ops "$OPS" --dtypes "$DTYPES" --out "$OUT/refaccel-$gen" --quiet
done
echo "== coverage of refaccel g2 (cells per path and dtype)"
"$PY" -c "import sys; from opmatrix.schema import load_matrix; from opmatrix.matrix.frame import coverage_text; print(coverage_text(load_matrix(sys.argv[1])))" "$OUT/refaccel-g2/matrix.yaml"
echo "== what changed from g1 to g2"
"$OPM" diff "$OUT/refaccel-g1/matrix.yaml" "$OUT/refaccel-g2/matrix.yaml" | head -n 40
for gen in g2 g1; do
  echo "== release gate, refaccel $gen"
  set +e
  "$OPM" gate --matrix "$OUT/refaccel-$gen/matrix.yaml" --contract "ci/contracts/refaccel-$gen.yaml" \
    --junit "$OUT/refaccel-$gen/junit.xml" --summary "$OUT/refaccel-$gen/gate.md" --json "$OUT/refaccel-$gen/gate.json" | head -n 25
  rc=${PIPESTATUS[0]}
  set -e
  case $rc in 0) verdict="PASS";; 1) verdict="BLOCKED";; *) echo "gate failed with exit $rc"; exit "$rc";; esac
  echo "-> refaccel $gen: $verdict (exit $rc)"
done
echo "== HTML support site"
"$OPM" report "$OUT/refaccel-g2/matrix.yaml" --baseline "$OUT/refaccel-g1/matrix.yaml" \
  --gate "$OUT/refaccel-g2/gate.json" --out "$OUT/site"
echo
echo "Outputs ($SECONDS s):"
for gen in g1 g2; do echo "  matrix   $OUT/refaccel-$gen/matrix.yaml  (journal: $OUT/refaccel-$gen/journal.jsonl)"; done
echo "  gate     $OUT/refaccel-g2/gate.md, $OUT/refaccel-g1/gate.md"
echo "  site     $(cd "$OUT/site" && pwd)/index.html"
