from pathlib import Path
from bench.draft_length import prompts, run
from core import models_dir
from models.speculators_report import token_prompts
if __name__ == "__main__":
    m = models_dir(); target = str(m / "target-wide")
    test = token_prompts(m / "target-wide", prompts("test", 8))
    for dtype in ("float32",):
        outs = {}
        for name, folder in (("vanilla", None), ("fp32", "draft"), ("int8", "draft-int8")):
            spec = folder and {"method": "draft_model", "model": str(m / folder), "num_speculative_tokens": 4}
            outs[name] = run(target, spec, test, [1, 16], 32, 1, 1, dtype)["outputs"]
        for b in (1, 16):
            v = outs["vanilla"][b]
            for n in ("fp32", "int8"):
                diff = sum(a != c for a, c in zip(v, outs[n][b]))
                print(f"RESULT {dtype} B={b} {n}: {diff} of {len(v)} outputs differ from vanilla; fp32 vs int8 differ {sum(a != c for a, c in zip(outs['fp32'][b], outs['int8'][b]))}", flush=True)
    