"""A split of the corpus as one flat token stream, and the windows cut from it.

Each document is `BOS text EOS`; documents are concatenated in path order, so a window may span a
document boundary exactly as packed pre-training data does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerFast


class TokenStream:
    """Token ids of a split, `ids` int64 [num_tokens]."""

    def __init__(self, ids: torch.Tensor) -> None:
        self.ids = ids

    @classmethod
    def encode(cls, tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> TokenStream:
        """Encodes `texts` (BOS comes from the tokenizer's post-processor; EOS is appended)."""
        encodings = tokenizer.backend_tokenizer.encode_batch(list(texts))
        eos = tokenizer.eos_token_id
        ids = [i for enc in encodings for i in (*enc.ids, eos)]
        return cls(torch.tensor(ids, dtype=torch.int64))

    def __len__(self) -> int:
        return self.ids.numel()

    def random_windows(self, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """`batch_size` windows at uniform random offsets: int64 [batch_size, length].

        Raises:
            ValueError: the stream is shorter than `length`.
        """
        if len(self) < length:
            raise ValueError(f"length: stream has {len(self)} tokens, window needs {length}")
        starts = torch.randint(0, len(self) - length + 1, (batch_size,), generator=generator)
        return torch.stack([self.ids[s:s + length] for s in starts.tolist()])

    def spaced_windows(self, count: int, length: int) -> torch.Tensor:
        """`count` windows at evenly spaced offsets (deterministic): int64 [count, length].

        Windows overlap when the stream holds fewer than `count * length` tokens.

        Raises:
            ValueError: the stream is shorter than `length`.
        """
        if len(self) < length:
            raise ValueError(f"length: stream has {len(self)} tokens, window needs {length}")
        starts = torch.linspace(0, len(self) - length, count).long()
        return torch.stack([self.ids[s:s + length] for s in starts.tolist()])
