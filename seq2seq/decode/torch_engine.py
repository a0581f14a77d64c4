"""The default engine: seq2seq's own search (seq2seq.decode.dispatch) over a
:class:`~seq2seq.model.transformer.Seq2SeqTransformer` in PyTorch, with its KV-cached
``decode_step``; float32, bfloat16 or int8 (dynamically quantized linear layers).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import Tensor

from seq2seq.core import UserError
from seq2seq.decode.constraints import Constraints
from seq2seq.decode.dispatch import search_steps
from seq2seq.decode.options import LoadedEngine, SearchOptions, StepDecoder
from seq2seq.decode.search_base import Hypothesis

__all__ = ["TORCH_PRECISIONS", "TorchEngine", "load_torch"]


TORCH_PRECISIONS = ("float32", "bfloat16", "int8")
"""What :class:`TorchEngine` can run the model in."""


class TorchEngine:
    """seq2seq's own search over a :class:`~seq2seq.model.transformer.Seq2SeqTransformer` in
    PyTorch.

    ``use_cache=False`` decodes with ``decode_step_uncached`` (recomputes the prefix every
    step): the benchmark baseline and the reference the KV cache is tested against.

    ``precision``: ``float32`` (the trained weights as they are); ``bfloat16`` (every weight
    and activation in bfloat16, log-probs and beam scores still float32; fast only on CPUs
    with native bfloat16 matrix multiplies, AVX-512 BF16 or AMX, and on GPUs); ``int8``
    (CPU only: every linear layer, the output projection included, becomes
    ``torch.ao.quantization``'s dynamically quantized linear layer: int8 weights, activations
    quantized per call; embeddings, norms and attention stay float32). Their speed:
    docs/benchmarks.md; their BLEU against float32: ``benchmarks/export_parity.py MODEL_DIR --engines
    torch-int8,torch-bf16``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        device: str | torch.device = "cpu",
        use_cache: bool = True,
        precision: str = "float32",
        pad_id: int,
        bos_id: int,
        eos_id: int,
        unk_id: int,
    ) -> None:
        if precision not in TORCH_PRECISIONS:
            raise UserError(
                f"unknown precision {precision!r}; expected one of {', '.join(TORCH_PRECISIONS)}"
            )
        self.device = torch.device(device)
        self.precision = precision
        model = model.to(self.device).eval()
        if precision == "bfloat16":
            model = model.to(torch.bfloat16)
        elif precision == "int8":
            model = _quantize_linear_layers(model, self.device)
        self.model = model
        self.use_cache = use_cache
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = pad_id, bos_id, eos_id, unk_id

    def _pad(self, src: list[list[int]]) -> Tensor:
        width = max(len(s) for s in src)
        ids = torch.full((len(src), width), self.pad_id, dtype=torch.long)  # (B, S)
        for i, s in enumerate(src):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return ids.to(self.device)

    @property
    def max_positions(self) -> int:
        """Positions the decoder can see (the longest source, and target + BOS)."""
        return self.model.max_positions

    def start(self, src: list[list[int]], *, attention: bool = False) -> StepDecoder:
        """Encode ``src`` (padded here): the step function, reorder and state for the search.

        With ``attention`` each step also keeps the last decoder layer's cross-attention,
        averaged over heads (the explicit, slower attention path).
        """
        model = self.model
        step = model.decode_step if self.use_cache else model.decode_step_uncached
        if attention:
            step = functools.partial(step, need_weights=True)
        return StepDecoder(
            step=step,
            reorder=_recycling_reorder,
            state=model.start_state(self._pad(src)),
            attention=_cross_attention if attention else None,
            max_positions=model.max_positions,
        )

    def translate_ids(
        self,
        src: list[list[int]],
        opts: SearchOptions,
        constraints: list[Constraints] | None = None,
        *,
        attention: bool = False,
    ) -> list[list[Hypothesis]]:
        """See :class:`Engine`; ``attention``: each hypothesis carries its cross-attention."""
        return search_steps(self, src, opts, constraints, attention=attention, device=self.device)


def _cross_attention(state) -> Tensor:
    """The (N, S) cross-attention a ``need_weights`` step left in the state."""
    return state.cross_attention


def _quantize_linear_layers(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A copy of ``model`` whose ``nn.Linear`` layers are dynamically quantized to int8."""
    if device.type != "cpu":
        raise UserError(f"int8 torch inference runs on the CPU, not {device.type}")
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=False)


def _recycling_reorder(state, index: Tensor):
    """The torch engine's ``reorder``: a search never uses a state again once it has
    reordered it (``state = reorder(state, index)``), so the KV cache may alternate between two
    buffers instead of allocating new ones (:meth:`DecoderState.reorder`)."""
    return state.reorder(index, recycle=True)


def load_torch(
    model_dir: str | Path,
    *,
    device: str = "cpu",
    use_cache: bool = True,
    precision: str = "float32",
) -> LoadedEngine:
    """``model_dir`` is a model directory written by ``seq2seq train`` or ``seq2seq average``.

    ``precision``: see :class:`TorchEngine` (``torch-bf16`` and ``torch-int8`` in ENGINES).
    On the CPU this also makes the process keep freed memory for reuse
    (:func:`seq2seq.core.memory.keep_freed_memory`).
    """
    from seq2seq.core import keep_freed_memory
    from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID
    from seq2seq.model import load_model_dir

    if torch.device(device).type == "cpu":
        keep_freed_memory()  # a beam step's (N, V) tensors would be faulted in anew each step
    loaded = load_model_dir(model_dir, device=device)
    engine = TorchEngine(
        loaded.model,
        device=device,
        use_cache=use_cache,
        precision=precision,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
    )
    return LoadedEngine(
        engine=engine,
        tokenizer=loaded.tokenizer,
        cfg=loaded.cfg,
        max_src_positions=loaded.model.max_positions,
    )
