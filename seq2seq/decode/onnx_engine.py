"""The ONNX Runtime engine: seq2seq's own search (seq2seq.decode.dispatch) over the exported
graphs (``seq2seq export --format onnx``; seq2seq/export/onnx.py).

Its step function feeds the last token and the KV cache to an onnxruntime session and its
reorder function is a numpy ``take`` on the cached arrays. Scores, n-best, length penalty,
min/max length, n-gram blocking, the unk penalty and constrained decoding therefore behave
exactly as with the torch engine (a multi-token prefix step runs the decoder graph once per
token). It returns no attention, so no word alignments. Threads: ``torch.get_num_threads()``
intra-op threads (:func:`seq2seq.decode.exported.engine_threads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.dispatch import search_steps
from seq2seq.decode.exported import engine_threads, loaded_export
from seq2seq.decode.options import (
    LoadedEngine,
    SearchOptions,
    StepDecoder,
    reorder_state,
)
from seq2seq.decode.search_base import Hypothesis
from seq2seq.export import DECODER_FILE, ENCODER_FILE, read_export_info, require

__all__ = ["OnnxEngine", "OnnxState", "load_onnx"]


@dataclass
class OnnxState:
    """Decoding state of the ONNX engine: numpy arrays, one row per hypothesis.

    Attributes:
        src_pad: (N, S) bool, True at source padding.
        cross: per decoder layer K then V, each (N, H, S, Dh) float32.
        self_kv: per decoder layer K then V of the target positions so far, each (N, H, t', Dh).
        position: absolute position of the next target token.
    """

    src_pad: np.ndarray
    cross: list[np.ndarray]
    self_kv: list[np.ndarray]
    position: int = 0

    def reorder(self, index: Tensor) -> OnnxState:
        """Rows ``index`` (M,) of every array: beam expansion, reordering, dropping."""
        idx = index.cpu().numpy()
        return OnnxState(
            src_pad=self.src_pad.take(idx, axis=0),
            cross=[a.take(idx, axis=0) for a in self.cross],
            self_kv=[a.take(idx, axis=0) for a in self.self_kv],
            position=self.position,
        )


_ONNX_NO_ATTENTION = (
    "the onnx engine has no attention weights (its exported decoder step returns none): "
    "use --engine torch or ctranslate2 for alignments"
)


class OnnxEngine:
    """seq2seq's own search over the exported ONNX encoder and KV-cached decoder step.

    Args:
        export_dir: a folder written by ``seq2seq export --format onnx``.
        threads: onnxruntime intra-op threads (None: ``torch.get_num_threads()``).
        providers: onnxruntime execution providers (default: CPU).

    ``no_attention``: why it cannot give word alignments (read by seq2seq.serve.service to refuse an
    ``alignments`` request up front; an engine without the attribute gives attention).
    """

    no_attention = _ONNX_NO_ATTENTION

    def __init__(
        self,
        export_dir: str | Path,
        *,
        threads: int | None = None,
        providers: list[str] | None = None,
    ) -> None:
        ort = require("onnxruntime")
        self.export_dir = Path(export_dir)
        self.info = read_export_info(self.export_dir, engine="onnx")
        special = self.info["special_ids"]
        self.pad_id, self.unk_id = special["pad"], special["unk"]
        self.bos_id, self.eos_id = special["bos"], special["eos"]
        model = self.info["model"]
        self.max_positions = model["max_positions"]
        self.n_layers = model["n_decoder_layers"]
        self.n_heads, self.d_head = model["n_heads"], model["d_head"]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = engine_threads(threads)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        providers = providers or ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(
            str(self.export_dir / ENCODER_FILE), opts, providers=providers
        )
        self.decoder = ort.InferenceSession(
            str(self.export_dir / DECODER_FILE), opts, providers=providers
        )
        self._cross_names = [f"cross_{kv}_{i}" for i in range(self.n_layers) for kv in "kv"]
        self._self_names = [f"self_{kv}_{i}" for i in range(self.n_layers) for kv in "kv"]

    def start_state(self, src: list[list[int]]) -> OnnxState:
        """Run the encoder on padded ids: one state row per sentence."""
        width = max(len(s) for s in src)
        ids = np.full((len(src), width), self.pad_id, dtype=np.int64)  # (B, S)
        for i, s in enumerate(src):
            ids[i, : len(s)] = s
        src_pad, *cross = self.encoder.run(None, {"src_ids": ids})
        empty = np.zeros((len(src), self.n_heads, 0, self.d_head), dtype=np.float32)
        return OnnxState(src_pad=src_pad, cross=cross, self_kv=[empty] * (2 * self.n_layers))

    def step(self, prefix: Tensor, state: OnnxState) -> tuple[Tensor, OnnxState]:
        """Log-probs (N, V) of the token after ``prefix`` (N, t); feeds the new token(s)."""
        new = prefix[:, state.position :].cpu().numpy()  # (N, t_new), normally t_new = 1
        self_kv, position = state.self_kv, state.position
        log_probs = None
        for j in range(new.shape[1]):
            feed = {
                "tokens": np.ascontiguousarray(new[:, j : j + 1], dtype=np.int64),
                "position": np.array(position, dtype=np.int64),
                "src_pad": state.src_pad,
            }
            feed.update(zip(self._self_names, self_kv))
            feed.update(zip(self._cross_names, state.cross))
            log_probs, *self_kv = self.decoder.run(None, feed)
            position += 1
        if log_probs is None:
            raise ValueError("step() needs at least one new token in the prefix")
        new_state = OnnxState(
            src_pad=state.src_pad, cross=state.cross, self_kv=self_kv, position=position
        )
        return torch.from_numpy(log_probs), new_state

    def start(self, src: list[list[int]], *, attention: bool = False) -> StepDecoder:
        """Encode ``src``: the step function, reorder and state for the search.

        Raises:
            UserError: ``attention`` (the exported decoder step returns no attention).
        """
        if attention:
            raise UserError(_ONNX_NO_ATTENTION)
        return StepDecoder(
            step=self.step,
            reorder=reorder_state,
            state=self.start_state(src),
            attention=None,
            max_positions=self.max_positions,
        )

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`seq2seq.decode.options.Engine` (``attention`` is not supported)."""
        if attention:
            raise UserError(_ONNX_NO_ATTENTION)
        return search_steps(self, src, opts, constraints)


def load_onnx(model_dir: str | Path, *, device: str = "cpu") -> LoadedEngine:
    """``model_dir`` is an ONNX export folder (``seq2seq export --format onnx``)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise UserError("this onnxruntime has no CUDA support; use --device cpu")
    elif dev.type == "cpu":
        providers = ["CPUExecutionProvider"]
    else:
        raise UserError(f"the onnx engine runs on cpu or cuda, not {device!r}")
    engine = OnnxEngine(model_dir, providers=providers)
    return loaded_export(engine, Path(model_dir), engine.info)
