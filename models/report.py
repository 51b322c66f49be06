"""The human-readable summary of a build's report.json."""

from __future__ import annotations


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f} M"


def summary(report: dict) -> str:
    """Multi-line text summary of a report dict as written by `models.lab.run_lab`."""
    c, m, a, w = report["corpus"], report["models"], report["agreement"], report["wall_s"]
    lines = [
        f"corpus: {c['files']} files, {c['bytes'] / 1e6:.1f} MB of Python {c['python_version']} "
        f"stdlib ({c['heldout_files']} held out); {report['tokenizer']['train_tokens']:,} train tokens, "
        f"vocab {report['tokenizer']['vocab_size']}",
    ]
    for name in ("target", "draft"):
        r = m[name]
        lines.append(
            f"{name}: {_millions(r['params']['total'])} params ({_millions(r['params']['body'])} body), "
            f"{r['flops_per_token'] / 1e6:.2f} MFLOP/token, {r['train']['steps']} steps in "
            f"{r['train']['wall_s']:.0f} s ({r['train']['tokens_per_s']:.0f} tok/s), "
            f"held-out loss {r['heldout_loss_nats']:.3f} nats/token")
    lines += [
        f"draft/target FLOPs per token: {report['flops_ratio_draft_to_target']:.3f}",
        f"greedy agreement alpha: {a['alpha']:.3f} over {a['positions']} positions; "
        f"alpha by position (k={a['k']}): {', '.join(f'{x:.2f}' for x in a['alpha_by_pos'])}; "
        f"replayed mean acceptance length {a['mean_acceptance_length']:.2f}",
        f"wall: {w['total_s']:.0f} s (tokenizer {w['tokenizer_s']:.0f}, target {w['target_train_s']:.0f}, "
        f"distill set {w['distill_set_s']:.0f}, draft {w['draft_train_s']:.0f}, "
        f"evaluation {w['evaluation_s']:.0f})",
        f"target sample: {report['samples']['prompt']}{report['samples']['target']!r}",
        f"draft sample:  {report['samples']['prompt']}{report['samples']['draft']!r}",
    ]
    return "\n".join(lines)
