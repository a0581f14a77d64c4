"""ONNX export: the encoder and one KV-cached decoder step as two graphs.

The graphs are traced with torch's TorchScript exporter, with dynamic batch, source and cache
lengths; every decoder mask (causal, sliding window, block causal) is supported. Their inputs
and outputs are listed in export.json (``graphs``); :mod:`seq2seq.decode` runs them with
onnxruntime.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.core import atomic_dir
from seq2seq.data import LANGUAGES_FILE
from seq2seq.export.format import (
    DECODER_FILE,
    ENCODER_FILE,
    ExportError,
    check_out,
    copy_common,
    require,
    side_spm,
    source_info,
    special_ids,
    write_info,
)
from seq2seq.export.probe import check_reproduced, probe_ids
from seq2seq.model import attention_mask_from_pad, load_model_dir

__all__ = ["OnnxDecoderStep", "OnnxEncoder", "export_onnx"]


class OnnxEncoder(nn.Module):
    """Traceable encoder: ``src_ids (B, S) -> (src_pad (B, S), k_0, v_0, k_1, v_1, ...)``.

    The per-layer cross-attention K/V of the decoder, each (B, H, S, Dh), are computed here
    once (as in :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.start_state`). Unlike the
    model's encoder it always applies the padding mask (a data-dependent branch would be frozen
    by tracing), which gives the same result.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        enc = self.model.encoder
        src_pad = src_ids.eq(self.model.pad_id)  # (B, S)
        x = enc.embedding(src_ids) + enc.positions.weight[: src_ids.size(1)]  # (B, S, D)
        mask = attention_mask_from_pad(src_pad)  # (B, 1, 1, S)
        for layer in enc.layers:
            x, _ = layer(x, mask=mask)
        if enc.final_norm is not None:
            x = enc.final_norm(x)
        kv = []
        for layer in self.model.decoder.layers:
            kv.extend(layer.cross_attn.memory_kv(x))
        return (src_pad, *kv)


class OnnxDecoderStep(nn.Module):
    """Traceable KV-cached decoder step (one new token per row).

    Inputs: ``tokens`` (N, 1) int64, ``position`` () int64 (absolute position of the token),
    ``src_pad`` (N, S) bool, then ``self_k_i, self_v_i`` (N, H, t, Dh) per layer (t may be 0)
    and ``cross_k_i, cross_v_i`` (N, H, S, Dh) per layer.
    Outputs: ``log_probs`` (N, V) float32, then the new ``self_k_i, self_v_i`` per layer
    (N, H, t+1, Dh); with a sliding-window mask only the last ``window - 1`` positions are
    kept, as in :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.decode_step`.
    """

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.n_layers = len(model.decoder.layers)

    def forward(self, tokens: Tensor, position: Tensor, src_pad: Tensor, *kv: Tensor):
        dec = self.model.decoder
        n = self.n_layers
        self_kv, cross_kv = kv[: 2 * n], kv[2 * n :]
        pos_vec = dec.positions.weight.index_select(0, position.reshape(1))  # (1, D)
        x = dec.embed(tokens) + pos_vec  # (N, 1, D) (embed: which row the start id reads)
        self_mask = None  # causal, or a window-trimmed cache: the one query sees every key
        if dec.self_mask == "block":
            k_len = self_kv[0].size(2) + 1
            k_pos = torch.arange(k_len, device=tokens.device)  # cache keeps every position
            q_pos = k_len - 1
            self_mask = (k_pos // dec.block_size >= q_pos // dec.block_size - dec.prev_blocks)[
                None, :
            ]  # (1, Tk)
        cross_mask = attention_mask_from_pad(src_pad)  # (N, 1, 1, S)
        new_kv = []
        for i, layer in enumerate(dec.layers):
            x, _, (k, v) = layer(
                x,
                (cross_kv[2 * i], cross_kv[2 * i + 1]),
                self_mask=self_mask,
                is_causal=False,
                cross_mask=cross_mask,
                cache=(self_kv[2 * i], self_kv[2 * i + 1]),
            )
            if dec.self_mask == "window":
                keep = dec.window - 1  # keys the next query can still see besides itself
                k, v = (k[:, :, -keep:], v[:, :, -keep:]) if keep else (k[:, :, :0], v[:, :, :0])
            new_kv.extend((k, v))
        if dec.final_norm is not None:
            x = dec.final_norm(x)
        log_probs = self.model.project(x[:, -1]).float().log_softmax(dim=-1)  # (N, V)
        return (log_probs, *new_kv)


def _onnx_io(model) -> dict:
    n_dec = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads

    def kv(prefix: str, length: str) -> list[dict]:
        return [
            {"name": f"{prefix}_{kind}_{i}", "dtype": "float32", "shape": ["N", h, length, dh]}
            for i in range(n_dec)
            for kind in ("k", "v")
        ]

    return {
        "encoder": {
            "file": ENCODER_FILE,
            "inputs": [{"name": "src_ids", "dtype": "int64", "shape": ["B", "S"]}],
            "outputs": [{"name": "src_pad", "dtype": "bool", "shape": ["B", "S"]}]
            + [dict(d, shape=["B", h, "S", dh]) for d in kv("cross", "S")],
        },
        "decoder_step": {
            "file": DECODER_FILE,
            "inputs": [
                {"name": "tokens", "dtype": "int64", "shape": ["N", 1]},
                {"name": "position", "dtype": "int64", "shape": []},
                {"name": "src_pad", "dtype": "bool", "shape": ["N", "S"]},
            ]
            + kv("self", "T_past")
            + kv("cross", "S"),
            "outputs": [
                {"name": "log_probs", "dtype": "float32", "shape": ["N", model.tgt_vocab_size]}
            ]
            + kv("new_self", "T_new"),
        },
    }


def _export_graphs(model, tmp: Path, opset: int) -> dict:
    """torch.onnx.export (TorchScript exporter) of the encoder and the decoder step."""
    io = _onnx_io(model)
    n_dec = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads
    src_ids = torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]], dtype=torch.long)
    src_ids = src_ids.clamp(max=model.src_vocab_size - 1)
    enc_io, dec_io = io["encoder"], io["decoder_step"]
    names = lambda items: [d["name"] for d in items]  # noqa: E731
    axes: dict[str, dict[int, str]] = {"src_ids": {0: "B", 1: "S"}, "src_pad": {0: "B", 1: "S"}}
    axes.update({d["name"]: {0: "B", 2: "S"} for d in enc_io["outputs"][1:]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            OnnxEncoder(model).eval(),
            (src_ids,),
            str(tmp / ENCODER_FILE),
            input_names=names(enc_io["inputs"]),
            output_names=names(enc_io["outputs"]),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
        n, past, s = 2, 2, src_ids.size(1)
        tokens = torch.full((n, 1), 4, dtype=torch.long).clamp(max=model.tgt_vocab_size - 1)
        past_len = (
            past if model.decoder.self_mask != "window" else min(past, model.decoder.window - 1)
        )
        self_kv = [torch.randn(n, h, past_len, dh) for _ in range(2 * n_dec)]
        cross_kv = [torch.randn(n, h, s, dh) for _ in range(2 * n_dec)]
        args = (tokens, torch.tensor(past, dtype=torch.long), src_ids.eq(0), *self_kv, *cross_kv)
        axes = {"tokens": {0: "N"}, "src_pad": {0: "N", 1: "S"}, "log_probs": {0: "N"}}
        axes.update({d["name"]: {0: "N", 2: "T_past"} for d in dec_io["inputs"][3 : 3 + 2 * n_dec]})
        axes.update({d["name"]: {0: "N", 2: "S"} for d in dec_io["inputs"][3 + 2 * n_dec :]})
        axes.update({d["name"]: {0: "N", 2: "T_new"} for d in dec_io["outputs"][1:]})
        torch.onnx.export(
            OnnxDecoderStep(model).eval(),
            args,
            str(tmp / DECODER_FILE),
            input_names=names(dec_io["inputs"]),
            output_names=names(dec_io["outputs"]),
            dynamic_axes=axes,
            opset_version=opset,
            dynamo=False,
        )
    return io


_ONNX_README = """\
# ONNX export of {model_dir}

Exported by `seq2seq export --format onnx` (opset {opset}). Two graphs:

- `{encoder}`: `src_ids` (B, S) int64 (SentencePiece ids + EOS {eos}, padded with {pad}) ->
  `src_pad` (B, S) bool and the cross-attention keys/values of each decoder layer,
  `cross_k_i`, `cross_v_i` (B, H, S, Dh).
- `{decoder}`: one decoder step. `tokens` (N, 1) int64 (BOS {bos} first), `position` ()
  int64 (tokens consumed so far), `src_pad`, `self_k_i`/`self_v_i` (N, H, t, Dh, t = 0 at the
  first step), `cross_k_i`/`cross_v_i` -> `log_probs` (N, V) and `new_self_k_i`/`new_self_v_i`
  to feed back at the next step. For beam search, reorder every array along axis 0.

export.json lists every input and output with its shape. With seq2seq (beam search, n-best,
length penalty as with the torch engine):

    seq2seq translate --engine onnx {name} < input.txt
"""

_ONNX_SPM_EXAMPLE = """
Minimal greedy decoding with onnxruntime alone:

```python
import numpy as np, onnxruntime as ort, sentencepiece as spm
enc = ort.InferenceSession("{name}/{encoder}")
dec = ort.InferenceSession("{name}/{decoder}")
sp = spm.SentencePieceProcessor(model_file="{name}/{src_spm}")
out = enc.run(None, {{"src_ids": np.array([sp.encode("A man is riding a bike.") + [{eos}]])}})
src_pad, cross = out[0], out[1:]
L, H, Dh = {n_layers}, {n_heads}, {d_head}
self_kv = [np.zeros((1, H, 0, Dh), np.float32)] * (2 * L)
tok, ids = {bos}, []
for pos in range(100):
    feed = {{"tokens": np.array([[tok]]), "position": np.array(pos), "src_pad": src_pad}}
    feed.update({{f"self_{{'kv'[j % 2]}}_{{j // 2}}": a for j, a in enumerate(self_kv)}})
    feed.update({{f"cross_{{'kv'[j % 2]}}_{{j // 2}}": a for j, a in enumerate(cross)}})
    log_probs, *self_kv = dec.run(None, feed)
    tok = int(log_probs[0].argmax())
    if tok == {eos}:
        break
    ids.append(tok)
print(spm.SentencePieceProcessor(model_file="{name}/{tgt_spm}").decode(ids))
```
"""

_ONNX_LANGUAGES = """
A converted M2M100 / NLLB-200 model: its languages are tokens of its vocabulary
(languages.json gives each code's id in the original folder; ours are the folder's, except
`<pad>` 0, `<unk>` 1, `</s>` 3, the folder's `<s>` last). The source is `[src_lang] pieces
</s>`; the decoder is fed `<s>` ({bos}), then the target language's token, forced as the first
output. With seq2seq, name the languages:

    seq2seq translate --engine onnx {name} --source-lang en --target-lang de < input.txt
"""


def _check_onnx_probe(tmp: Path, model, special: dict) -> None:
    """Run the exported graphs on a probe (two steps, a reorder) against decode_step."""
    import onnxruntime as ort

    src, tgt = probe_ids(model)
    src_ids = torch.tensor([src + [special["eos"]], src[:3] + [special["eos"], 0, 0, 0]])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    enc = ort.InferenceSession(str(tmp / ENCODER_FILE), opts, providers=["CPUExecutionProvider"])
    dec = ort.InferenceSession(str(tmp / DECODER_FILE), opts, providers=["CPUExecutionProvider"])
    n = len(model.decoder.layers)
    h, dh = model.n_heads, model.d_model // model.n_heads
    out = enc.run(None, {"src_ids": src_ids.numpy()})
    src_pad, cross = out[0], out[1:]
    self_kv = [np.zeros((2, h, 0, dh), np.float32)] * (2 * n)
    state = model.start_state(src_ids)
    prefix = torch.full((2, 1), special["bos"], dtype=torch.long)
    diff = 0.0
    with torch.no_grad():
        for step, tok in enumerate(tgt[:3]):
            expected, state = model.decode_step(prefix, state)
            feed = _decoder_feed(prefix[:, -1:].numpy(), step, src_pad, self_kv, cross)
            got, *self_kv = dec.run(None, feed)
            diff = max(diff, float(np.abs(got - expected.numpy()).max()))
            prefix = torch.cat([prefix, torch.tensor([[tok], [tok + 1]])], dim=1)
    check_reproduced(diff, "ONNX")


def _decoder_feed(tokens, position: int, src_pad, self_kv, cross) -> dict:
    """The decoder_step.onnx input dict of one step (the self-check's)."""
    feed = {"tokens": tokens, "position": np.array(position, dtype=np.int64), "src_pad": src_pad}
    for j, a in enumerate(self_kv):
        feed[f"self_{'kv'[j % 2]}_{j // 2}"] = a
    for j, a in enumerate(cross):
        feed[f"cross_{'kv'[j % 2]}_{j // 2}"] = a
    return feed


def _newest_opset() -> int:
    """The newest opset torch's TorchScript-based exporter (``dynamo=False``) writes."""
    try:
        from torch.onnx import _constants

        return int(_constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET)
    except (ImportError, AttributeError):  # another torch: let the exporter judge
        return 10**6


def export_onnx(
    model_dir: str | Path, out_dir: str | Path, *, opset: int = 17, force: bool = False
) -> Path:
    """Export the encoder and the KV-cached decoder step as ONNX graphs (dynamic B, S, t).

    Every decoder mask (causal, sliding window, block causal) is supported.

    Args:
        model_dir: a seq2seq model directory.
        out_dir: the folder to create.
        opset: ONNX opset (>= 14 for scaled_dot_product_attention).
        force: replace an existing ``out_dir``.

    Returns:
        ``out_dir``.
    """
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    if opset < 14:
        raise ExportError(f"ONNX opset {opset} is too old; use 14 or newer (default 17)")
    newest = _newest_opset()
    if opset > newest:
        raise ExportError(
            f"ONNX opset {opset} is newer than this torch exports (14..{newest}, default 17)"
        )
    check_out(out_dir, force)
    require("onnx")  # torch.onnx.export needs it
    require("onnxruntime")  # the self-check
    loaded = load_model_dir(model_dir, device="cpu")
    model, special = loaded.model, special_ids()
    src_spm, tgt_spm = side_spm(model_dir)
    with atomic_dir(out_dir, overwrite=force) as tmp:
        io = _export_graphs(model, tmp, opset)
        copy_common(model_dir, tmp)
        readme = _ONNX_README + (
            _ONNX_LANGUAGES if (model_dir / LANGUAGES_FILE).is_file() else _ONNX_SPM_EXAMPLE
        )
        (tmp / "README.md").write_text(
            readme.format(
                model_dir=model_dir.name,
                name=out_dir.name,
                opset=opset,
                encoder=ENCODER_FILE,
                decoder=DECODER_FILE,
                src_spm=src_spm.name,
                tgt_spm=tgt_spm.name,
                n_layers=len(model.decoder.layers),
                n_heads=model.n_heads,
                d_head=model.d_model // model.n_heads,
                **special,
            ),
            encoding="utf-8",
        )
        _check_onnx_probe(tmp, model, special)
        write_info(
            tmp,
            {
                "engine": "onnx",
                "opset": opset,
                "torch_version": torch.__version__,
                **source_info(model_dir, model, loaded.cfg),
                "graphs": io,
            },
        )
    return out_dir
