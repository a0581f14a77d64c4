"""The number of processes of a run: the DDP world size, 1 when not distributed."""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["world_size"]


def world_size() -> int:
    """The processes of the DDP run this one belongs to (1 outside one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
