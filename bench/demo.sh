#!/usr/bin/env bash
# The main job on the built-in reference accelerator; `make demo` runs it.
# Usage: bench/demo.sh OPMATRIX OUTDIR
set -euo pipefail
OPM=${1:-opmatrix}; OUT=${2:-out}
echo "== validate the example artifacts"
"$OPM" validate schema/examples/*.yaml
