"""Decode tok/s by batch and context length, vanilla vs speculative (offline, one core).
python ctx.py MODEL [--spec draft:DIR] --batches 1 4 16 --contexts 40 850 --tokens 64
decode time = t(1 + N tokens) - t(1 token) on fresh prompts (unique tag, no prefix-cache reuse)."""
import argparse, json, time, inspect, itertools, textwrap
ap = argparse.ArgumentParser()
ap.add_argument("model"); ap.add_argument("--spec", default="none")
ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
ap.add_argument("--contexts", type=int, nargs="+", default=[40, 850])
ap.add_argument("--tokens", type=int, default=64)
def main():
    a = ap.parse_args()
    from vllm import LLM, SamplingParams
    import json as _j, argparse as _a, inspect as _i
    src = inspect.getsource(_a)  # text to fill long prompts
    kw = dict(model=a.model, dtype="float32", max_model_len=1024, seed=0, max_num_seqs=128, enable_prefix_caching=False, gpu_memory_utilization=0.3)
    if a.spec.startswith("draft:"):
        kw["speculative_config"] = {"method": "draft_model", "model": a.spec[6:], "num_speculative_tokens": 4}
    llm = LLM(**kw)
    tok = llm.get_tokenizer()
    ids = tok(src)["input_ids"]
    tags = itertools.count()
    def prompts(b, ctx):
        out = []
        for _ in range(b):
            t = next(tags); start = (t * 97) % (len(ids) - ctx - 10)
            body = tok.decode(ids[start:start + ctx - 8])
            out.append(f"# {t}\n" + body)
        return out
    def run(b, ctx, n):
        ps = prompts(b, ctx)
        t0 = time.perf_counter(); outs = llm.generate(ps, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), use_tqdm=False)
        return time.perf_counter() - t0, sum(len(o.prompt_token_ids) for o in outs) / b
    run(2, 40, 16)
    res = {}
    for ctx in a.contexts:
        for b in a.batches:
            ds = []
            for rep in range(2):
                t1, L = run(b, ctx, 1); tn, _ = run(b, ctx, 1 + a.tokens)
                ds.append(b * a.tokens / (tn - t1))
            res[f"{ctx}/{b}"] = round(max(ds), 1)
            print(f"{a.spec} ctx {ctx} (prompt {L:.0f}) batch {b}: decode {ds} tok/s", flush=True)
    print("RESULT", json.dumps({"spec": a.spec, "decode_tok_s": res}))

if __name__ == "__main__":
    main()
