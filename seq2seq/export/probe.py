"""The self-check of every export: the exported model must reproduce the PyTorch model's
log-probabilities on a probe sentence, or the export fails."""

from __future__ import annotations

from seq2seq.export.format import ExportError

__all__ = ["PROBE_TOLERANCE", "check_reproduced", "probe_ids"]

PROBE_TOLERANCE = 1e-3  # max |log-prob difference| the float32 self-check accepts


def probe_ids(model) -> tuple[list[int], list[int]]:
    """A deterministic probe: a source and a target prefix of ordinary (non-special) ids."""
    first = 4  # after pad, unk, bos, eos
    src = [first + (7 * i) % max(model.src_vocab_size - first, 1) for i in range(6)]
    tgt = [first + (5 * i + 3) % max(model.tgt_vocab_size - first, 1) for i in range(5)]
    return src, tgt


def check_reproduced(diff: float, what: str) -> None:
    """Refuse an export whose log-probabilities differ from the model's by over the tolerance.

    Args:
        diff: the largest absolute log-probability difference on the probe (NaN fails).
        what: the format, as the message names it (``CTranslate2``, ``ONNX``).

    Raises:
        ExportError: ``diff`` is over :data:`PROBE_TOLERANCE` or NaN.
    """
    if not diff <= PROBE_TOLERANCE:
        raise ExportError(
            f"the {what} export does not reproduce the model (max log-prob difference "
            f"{diff:.2e} on a probe sentence); please report this"
        )
