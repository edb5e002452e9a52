#!/usr/bin/env bash
# The main job on the built-in reference accelerator; `make demo` runs it:
# probe both refaccel generations -> matrices -> key findings -> gate -> diff -> HTML site.
# Only what the story needs: the operators and dtypes the release contracts name (ci/contracts/).
# Nothing is cut silently: long listings go to files, and the screen says where and how long.
# Each probe shows its progress and ETA (a bar on a terminal, a line every 10 s in a log): never silent.
# Usage: bench/demo.sh OPMATRIX OUTDIR   (DEMO_OPS / DEMO_DTYPES override the lists for a quick smoke run)
set -euo pipefail
OPM=${1:-opmatrix}; OUT=${2:-out}
PY=$(dirname "$OPM")/python
# the contracts' operators: elementwise, reductions, the matmul family, softmax, sort/topk
# (host fallback) and addcmul (compile-only: decomposed)
OPS=${DEMO_OPS:-add,mul,sum,mm,bmm,addmm,nn.functional.linear,softmax,sort,topk,addcmul}
DTYPES=${DEMO_DTYPES:-float32,bfloat16,float16,int32,int64}
SECONDS=0
mkdir -p "$OUT"
echo "== validate the example artifacts"
"$OPM" validate schema/examples/*.yaml
# the workload catalog (levels 3/4) too, unless DEMO_WORKLOADS=none
WORKLOADS=${DEMO_WORKLOADS:-all}
SUITES=runtime,ops$([ "$WORKLOADS" = none ] || echo ,workloads)
for gen in g1 g2; do
  echo "== probe refaccel $gen ($OPS x $DTYPES; workloads: $WORKLOADS)"
  "$OPM" probe --backend refaccel --generation "$gen" --ops "$OPS" --dtypes "$DTYPES" --suites "$SUITES" \
    $([ "$WORKLOADS" = none ] || echo --workloads "$WORKLOADS") --out "$OUT/refaccel-$gen"
done
echo
echo "== KEY FINDINGS (from the matrices)"
"$PY" bench/findings.py "$OUT/refaccel-g1/matrix.yaml" "$OUT/refaccel-g2/matrix.yaml"
for gen in g1 g2; do
  echo
  echo "== release gate, refaccel $gen (complete output; also in $OUT/refaccel-$gen/gate.md)"
  set +e
  "$OPM" gate --matrix "$OUT/refaccel-$gen/matrix.yaml" --contract "ci/contracts/refaccel-$gen.yaml" \
    --junit "$OUT/refaccel-$gen/junit.xml" --summary "$OUT/refaccel-$gen/gate.md" --json "$OUT/refaccel-$gen/gate.json"
  rc=$?
  set -e
  case $rc in 0) verdict="PASS";; 1) verdict="BLOCKED";; *) echo "gate failed with exit $rc"; exit "$rc";; esac
  echo "-> refaccel $gen: $verdict (exit $rc)"
done
if [ "$WORKLOADS" != none ]; then
  for gen in g1 g2; do
    echo
    echo "== workloads gate (levels 3/4), refaccel $gen: blocking lines (complete list in $OUT/refaccel-$gen/gate-workloads.md)"
    set +e
    "$OPM" gate --matrix "$OUT/refaccel-$gen/matrix.yaml" --contract "ci/contracts/workloads-refaccel-$gen.yaml" \
      --summary "$OUT/refaccel-$gen/gate-workloads.md" > "$OUT/refaccel-$gen/gate-workloads.txt"
    rc=$?
    set -e
    grep -E "^(opmatrix gate|  (fail|unknown) +L[34])" "$OUT/refaccel-$gen/gate-workloads.txt" || true
    case $rc in 0) verdict="PASS";; 1) verdict="BLOCKED";; *) echo "gate failed with exit $rc"; exit "$rc";; esac
    echo "-> refaccel $gen workloads: $verdict (exit $rc)"
  done
fi
echo
echo "== coverage of refaccel g2 (cells per path and dtype)"
"$PY" -c "import sys; from opmatrix.schema import load_matrix; from opmatrix.matrix.frame import coverage_text; print(coverage_text(load_matrix(sys.argv[1])))" "$OUT/refaccel-g2/matrix.yaml"
echo
echo "== what changed from g1 to g2"
"$OPM" diff "$OUT/refaccel-g1/matrix.yaml" "$OUT/refaccel-g2/matrix.yaml" > "$OUT/diff-g1-g2.txt"
rows=$(wc -l < "$OUT/diff-g1-g2.txt")
if [ "$rows" -le 60 ]; then cat "$OUT/diff-g1-g2.txt"; else
  sed -n 1,40p "$OUT/diff-g1-g2.txt"
  echo "... $((rows - 40)) more lines of $rows: the whole diff is in $OUT/diff-g1-g2.txt (and on the site's diff page)"
fi
echo
echo "== HTML support site"
"$OPM" report "$OUT/refaccel-g2/matrix.yaml" --baseline "$OUT/refaccel-g1/matrix.yaml" \
  --gate "$OUT/refaccel-g2/gate.json" --out "$OUT/site"
echo
echo "Outputs (demo took $((SECONDS / 60)) min $((SECONDS % 60)) s):"
for gen in g1 g2; do echo "  matrix   $OUT/refaccel-$gen/matrix.yaml  (journal: $OUT/refaccel-$gen/journal.jsonl)"; done
echo "  gate     $OUT/refaccel-g1/gate.md, $OUT/refaccel-g2/gate.md"
echo "  diff     $OUT/diff-g1-g2.txt"
echo "  site     $(cd "$OUT/site" && pwd)/index.html"
echo "The README's CLI tour writes into $OUT/tour/ and never overwrites these."
