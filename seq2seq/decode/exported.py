"""What the engines over exported folders (ONNX Runtime, CTranslate2) share: their CPU thread
budget and loading the folder's tokenizer and config.
"""

from __future__ import annotations

from pathlib import Path

import torch

from seq2seq.decode.options import LoadedEngine

__all__ = ["engine_threads", "loaded_export"]


def engine_threads(threads: int | None) -> int:
    """``threads``, or torch's thread count: every engine runs with the torch engine's CPU
    budget (set it with ``torch.set_num_threads``)."""
    return torch.get_num_threads() if threads is None else threads


def loaded_export(engine, export_dir: Path, info: dict) -> LoadedEngine:
    """An export folder's engine with the folder's SentencePiece model(s) and config.yaml."""
    from seq2seq.config import load_config
    from seq2seq.data import Tokenizer

    return LoadedEngine(
        engine=engine,
        tokenizer=Tokenizer.load(export_dir),
        cfg=load_config(export_dir / "config.yaml"),
        max_src_positions=info["model"]["max_positions"],
    )
