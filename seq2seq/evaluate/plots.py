"""Mask and attention heatmaps: see what each attention is allowed to look at, and what it does.

Two pictures, both drawn with matplotlib's object API (:class:`matplotlib.figure.Figure`
on an Agg canvas: headless, and no pyplot global state):

- :func:`plot_mask`: a boolean attention mask as a grid, rows = queries, columns = keys,
  allowed and hidden cells in two colours with a legend. :func:`mask_for_kind` builds the
  masks from :mod:`seq2seq.model.masks` (never re-implemented here).
- :func:`plot_attention`: a trained model's attention on one sentence, three panels:
  encoder self-attention (the full square: the encoder sees both directions), decoder
  self-attention (the lower triangle: cells the mask hides are drawn blank), and
  cross-attention (target over source: the soft alignment). :func:`attention_maps`
  translates the sentence greedily and collects the weights with
  :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.forward_with_attention`.

Every PNG is written atomically (:func:`seq2seq.core.files.atomic_open`); its size in pixels is
exactly ``size * dpi``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from torch import Tensor

from seq2seq.core import UserError, atomic_open
from seq2seq.model import (
    attention_mask_from_pad,
    block_causal_mask,
    causal_mask,
    lengths_to_pad,
    sliding_window_mask,
)

__all__ = [
    "MASK_KINDS",
    "AttentionMaps",
    "attention_maps",
    "check_png_output",
    "mask_for_kind",
    "mask_title",
    "parse_size",
    "plot_attention",
    "plot_mask",
]

MASK_KINDS = ("causal", "window", "block", "padding", "full")
"""Masks :func:`mask_for_kind` knows: the decoder's three, key padding, the encoder's full one."""

ALLOWED_COLOUR = "#2f6db5"
HIDDEN_COLOUR = "#e9e9e9"
ATTENTION_CMAP = (
    "viridis"  # its zero is dark, so a tiny weight never looks like a blank (masked) cell
)

BOS_LABEL = "<s>"
EOS_LABEL = "</s>"


# ---- masks ---------------------------------------------------------------------------------


def mask_for_kind(
    kind: str,
    length: int,
    *,
    window: int = 3,
    block_size: int = 4,
    prev_blocks: int = 1,
    pad: int = 2,
) -> Tensor:
    """The (L, L) mask named by ``kind``, built by :mod:`seq2seq.model.masks`.

    Args:
        kind: ``causal``, ``window`` (sliding window of ``window`` keys, the query's own
            included), ``block`` (block causal: blocks of ``block_size``, each query also
            sees ``prev_blocks`` earlier blocks), ``padding`` (a key-padding mask: the last
            ``pad`` keys are padding, hidden from every query) or ``full`` (the encoder's
            bidirectional mask without padding: everything allowed).
        length: L, queries = keys = L positions.

    Returns:
        Bool tensor (L, L), True = may attend (rows queries, columns keys).

    Raises:
        UserError: an unknown kind or a parameter out of range.
    """
    if kind not in MASK_KINDS:
        raise UserError(f"unknown mask kind {kind!r}; expected one of {', '.join(MASK_KINDS)}")
    if length < 1:
        raise UserError(f"--len must be >= 1, got {length}")
    if kind == "causal":
        return causal_mask(length, length)
    if kind == "window":
        if window < 1:
            raise UserError(f"--window must be >= 1, got {window}")
        return sliding_window_mask(length, length, window)
    if kind == "block":
        if block_size < 1:
            raise UserError(f"--block must be >= 1, got {block_size}")
        if prev_blocks < 0:
            raise UserError(f"--prev-blocks must be >= 0, got {prev_blocks}")
        return block_causal_mask(length, length, block_size, prev_blocks)
    n_pad = pad if kind == "padding" else 0
    if not 0 <= n_pad < length:
        raise UserError(f"--pad must be between 0 and --len - 1 ({length - 1}), got {pad}")
    key_pad = lengths_to_pad(torch.tensor([length - n_pad]), length)  # (1, L), True = padding
    return attention_mask_from_pad(key_pad)[0, 0].expand(length, length).clone()  # (L, L)


def mask_title(
    kind: str,
    length: int,
    *,
    window: int = 3,
    block_size: int = 4,
    prev_blocks: int = 1,
    pad: int = 2,
) -> str:
    """A title naming the mask kind and the parameters that shape it."""
    if kind == "causal":
        return f"causal mask (L={length})"
    if kind == "window":
        return f"sliding-window mask (L={length}, window={window})"
    if kind == "block":
        return f"block-causal mask (L={length}, block={block_size}, prev_blocks={prev_blocks})"
    if kind == "padding":
        return f"key-padding mask (L={length}, last {pad} keys padding)"
    if kind == "full":
        return f"full (encoder) mask (L={length})"
    raise UserError(f"unknown mask kind {kind!r}; expected one of {', '.join(MASK_KINDS)}")


def parse_size(text: str) -> tuple[float, float]:
    """``"4x3"`` -> (4.0, 3.0) inches (width x height); both must be positive.

    Raises:
        UserError: not of the form WIDTHxHEIGHT with positive numbers.
    """
    parts = text.lower().split("x")
    try:
        width, height = (float(p) for p in parts)
    except ValueError:
        raise UserError(
            f"--size must look like WIDTHxHEIGHT in inches (e.g. 4x4), got {text!r}"
        ) from None
    if not (width > 0 and height > 0) or max(width, height) > 100:
        raise UserError(f"--size needs positive inches no larger than 100, got {text!r}")
    return width, height


def check_png_output(path: str | Path, dpi: float) -> None:
    """Fail early (before any work) on an output that is not a ``.png`` or an odd dpi.

    Raises:
        UserError: naming the bad option.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise UserError(f"output must be a .png file, got {path}")
    if not 10 <= dpi <= 1000:
        raise UserError(f"--dpi must be between 10 and 1000, got {dpi:g}")


def _save(fig: Figure, path: Path, dpi: float) -> Path:
    """Render ``fig`` to ``path`` as PNG, atomically; exactly figsize * dpi pixels."""
    FigureCanvasAgg(fig)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path


def _tick_every(n: int) -> int:
    return 1 if n <= 32 else (n + 31) // 32


def plot_mask(
    mask: Tensor,
    *,
    title: str,
    path: str | Path,
    size: tuple[float, float] = (4.0, 4.0),
    dpi: float = 100,
) -> Path:
    """Draw a boolean mask as a grid and write it as a PNG.

    Args:
        mask: (Lq, Lk) bool, True = may attend; rows are queries, columns keys.
        title: the figure title (:func:`mask_title` names kind and parameters).
        path: the ``.png`` to write (atomically).
        size: (width, height) in inches; the image is ``size * dpi`` pixels.
        dpi: pixels per inch.

    Returns:
        The path written.
    """
    path = Path(path)
    check_png_output(path, dpi)
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a 2-D bool tensor, got {mask.dtype} {tuple(mask.shape)}")
    q_len, k_len = mask.shape
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    ax = fig.add_subplot()
    cmap = ListedColormap([HIDDEN_COLOUR, ALLOWED_COLOUR])
    ax.imshow(
        mask.to(torch.uint8).cpu().numpy(), cmap=cmap, vmin=0, vmax=1, interpolation="nearest"
    )
    # Thin white lines between cells make single positions countable.
    ax.set_xticks([x - 0.5 for x in range(k_len + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(q_len + 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0 if max(q_len, k_len) <= 32 else 0.3)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(0, k_len, _tick_every(k_len)))
    ax.set_yticks(range(0, q_len, _tick_every(q_len)))
    ax.tick_params(labelsize=8)
    ax.xaxis.set_ticks_position("top")
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("key position", fontsize=9)
    ax.set_ylabel("query position", fontsize=9)
    ax.set_title(title, fontsize=9)
    handles = [
        Patch(facecolor=ALLOWED_COLOUR, label="may attend"),
        Patch(facecolor=HIDDEN_COLOUR, edgecolor="#999999", label="hidden"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return _save(fig, path, dpi)


# ---- attention -----------------------------------------------------------------------------


@dataclass
class AttentionMaps:
    """One sentence's attention, ready to draw (one layer; one head or the mean over heads).

    Attributes:
        source: the source text.
        translation: the target text the weights were computed on (the greedy translation,
            or the given target).
        src_labels: S source pieces, ``</s>`` last: keys of encoder and cross-attention.
        tgt_in_labels: T decoder input pieces, ``<s>`` first: queries and keys of the
            decoder self-attention.
        tgt_out_labels: T pieces the decoder produced at each position (``</s>`` last when
            the translation finished): queries of the cross-attention, which make it read as
            an alignment (row i is the query that predicted piece i).
        encoder: (S, S) encoder self-attention weights.
        decoder_self: (T, T) decoder self-attention weights.
        cross: (T, S) cross-attention weights.
        decoder_mask: (T, T) bool, the decoder self-attention mask the model used
            (True = may attend); hidden cells are drawn blank.
        encoder_layer: the encoder layer shown (0-based).
        decoder_layer: the decoder layer shown (0-based).
        head: the head shown, or None for the mean over heads.
    """

    source: str
    translation: str
    src_labels: list[str]
    tgt_in_labels: list[str]
    tgt_out_labels: list[str]
    encoder: Tensor
    decoder_self: Tensor
    cross: Tensor
    decoder_mask: Tensor
    encoder_layer: int
    decoder_layer: int
    head: int | None


def _pick_index(value: int | None, count: int, what: str) -> int:
    """Python-style index into ``count`` items (negative from the end); UserError if not."""
    if value is None:
        return count - 1
    if not -count <= value < count:
        raise UserError(
            f"--{what} {value} is out of range: the model has {count} {what}s "
            f"(use 0..{count - 1}, or -1 for the last)"
        )
    return value % count


def _greedy_translate(loaded, src: list[int], device: torch.device) -> list[int]:
    """Greedy target tokens for one source (ids ending with EOS).

    The same search as ``seq2seq translate`` with ``decoding.method=greedy`` (the config's
    length limits, ``min_len``, n-gram blocking and unk penalty). EOS is the last token when
    the translation finished.
    """
    from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID
    from seq2seq.decode import SearchOptions, TorchEngine

    engine = TorchEngine(
        loaded.model, device=device, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID
    )
    opts = SearchOptions.from_config(loaded.cfg.decoding, method="greedy", nbest=1)
    ((hyp,),) = engine.translate_ids([src], opts)
    return list(hyp.tokens)


def _target_labels(ids: list[int], tok) -> list[str]:
    """Labels for target ids: SentencePiece pieces, ``<s>``/``</s>`` for BOS/EOS."""
    from seq2seq.data import BOS_ID, EOS_ID

    specials = {BOS_ID: BOS_LABEL, EOS_ID: EOS_LABEL}
    return [specials.get(i, piece) for i, piece in zip(ids, tok.tgt_pieces(ids))]


@torch.inference_mode()
def attention_maps(
    loaded,
    text: str,
    *,
    layer: int | None = None,
    head: int | None = None,
    target: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> AttentionMaps:
    """Translate ``text`` greedily (or take ``target``) and collect its attention weights.

    A multilingual model reads ``text`` behind the tag of ``target_lang`` (checked against
    its directions, with ``source_lang``); the maps skip the tag: its encoder row and column
    and its cross-attention column are left out, so they show the sentence's own pieces.

    The translation is the greedy one, under the config's other ``decoding`` options
    (``seq2seq translate`` defaults to beam search, whose output may differ). The weights
    come from one teacher-forced
    :meth:`~seq2seq.model.transformer.Seq2SeqTransformer.forward_with_attention` pass over the source
    and that target (model in eval mode: no dropout).

    Args:
        loaded: a :class:`seq2seq.model.directory.LoadedModel`.
        text: one source sentence.
        layer: encoder and decoder layer to show, 0-based (negative counts from the end);
            None = the last layer.
        head: head to show, 0-based (negative from the end); None = the mean over heads.
        target: a target sentence to use instead of the greedy translation (e.g. the
            reference), teacher-forced.
        source_lang: the language of ``text`` (checked against the model's directions).
        target_lang: the language to translate into (a multilingual model needs it).

    Raises:
        UserError: empty text, a source too long for the model, a layer or head out of range.
    """
    from seq2seq.data import BOS_ID, EOS_ID

    model, tok = loaded.model, loaded.tokenizer
    text = text.strip()
    if not text:
        raise UserError("--text is empty: give one source sentence")
    n_enc, n_dec = len(model.encoder.layers), len(model.decoder.layers)
    if layer is None:
        enc_layer, dec_layer = n_enc - 1, n_dec - 1
    else:
        enc_layer = _pick_index(layer, n_enc, "layer")
        dec_layer = _pick_index(layer, n_dec, "layer")
    head = None if head is None else _pick_index(head, model.n_heads, "head")

    from seq2seq.data import resolve_direction, tag_source

    _, tgt_lang = resolve_direction(loaded.cfg.data.directions, source_lang, target_lang)
    tagged = loaded.cfg.data.multilingual
    src = tok.encode_src([tag_source(text, tgt_lang) if tagged else text])[0] + [EOS_ID]
    skip = int(tagged)  # the tag's position: not a word of the sentence
    if len(src) > model.max_positions:
        raise UserError(
            f"--text has {len(src)} source tokens; this model handles at most {model.max_positions}"
        )
    device = next(model.parameters()).device
    src_ids = torch.tensor([src], device=device)  # (1, S)
    if target is None:
        tokens = _greedy_translate(loaded, src, device)
    else:
        tokens = tok.encode_tgt([target.strip()])[0] + [EOS_ID]
        if len(tokens) > model.max_positions:
            raise UserError(
                f"--target has {len(tokens)} tokens; this model handles at most "
                f"{model.max_positions}"
            )
    tgt_in_ids = [BOS_ID] + tokens[:-1]  # the decoder's inputs: they predicted `tokens`
    tgt_in = torch.tensor([tgt_in_ids], device=device)  # (1, T)
    _, attn = model.forward_with_attention(src_ids, tgt_in)

    def select(weights: Tensor) -> Tensor:  # (1, H, Lq, Lk) -> (Lq, Lk), float32 on CPU
        w = weights[0].float()
        return (w.mean(dim=0) if head is None else w[head]).cpu()

    t = len(tgt_in_ids)
    src_labels = [*tok.src_pieces(text), EOS_LABEL]  # the same SentencePiece model as encode_src
    if len(src_labels) != len(src) - skip:
        raise ValueError(f"{len(src_labels)} source labels for {len(src) - skip} source ids")
    return AttentionMaps(
        source=text,
        translation=tok.decode_tgt([tokens])[0],
        src_labels=src_labels,
        tgt_in_labels=_target_labels(tgt_in_ids, tok),
        tgt_out_labels=_target_labels(tokens, tok),
        encoder=select(attn.encoder[enc_layer])[skip:, skip:],
        decoder_self=select(attn.decoder_self[dec_layer]),
        cross=select(attn.cross[dec_layer])[:, skip:],
        decoder_mask=model.decoder.structural_mask(t, t, torch.device("cpu")),
        encoder_layer=enc_layer,
        decoder_layer=dec_layer,
        head=head,
    )


def _default_attention_size(maps: AttentionMaps) -> tuple[float, float]:
    """Inches that give each cell about a quarter inch, plus room for labels and titles."""
    s, t = len(maps.src_labels), len(maps.tgt_in_labels)
    cell = 0.25
    width = cell * (2 * s + t) + 4.5
    height = cell * max(s, t) + 2.4
    return max(width, 8.0), max(height, 3.5)


def plot_attention(
    maps: AttentionMaps,
    path: str | Path,
    *,
    size: tuple[float, float] | None = None,
    dpi: float = 100,
) -> Path:
    """Draw encoder self-, decoder self- and cross-attention side by side; write a PNG.

    All three panels share one colour scale, 0..1. Cells the decoder mask hides (the future)
    are blank white, distinct from a small weight (dark in the colour map).

    Args:
        maps: from :func:`attention_maps`.
        path: the ``.png`` to write (atomically).
        size: (width, height) in inches; default grows with the sentence lengths.
        dpi: pixels per inch.

    Returns:
        The path written.
    """
    path = Path(path)
    check_png_output(path, dpi)
    size = size or _default_attention_size(maps)
    s, t = len(maps.src_labels), len(maps.tgt_in_labels)
    fig = Figure(figsize=size, dpi=dpi, layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[s, t, s])
    cmap = colormaps[ATTENTION_CMAP].with_extremes(bad="white")
    dec = maps.decoder_self.masked_fill(~maps.decoder_mask, float("nan"))  # blank = masked
    panels = [
        (axes[0], maps.encoder, maps.src_labels, maps.src_labels, "encoder self-attention",
         "source key", "source query"),
        (axes[1], dec, maps.tgt_in_labels, maps.tgt_in_labels,
         "decoder self-attention\n(blank = masked future)", "target key (decoder input)",
         "target query (decoder input)"),
        (axes[2], maps.cross, maps.src_labels, maps.tgt_out_labels,
         "cross-attention (alignment)", "source key", "target piece produced"),
    ]  # fmt: skip
    image = None
    for ax, weights, x_labels, y_labels, title, x_name, y_name in panels:
        image = ax.imshow(
            weights.numpy(), cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="equal"
        )
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=90, fontsize=8)
        ax.set_yticks(range(len(y_labels)), y_labels, fontsize=8)
        ax.set_xlabel(x_name, fontsize=9)
        ax.set_ylabel(y_name, fontsize=9)
        ax.set_title(title, fontsize=10)
    head = "mean over heads" if maps.head is None else f"head {maps.head}"
    if maps.encoder_layer == maps.decoder_layer:
        layer = f"layer {maps.decoder_layer}"
    else:
        layer = f"encoder layer {maps.encoder_layer}, decoder layer {maps.decoder_layer}"
    fig.suptitle(f"{layer}, {head}: {maps.source!r} -> {maps.translation!r}", fontsize=10)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="attention weight")
    return _save(fig, path, dpi)
