"""seq2seq/evaluate/plots.py and `seq2seq plot`: masks and attention drawn as PNGs of the asked size."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgb
from PIL import Image

from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.evaluate.plots import (
    ALLOWED_COLOUR,
    ATTENTION_CMAP,
    HIDDEN_COLOUR,
    MASK_KINDS,
    AttentionMaps,
    attention_maps,
    mask_for_kind,
    mask_title,
    parse_size,
    plot_attention,
    plot_mask,
)
from seq2seq.model.masks import block_causal_mask, causal_mask, sliding_window_mask

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the signature."""
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is fastest, and far faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.pop("SEQ2SEQ_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args],
        capture_output=True,
        timeout=120,
        env=env,
        text=True,
    )


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    """`seq2seq ARGS` in this process (no second torch import): (exit status, stdout, stderr)."""
    try:
        rc = main(list(args))
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(result: tuple[int, str, str], *needles: str) -> None:
    rc, _, err = result
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("seq2seq plot: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


def colour_count(rgb: np.ndarray, colour) -> int:
    """Pixels within a small tolerance of ``colour`` (anti-aliasing only touches edges)."""
    target = np.array(to_rgb(colour)) * 255
    return int((np.abs(rgb.astype(float) - target).max(axis=-1) <= 3).sum())


def read_rgb(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


# ---- masks ---------------------------------------------------------------------------------


def test_mask_for_kind_is_the_masks_module():
    assert torch.equal(mask_for_kind("causal", 8), causal_mask(8, 8))
    assert torch.equal(mask_for_kind("window", 8, window=3), sliding_window_mask(8, 8, 3))
    assert torch.equal(
        mask_for_kind("block", 12, block_size=4, prev_blocks=1), block_causal_mask(12, 12, 4, 1)
    )
    padding = mask_for_kind("padding", 8, pad=2)
    assert padding.shape == (8, 8) and padding.dtype == torch.bool
    assert padding[:, :6].all() and not padding[:, 6:].any()  # last 2 keys hidden for all queries
    full = mask_for_kind("full", 5)
    assert full.shape == (5, 5) and full.all()
    # A sliding window really differs from causal: query 7 no longer sees key 0.
    assert causal_mask(8, 8)[7, 0] and not mask_for_kind("window", 8, window=3)[7, 0]


@pytest.mark.parametrize(
    ("kind", "kwargs", "needle"),
    [
        ("diagonal", {}, "unknown mask kind"),
        ("window", {"window": 0}, "--window"),
        ("block", {"block_size": 0}, "--block"),
        ("block", {"prev_blocks": -1}, "--prev-blocks"),
        ("padding", {"pad": 8}, "--pad"),
        ("padding", {"pad": -1}, "--pad"),
    ],
)
def test_mask_for_kind_rejects_bad_parameters(kind, kwargs, needle):
    with pytest.raises(UserError, match=needle):
        mask_for_kind(kind, 8, **kwargs)


def test_mask_titles_name_kind_and_parameters():
    assert mask_title("window", 8, window=3) == "sliding-window mask (L=8, window=3)"
    assert "block=4" in mask_title("block", 12, block_size=4, prev_blocks=1)
    assert "prev_blocks=1" in mask_title("block", 12, block_size=4, prev_blocks=1)
    assert "2 keys" in mask_title("padding", 8, pad=2)
    assert {mask_title(k, 8).split()[0] for k in MASK_KINDS} == {
        "causal",
        "sliding-window",
        "block-causal",
        "key-padding",
        "full",
    }


def test_parse_size():
    assert parse_size("4x3") == (4.0, 3.0)
    assert parse_size("2.5X2") == (2.5, 2.0)
    for bad in ("4", "4x", "ax3", "0x4", "-1x2", "4x3x2", "nanx2"):
        with pytest.raises(UserError, match="--size"):
            parse_size(bad)


def test_plot_mask_draws_allowed_and_hidden_cells_in_proportion(tmp_path):
    # causal L=8: 36 allowed cells, 28 hidden; full: 64 allowed, none hidden.
    causal = plot_mask(causal_mask(8, 8), title="causal", path=tmp_path / "c.png", dpi=100)
    full = plot_mask(mask_for_kind("full", 8), title="full", path=tmp_path / "f.png", dpi=100)
    assert png_size(causal) == (400, 400) and png_size(full) == (400, 400)
    c, f = read_rgb(causal), read_rgb(full)
    c_allowed, c_hidden = colour_count(c, ALLOWED_COLOUR), colour_count(c, HIDDEN_COLOUR)
    f_allowed, f_hidden = colour_count(f, ALLOWED_COLOUR), colour_count(f, HIDDEN_COLOUR)
    assert c_hidden > 1000 and 0.9 < (c_allowed / c_hidden) / (36 / 28) < 1.1
    assert f_hidden < 0.02 * f_allowed  # only the legend's swatch
    assert 0.9 < (c_allowed / f_allowed) / (36 / 64) < 1.1


def test_plot_mask_rejects_non_png_and_bad_dpi(tmp_path):
    with pytest.raises(UserError, match=r"\.png"):
        plot_mask(causal_mask(4, 4), title="t", path=tmp_path / "m.jpg")
    with pytest.raises(UserError, match="--dpi"):
        plot_mask(causal_mask(4, 4), title="t", path=tmp_path / "m.png", dpi=0)
    assert not list(tmp_path.iterdir())


def test_cli_plot_mask_writes_png_of_requested_size(tmp_path, capsys):
    out = tmp_path / "sub" / "mask.png"
    rc, _, err = run_main(
        capsys, "plot", "mask", "--kind", "window", "--len", "8", "--window", "3",
        "--size", "3x2", "--dpi", "50", "-o", str(out),
    )  # fmt: skip
    assert rc == 0, err
    assert png_size(out) == (150, 100)
    assert [p.name for p in out.parent.iterdir()] == ["mask.png"]  # no temporary left behind


def test_cli_subprocess_bad_argument_is_one_line_exit_2(tmp_path):
    """The real console process: exit status 2, one line on stderr, no traceback, no file."""
    r = run_cli("plot", "mask", "--kind", "window", "--window", "0", "-o", str(tmp_path / "m.png"))
    assert_one_line_error((r.returncode, r.stdout, r.stderr), "--window must be >= 1, got 0")
    assert not list(tmp_path.iterdir())


def test_cli_plot_mask_errors_are_one_line_exit_2(tmp_path, capsys):
    out = str(tmp_path / "m.png")
    mask = ("plot", "mask", "-o", out)
    assert_one_line_error(run_main(capsys, *mask, "--kind", "diagonal"), "'diagonal'")
    assert_one_line_error(run_main(capsys, *mask, "--kind", "window", "--window", "0"), "--window")
    assert_one_line_error(run_main(capsys, *mask, "--size", "4by4"), "--size")
    assert_one_line_error(run_main(capsys, "plot", "mask", "-o", str(tmp_path / "m.svg")), ".png")
    assert not list(tmp_path.iterdir())


# ---- attention -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from factories import make_model_dir

    from seq2seq.model.directory import load_model_dir

    path = make_model_dir(
        tmp_path_factory.mktemp("plots") / "model",
        cfg_overrides=("model.n_encoder_layers=2", "model.n_decoder_layers=2"),
    )
    return load_model_dir(path)


TEXT = "A man sits on the bench."
TARGET = "Two dogs play in the park."


@pytest.fixture(scope="module")
def greedy(loaded):
    return attention_maps(loaded, TEXT)


def check_masked_and_normalized(maps: AttentionMaps) -> None:
    s, t = len(maps.src_labels), len(maps.tgt_in_labels)
    assert maps.encoder.shape == (s, s)
    assert maps.decoder_self.shape == (t, t)
    assert maps.cross.shape == (t, s)
    assert len(maps.tgt_out_labels) == t
    # decoder self-attention: the future gets exactly zero; every row is a distribution
    assert torch.equal(maps.decoder_self.triu(1), torch.zeros(t, t))
    torch.testing.assert_close(maps.decoder_self.sum(-1), torch.ones(t), atol=1e-5, rtol=0)
    assert torch.equal(maps.decoder_mask, causal_mask(t, t))
    # encoder: bidirectional, so earlier queries weigh later keys
    assert s >= 2 and bool((maps.encoder.triu(1).sum(-1)[:-1] > 0).all())
    torch.testing.assert_close(maps.encoder.sum(-1), torch.ones(s), atol=1e-5, rtol=0)
    torch.testing.assert_close(maps.cross.sum(-1), torch.ones(t), atol=1e-5, rtol=0)


def test_greedy_attention_maps_are_masked_and_normalized(loaded, greedy):
    check_masked_and_normalized(greedy)
    assert greedy.tgt_in_labels[0] == "<s>" and len(greedy.tgt_in_labels) >= 2
    assert greedy.tgt_in_labels[1:] == greedy.tgt_out_labels[:-1]
    n_layers = len(loaded.model.decoder.layers)
    assert greedy.decoder_layer == n_layers - 1 and greedy.head is None
    # the plotted translation is the one `seq2seq translate` finds with greedy search
    from seq2seq.decode.translator import Translator

    translator = Translator.load(loaded.path, method="greedy")
    assert greedy.translation == translator.translate([TEXT])[0]


@pytest.mark.parametrize("head", [0, -1])
@pytest.mark.parametrize("layer", [0, -1])
def test_one_head_maps_are_masked_and_normalized(loaded, layer, head):
    maps = attention_maps(loaded, TEXT, target=TARGET, layer=layer, head=head)
    check_masked_and_normalized(maps)
    assert maps.head == head % loaded.model.n_heads


def test_attention_maps_labels_layer_and_head(loaded):
    tok = loaded.tokenizer
    maps = attention_maps(loaded, TEXT, target=TARGET)
    ids = tok.encode_tgt([TARGET])[0]
    assert maps.src_labels == [*tok.src_pieces(TEXT), "</s>"]
    assert maps.tgt_out_labels == [*tok.tgt_pieces(ids), "</s>"]
    assert maps.tgt_in_labels == ["<s>", *tok.tgt_pieces(ids)]
    assert maps.translation == tok.decode_tgt([ids])[0]
    # the default is the mean over heads of the last layer
    heads = [
        attention_maps(loaded, TEXT, target=TARGET, head=h) for h in range(loaded.model.n_heads)
    ]
    for name in ("encoder", "decoder_self", "cross"):
        mean = torch.stack([getattr(m, name) for m in heads]).mean(0)
        torch.testing.assert_close(getattr(maps, name), mean, atol=1e-6, rtol=0)
    assert not heads[0].cross.equal(heads[1].cross)
    n_layers = len(loaded.model.decoder.layers)
    last = attention_maps(loaded, TEXT, target=TARGET, layer=n_layers - 1)
    assert last.cross.equal(maps.cross) and last.encoder.equal(maps.encoder)
    first = attention_maps(loaded, TEXT, target=TARGET, layer=0)
    assert first.decoder_layer == 0 and first.encoder_layer == 0
    assert n_layers > 1 and not first.cross.equal(maps.cross)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"layer": 99}, "--layer 99"), ({"layer": -99}, "--layer"), ({"head": 99}, "--head 99")],
)
def test_attention_maps_rejects_out_of_range_layer_and_head(loaded, kwargs, needle):
    with pytest.raises(UserError, match=needle):
        attention_maps(loaded, TEXT, **kwargs)


def test_attention_maps_rejects_empty_text(loaded):
    with pytest.raises(UserError, match="empty"):
        attention_maps(loaded, "   ")


def test_plot_attention_leaves_masked_cells_blank(tmp_path):
    # Allowed decoder cells carry weight 0 (the colour map's bottom colour); the encoder and
    # cross panels carry 0.25. If masked cells were drawn as weights they would be weight-0
    # coloured too: 16 cells instead of the 10 a causal 4x4 mask allows.
    n = 4
    mask = causal_mask(n, n)
    labels = ["a", "b", "c", "d"]
    maps = AttentionMaps(
        source="a b c",
        translation="b c d",
        src_labels=labels,
        tgt_in_labels=labels,
        tgt_out_labels=labels,
        encoder=torch.full((n, n), 0.25),
        decoder_self=torch.zeros(n, n),
        cross=torch.full((n, n), 0.25),
        decoder_mask=mask,
        encoder_layer=0,
        decoder_layer=0,
        head=None,
    )
    path = plot_attention(maps, tmp_path / "a.png", size=(9, 3), dpi=60)
    assert png_size(path) == (540, 180)
    from matplotlib import colormaps

    cmap = colormaps[ATTENTION_CMAP]
    rgb = read_rgb(path)
    zero, quarter = colour_count(rgb, cmap(0.0)), colour_count(rgb, cmap(0.25))
    ratio = zero / quarter  # colour bar swatches add a little to both
    assert 0.8 * 10 / 32 < ratio < 1.2 * 10 / 32, ratio


def test_cli_plot_attention_writes_png_of_requested_size(loaded, tmp_path, capsys):
    out = tmp_path / "attn.png"
    rc, stdout, err = run_main(
        capsys, "plot", "attention", str(loaded.path), "--text", TEXT, "--layer", "0",
        "--head", "0", "--size", "6x3", "--dpi", "50", "-o", str(out),
    )  # fmt: skip
    assert rc == 0, err
    assert png_size(out) == (300, 150)
    assert stdout.startswith(TEXT + "\t")


def test_cli_plot_attention_errors_are_one_line_exit_2(loaded, tmp_path, capsys):
    out = str(tmp_path / "a.png")
    missing = tmp_path / "no_such_model"
    attention = ("plot", "attention", "--text", TEXT, "-o", out)
    assert_one_line_error(run_main(capsys, *attention, str(missing)), str(missing))
    assert_one_line_error(
        run_main(capsys, *attention, str(loaded.path), "--head", "99"), "--head 99"
    )
    assert_one_line_error(
        run_main(capsys, *attention, str(loaded.path), "--layer", "7"), "--layer 7"
    )
    assert not (tmp_path / "a.png").exists()
