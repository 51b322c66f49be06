"""Training data for speculator heads: target-written sequences and the target's hidden states.

For each sequence the frozen target gives, at every position t:
  - `aux` [N, T, n_aux * H]: the outputs of the decoder layers EAGLE-3 fuses, concatenated in the
    order of `aux_layer_ids`. vLLM's id i is the output of decoder layer i - 1 *with the residual
    added* (`EagleModelMixin._maybe_add_hidden_state`), which is exactly what a Hugging Face
    `LlamaDecoderLayer` returns; id 0 would be the embeddings.
  - `final` [N, T, H]: the final RMSNorm's output, the hidden state vLLM hands to Medusa (and to
    EAGLE-1) and the target's lm_head reads: target logits = lm_head(final).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from models.distill import continue_tokens
from models.stream import TokenStream


@dataclass(frozen=True, slots=True)
class HeadData:
    """Token ids int64 [N, T] with the target's features (float32) at every position."""

    ids: torch.Tensor  # [N, T]
    aux: torch.Tensor  # [N, T, n_aux * H]
    final: torch.Tensor  # [N, T, H]

    def rows(self, picks: torch.Tensor) -> HeadData:
        """The rows `picks` (int64 [B])."""
        return HeadData(self.ids[picks], self.aux[picks], self.final[picks])


def chat_turn_ids(tokenizer: PreTrainedTokenizerFast) -> tuple[list[int], list[int]]:
    """(prefix, suffix) token ids the chat template puts around one user message, generation prompt
    included: `<|bos|><|user|>\n` and `<|end|>\n<|assistant|>\n` for the lab's template."""
    marker = "\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}],
                                         add_generation_prompt=True, tokenize=False)
    before, after = text.split(marker)
    return (tokenizer(before, add_special_tokens=False).input_ids,
            tokenizer(after, add_special_tokens=False).input_ids)


def wrap_chat_turns(windows: torch.Tensor, chat_turn: tuple[list[int], list[int]]) -> torch.Tensor:
    """Each row of `windows` int64 [N, P], cut to fit, as one user turn of the chat template
    (`chat_turn` = (prefix, suffix) ids): int64 [N, P], the length unchanged.

    Raises:
        ValueError: P leaves no room for any window token inside the turn.
    """
    prefix, suffix = (torch.tensor(t, dtype=torch.int64) for t in chat_turn)
    body = windows.shape[1] - len(prefix) - len(suffix)
    if body < 1:
        raise ValueError(f"prompt_len: {windows.shape[1]} leaves no room inside the chat turn")
    n = windows.shape[0]
    return torch.cat([prefix.expand(n, -1), windows[:, :body], suffix.expand(n, -1)], dim=1)


def write_sequences(target: LlamaForCausalLM, stream: TokenStream, count: int, prompt_len: int,
                    new_tokens: int, temperatures: tuple[float, ...],
                    generator: torch.Generator, formats: tuple[str, ...] = ("raw",),
                    chat_turn: tuple[list[int], list[int]] = ([], [])) -> torch.Tensor:
    """`count` rows of a `prompt_len`-token prompt then `new_tokens` target tokens: int64 [count, T].

    Row i is written at temperatures[i % len(temperatures)] (0 = greedy); its prompt is a corpus
    window as is when formats[i % len(formats)] is "raw", or, when "chat", a shorter window wrapped
    as one user turn of the chat template (`wrap_chat_turns`), so the target answers as it does
    behind the chat API. Used for the draft's distillation set and the heads' training data.

    Raises:
        ValueError: a chat row's prompt_len leaves no room for the window.
    """
    prompts = stream.random_windows(count, prompt_len, generator)
    chat = torch.tensor([formats[i % len(formats)] == "chat" for i in range(count)])
    if chat.any():
        prompts[chat] = wrap_chat_turns(prompts[chat], chat_turn)
    out = torch.empty(count, prompt_len + new_tokens, dtype=torch.int64)
    n = len(temperatures)
    for i, temp in enumerate(temperatures):
        if prompts[i::n].shape[0]:
            out[i::n] = continue_tokens(target, prompts[i::n], new_tokens, temp, generator)
    return out


@torch.no_grad()
def target_features(target: LlamaForCausalLM, ids: torch.Tensor, aux_layer_ids: tuple[int, ...],
                    batch_size: int = 16) -> HeadData:
    """Runs the target over `ids` [N, T] and collects the aux layer outputs and final hidden states.

    Raises:
        ValueError: an aux layer id exceeds the target's number of layers.
    """
    layers = target.model.layers
    if max(aux_layer_ids) > len(layers):
        raise ValueError(f"aux_layer_ids: {aux_layer_ids} exceed the target's {len(layers)} layers")
    captured: dict[int, torch.Tensor] = {}
    hooks = [layers[i - 1].register_forward_hook(
        lambda _m, _a, out, i=i: captured.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i in aux_layer_ids]
    auxes, finals = [], []
    try:
        for rows in ids.split(batch_size):
            final = target.model(input_ids=rows).last_hidden_state  # post-norm [B, T, H]
            auxes.append(torch.cat([captured[i] for i in aux_layer_ids], dim=-1))
            finals.append(final)
    finally:
        for h in hooks:
            h.remove()
    return HeadData(ids, torch.cat(auxes), torch.cat(finals))


def target_logprobs(target: LlamaForCausalLM, final: torch.Tensor) -> torch.Tensor:
    """log p_target over the vocab from final hidden states [..., H]: [..., V] (no grad)."""
    with torch.no_grad():
        return torch.log_softmax(target.lm_head(final), dim=-1)
