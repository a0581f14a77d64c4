"""The model: masks, attention with its KV cache, layers, the encoder and the decoder, the state
of incremental decoding, the encoder-decoder Transformer, the loss, bf16 shape buckets, and the
model directory that stores a trained translator on disk.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "CONFIG_FILE": "directory",
    "KVCache": "attention",
    "LoadedModel": "directory",
    "LossOutput": "loss",
    "MANIFEST_FILE": "directory",
    "PARENT_FILE": "directory",
    "SPM_FILES": "directory",
    "START_BIAS": "marian",
    "TOKENIZER_FILES": "directory",
    "Seq2SeqTransformer": "transformer",
    "attention_mask_from_pad": "masks",
    "block_causal_mask": "masks",
    "check_finite": "directory",
    "check_out_dir": "directory",
    "convert_marian": "convert",
    "convert_m2m100": "m2m100",
    "m2m100_order": "m2m100",
    "M2M100_CODES": "m2m100",
    "POSITION_OFFSET": "m2m100",
    "to_m2m100_weights": "m2m100",
    "layout_of": "tensor_files",
    "write_safetensors": "tensor_files",
    "build_model": "transformer",
    "marian_order": "marian",
    "to_marian_weights": "marian",
    "causal_mask": "masks",
    "held_model_files": "directory",
    "label_smoothed_nll": "loss",
    "lengths_to_pad": "masks",
    "load_model_dir": "directory",
    "projected_label_smoothed_nll": "loss",
    "projected_rdrop_loss": "loss",
    "rdrop_loss": "loss",
    "safetensors_bytes": "directory",
    "save_model_dir": "directory",
    "sliding_window_mask": "masks",
    "state_dict_for_saving": "directory",
    "target_log_probs": "loss",
    "token_cutoff": "cutoff",
    "verify_model_dir": "directory",
    "write_manifest": "directory",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
