"""Spectral bigram initialisation: a fresh Llama that starts as a low-rank bigram model.

On 2 CPU cores the build sees only ~1 M training tokens, and a randomly initialised model spends
most of them climbing down to unigram and bigram statistics. Instead the embedding and lm_head are
set from the corpus's bigram table and the residual branches (attention `o_proj`, MLP `down_proj`)
start at zero, so at step 0 the network computes

    logits(x_t) = W_head · rmsnorm(E[x_t]) ≈ log P(x_{t+1} | x_t) + const(x_t)

(measured: held-out loss 5.3 nats/token at init instead of ln V = 8.3, and 4.7 instead of 6.2 after
100 steps of batch 8 x 256 for the default target). Gradients still reach the zeroed matrices
through their inputs, so every layer trains normally.

Construction, with L [V, V] the row-centred smoothed log P(y | x) and f [V] context frequencies:
the top-H right singular vectors Q [V, H] of diag(sqrt f)·L give embeddings E = rownorm(L·Q) (unit
RMS, as the final RMSNorm sees them); W_head is the f-weighted least-squares readout E -> L.
"""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM


def bigram_log_probs(ids: torch.Tensor, vocab_size: int,
                     smoothing: float = 20.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-centred smoothed bigram log-probabilities and context frequencies.

    P(y | x) = (c(x, y) + k·P_unigram(y)) / (c(x) + k), k = `smoothing` (a Dirichlet prior toward
    the unigram, which carries rare contexts).

    Args:
        ids: int64 token stream [N].
        vocab_size: V.
        smoothing: k, in pseudo-counts.

    Returns:
        (L float32 [V, V] = log P(y | x) minus its row mean, f float32 [V] context frequencies
        summing to 1).
    """
    v = vocab_size
    counts = torch.bincount(ids[:-1] * v + ids[1:], minlength=v * v).view(v, v).float()
    unigram = torch.bincount(ids, minlength=v).float() + 0.5
    unigram /= unigram.sum()
    rows = counts.sum(dim=1, keepdim=True)
    log_p = torch.log((counts + smoothing * unigram) / (rows + smoothing))
    freq = (rows.squeeze(1) + 1) / (rows.sum() + v)
    return log_p - log_p.mean(dim=1, keepdim=True), freq


@torch.no_grad()
def init_from_bigram(model: LlamaForCausalLM, ids: torch.Tensor, seed: int,
                     smoothing: float = 20.0, embedding_rms: float = 0.5) -> None:
    """Sets `model`'s embedding and lm_head from the bigram table of `ids`; zeroes residual branches.

    Args:
        model: freshly initialised, untied embeddings (`tie_word_embeddings=False`).
        ids: int64 training token stream [N] (train split only).
        seed: seeds the randomised SVD (`torch.svd_lowrank`), so the result is reproducible.
        smoothing: bigram prior strength k, in pseudo-counts.
        embedding_rms: RMS of each embedding row (RMSNorm makes the readout scale-free).

    Raises:
        ValueError: the model ties its embeddings.
    """
    if model.config.tie_word_embeddings:
        raise ValueError("model: bigram init needs untied embeddings (tie_word_embeddings=False)")
    h = model.config.hidden_size
    log_p, freq = bigram_log_probs(ids, model.config.vocab_size, smoothing)  # [V, V], [V]
    torch.manual_seed(seed)
    _, _, q = torch.svd_lowrank(log_p * freq.sqrt()[:, None], q=h, niter=4)  # q: [V, H]
    emb = log_p @ q  # [V, H]
    emb /= emb.pow(2).mean(dim=1, keepdim=True).sqrt().clamp(min=1e-6)
    gram = emb.T @ (emb * freq[:, None])  # [H, H]
    cross = emb.T @ (log_p * freq[:, None])  # [H, V]
    head = torch.linalg.solve(gram + 1e-4 * torch.eye(h), cross).T  # [V, H]
    model.model.embed_tokens.weight.copy_(emb * embedding_rms)
    model.lm_head.weight.copy_(head)
    for name, param in model.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            param.zero_()
