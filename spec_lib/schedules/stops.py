"""Multi-token stop sequences (seed 000, App. E.2 "SetDLM stop sequences").

A marker is recognised only once all of its tokens are accepted; the last output position E
becomes the marker's final position, and if several markers are recognised the one that ends
earliest wins.  The check is one vectorised comparison over the accepted output positions.
"""

from __future__ import annotations

import torch

from .state import Decoding


def check_stop_sequences(stop_sequences, max_new_tokens: int) -> list[torch.Tensor]:
    """Validate ``stop_sequences`` (a list of non-empty token-id lists, each at most
    ``max_new_tokens`` long); returns them as tensors."""
    if stop_sequences is None:
        return []
    if isinstance(stop_sequences, (str, bytes, torch.Tensor)) or not hasattr(stop_sequences, "__iter__"):
        raise ValueError(f"stop_sequences must be a list of token-id lists, got {type(stop_sequences).__name__}")
    out = []
    for seq in stop_sequences:
        if isinstance(seq, (str, bytes)) or not hasattr(seq, "__iter__"):
            raise ValueError(f"stop_sequences must be a list of token-id lists, got an element {seq!r}")
        ids = list(seq)
        if not ids:
            raise ValueError("stop_sequences must not contain an empty sequence")
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise ValueError(f"stop_sequences must hold non-negative int token ids, got {ids!r}")
        if len(ids) > max_new_tokens:
            raise ValueError(f"a stop sequence of {len(ids)} tokens can never fit in max_new_tokens="
                             f"{max_new_tokens}")
        out.append(torch.tensor(ids, dtype=torch.long))
    return out


def earliest_stop(output: torch.Tensor, stop_sequences: list[torch.Tensor]) -> int | None:
    """The final output position of the earliest-ending marker fully present in ``output``
    ``(L,)`` (``-1`` = unresolved), or None."""
    best = None
    for seq in stop_sequences:
        m = seq.numel()
        if m > output.numel():
            continue
        hits = (output.unfold(0, m, 1) == seq.to(output.device)).all(1).nonzero()
        if hits.numel():
            end = int(hits[0, 0]) + m - 1
            best = end if best is None else min(best, end)
    return best


class StopSequenceDecoding(Decoding):
    """A left-to-right :class:`~spec_lib.schedules.state.Decoding` that also stops at
    multi-token stop sequences: after each append, a marker that ends among the new tokens
    truncates the output at its final token (E = the marker's end; in left-to-right decoding
    every earlier position is already resolved) and stops."""

    def __init__(self, *args, stop_sequences: list[torch.Tensor], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.stops = [s.to(self.device) for s in stop_sequences]
        self.longest = max((s.numel() for s in self.stops), default=1)

    def _stop_at_marker(self, appended: int) -> int:
        first = max(self.prompt_len, self.length - appended - (self.longest - 1))
        end = earliest_stop(self.buffer[first: self.length], self.stops)
        if end is None:
            return appended
        removed = self.length - (first + end + 1)
        self.length -= removed
        self.accepted[-1] -= removed
        self.stopped = True
        return appended - removed

    def verify_and_append(self, *args, **kwargs):
        h, appended = super().verify_and_append(*args, **kwargs)
        return h, self._stop_at_marker(appended)

    def _append_one(self, logits):
        h, appended = super()._append_one(logits)
        return h, self._stop_at_marker(appended)
