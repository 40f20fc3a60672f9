"""A byte-exact fingerprint of a tensor, for comparing an engine's weights after a sync with a fresh engine's."""

from __future__ import annotations

import torch


def fingerprint(t: torch.Tensor) -> str:
    """The bytes as int32 words times a fixed odd sequence, summed in int64."""
    b = t.detach().contiguous().view(torch.uint8).flatten()
    pad = (-b.numel()) % 4
    if pad:
        b = torch.cat([b, b.new_zeros(pad)])
    w = b.view(torch.int32).to(torch.int64)
    idx = torch.arange(w.numel(), device=w.device, dtype=torch.int64)
    mult = (idx * 2654435761 + 97) % 2147483629 * 2 + 1
    s1 = int((w * mult).sum().item())
    s2 = int((w * (idx % 65521 + 1)).sum().item())
    return f"{t.dtype}:{tuple(t.shape)}:{s1 & (2**64 - 1):016x}{s2 & (2**64 - 1):016x}"
