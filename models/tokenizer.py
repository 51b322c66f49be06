"""Byte-level BPE tokenizer shared by the target and the draft.

Trained with the `tokenizers` library (GPT-2 style byte-level pre-tokenizer, so any text round-trips
and runs of spaces, i.e. Python indentation, become single tokens) and wrapped as a
`transformers.PreTrainedTokenizerFast`. Encoding prepends `BOS` (a template post-processor), so
vLLM's completion prompts look like the start of a training document.

Chat template (`add_generation_prompt` appends the assistant header)::

    <|bos|><|system|>
    You are terse.<|end|>
    <|user|>
    Write fib.<|end|>
    <|assistant|>
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
END_OF_TURN = "<|end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS, END_OF_TURN)

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('chat role must be system, user or assistant, got ' + message['role']) -}}"
    "{%- endif -%}"
    "{{- '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096,
                    model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Trains a byte-level BPE on `texts` and wraps it with special tokens and the chat template.

    Args:
        texts: training documents (train split only, so held-out loss stays honest).
        vocab_size: total vocabulary including the 256 byte symbols and `SPECIAL_TOKENS`.
        model_max_length: context length recorded in tokenizer_config.json, in tokens.

    Returns:
        Tokenizer with ids 0, 1, 2 = PAD, BOS, EOS; `len(tokenizer) == vocab_size` unless the corpus
        is too small to learn that many merges.

    Raises:
        ValueError: `vocab_size` leaves no room for merges.
    """
    if vocab_size <= 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size: must exceed {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B:1",
                                      special_tokens=[(BOS, bos_id)]),
    ])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        extra_special_tokens=[*ROLE_TOKENS, END_OF_TURN], chat_template=CHAT_TEMPLATE,
        model_max_length=model_max_length, clean_up_tokenization_spaces=False, padding_side="left")
