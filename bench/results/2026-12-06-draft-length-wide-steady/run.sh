#!/bin/bash
cd /work/wt55
export SPECSERVE_MODELS_DIR=~/.cache/specserve/models
date -u
~/.cache/specserve/venv/bin/python -m bench.draft_length --target target-wide --batches 1 2 4 8 16 32 64 \
  --concurrency 1 3 6 12 24 48 64 --rounds 3 --repeats 1 --requests-per-slot 3 \
  --out bench/results/2026-12-06-draft-length-wide-steady
echo rc=$?
date -u
