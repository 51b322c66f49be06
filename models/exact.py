"""Do sampled continuations follow the target's exact distribution? A test that needs no vLLM.

What "lossless" means for speculative decoding (Leviathan et al. 2023, §2.3; Chen et al. 2023):
the speculative path emits each token with exactly the probability the target alone gives it,
given the tokens before it, under the request's sampling settings. For each sampled continuation
`pit_values` computes, in torch from the lab's checkpoint, the target's exact conditional
distribution at every position and the randomized probability integral transform of the sampled
token (Brockwell 2007, "Universal residuals"; the discrete form of Rosenblatt 1952):

    U = P(tokens ranked before x) + V · P(x),   V ~ Uniform(0, 1), tokens ranked by probability

If the samples follow the target, the U of every position of every sample are independent
Uniform(0, 1) draws; `uniformity_test` is a chi-square test of that over equal bins. Ranking by
probability makes a distribution that is too sharp (too cold) pile U near 0 and a too flat one
near 1. Unlike a test over whole continuations (whose cells the tiny target spreads thin: at T=1
over 96% of its 3-token continuations each have probability < 0.5%), every sample counts fully.

    u = pit_values(model, prompt_ids, samples, temperature=0.7, top_p=0.9)
    result = uniformity_test(u)       # result.p_value: P(chi2 >= observed | samples follow it)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Next-token probabilities under vLLM's sampling transform.

    Args:
        logits: [..., vocab] target logits.
        temperature: > 0 (greedy has no distribution to test).
        top_p: nucleus mass in (0, 1]: vLLM's rule (`vllm/v1/sample/ops/topk_topp_sampler.py`,
            `apply_top_k_top_p_pytorch`): in ascending order of probability, a token goes when
            the cumulative probability up to and including it is <= 1 - top_p; the most likely
            token always stays; the rest is renormalised.

    Returns:
        [..., vocab] float64 probabilities.
    """
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1)
        drop = sorted_p.cumsum(dim=-1) <= 1 - top_p
        drop[..., -1] = False
        probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


@torch.no_grad()
def pit_values(model, prompt_ids: list[int], samples: list[tuple[int, ...]], temperature: float,
               top_p: float = 1.0, seed: int = 0, batch: int = 256) -> torch.Tensor:
    """Randomized PIT value of every sampled token (module docstring).

    Args:
        model: a causal LM returning `.logits` [batch, seq, vocab] (the lab's
            `LlamaForCausalLM`, float32, eval mode).
        prompt_ids: the prompt's token ids (bos included, as vLLM tokenizes it).
        samples: n continuations of equal length d (token ids).
        temperature, top_p: the requests' sampling settings (`sampling_probs`).
        seed: of the V draws, so a run is reproducible.

    Returns:
        [n * d] float64 values in [0, 1].
    """
    gen = torch.Generator().manual_seed(seed)
    depth = len(samples[0])
    start = len(prompt_ids) - 1  # logits at this position predict the first continuation token
    out = []
    for b in range(0, len(samples), batch):
        chunk = torch.tensor([list(s) for s in samples[b:b + batch]])  # [b, d]
        ids = torch.cat([torch.tensor(prompt_ids).expand(len(chunk), -1), chunk], dim=1)
        logits = model(input_ids=ids).logits[:, start:start + depth, :]  # [b, d, vocab]
        probs = sampling_probs(logits.float(), temperature, top_p)
        p_x = probs.gather(-1, chunk.unsqueeze(-1)).squeeze(-1)  # [b, d]
        before = (probs * (probs > p_x.unsqueeze(-1))).sum(-1)  # mass ranked strictly above x
        ties = (probs * (probs == p_x.unsqueeze(-1))).sum(-1)  # x and tokens of equal probability
        v = torch.rand(p_x.shape, generator=gen, dtype=torch.float64)
        out.append((before + v * ties).flatten())
    return torch.cat(out).clamp(0.0, 1.0)


@dataclass(frozen=True, slots=True)
class FitResult:
    """A chi-square test of uniformity.

    Attributes:
        chi2: Σ (O − E)² / E over the bins.
        dof: bins − 1.
        p_value: P(χ² ≥ chi2) for uniform values.
        n: values tested.
        mean: mean of the values (0.5 when uniform; below: the samples are too sharp).
        low_share: share in the lowest bin (1 / bins when uniform).
    """

    chi2: float
    dof: int
    p_value: float
    n: int
    mean: float
    low_share: float


def uniformity_test(u: torch.Tensor, bins: int = 20) -> FitResult:
    """Pearson's chi-square test that `u` is Uniform(0, 1), over `bins` equal bins; the p-value
    is the chi-square survival function `torch.special.gammaincc(dof / 2, chi2 / 2)`.

    Raises:
        ValueError: fewer than 5 values per bin (the chi-square approximation needs them).
    """
    n = u.numel()
    if n < 5 * bins:
        raise ValueError(f"u: {n} values, need at least {5 * bins} for {bins} bins")
    observed = torch.bincount((u * bins).long().clamp(max=bins - 1), minlength=bins).double()
    expected = n / bins
    chi2 = ((observed - expected) ** 2 / expected).sum().item()
    dof = bins - 1
    p_value = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(chi2 / 2, dtype=torch.float64)).item()
    return FitResult(chi2, dof, p_value, n, u.mean().item(), observed[0].item() / n)
