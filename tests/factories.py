"""Tiny but real model directories for tests (translate, evaluate, export, plots, safety).

``make_model_dir(path)`` writes a complete model directory, loadable with
:func:`seq2seq.model.directory.load_model_dir` and :meth:`seq2seq.decode.translator.Translator.load`:

- ``spm.model``: a joint BPE SentencePiece model (about 100 pieces) trained with
  :func:`seq2seq.data.tokenizer.train_tokenizer` on :func:`synthetic_pairs` (a few hundred short
  sentences over a 40-word vocabulary; the target is the source itself: a copy task);
- ``config.yaml``: the defaults with a tiny model (d_model 32, 2 heads, d_ff 64, one encoder
  and one decoder layer, max_positions 64 with data.max_len 63, dropout 0), plus ``cfg_overrides``
  (``"model.n_decoder_layers=2"`` etc., applied like command-line overrides);
- ``model.safetensors`` + ``manifest.json`` via :func:`seq2seq.model.directory.save_model_dir`.

With ``train_steps > 0`` the model is first trained on the copy task with plain torch (Adam,
cross-entropy, batches of 32 pairs; no Lightning), so its output is not random: after ~150 steps
it copies short sentences of the training vocabulary fairly well. ``train_steps=0`` keeps the
random initialisation (seeded: the same arguments give the same weights).

Speed: each distinct ``(cfg_overrides, train_steps, seed)`` is built once per test session
(about 0.2 s untrained; 150 steps take about 5 s on one busy CPU core) and then copied, so
calling it from many tests is cheap. Training runs with one torch thread (faster for these
tiny matrices); the caller's thread setting is restored.

Example::

    from factories import make_model_dir  # tests/ is on sys.path under pytest

    def test_something(tmp_path):
        model_dir = make_model_dir(tmp_path / "model", train_steps=150)
        translator = Translator.load(model_dir)
"""

from __future__ import annotations

import atexit
import random
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from seq2seq.config.loading import load_config
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer
from seq2seq.model.directory import load_model_dir, save_model_dir
from seq2seq.model.transformer import build_model

__all__ = ["TINY_OVERRIDES", "WORDS", "make_model_dir", "synthetic_pairs"]

WORDS = (
    "a man woman child dog cat ball red blue green big small runs walks sits plays jumps "
    "on in under near the park street water grass bench with two three people bike car "
    "house tree black white young old"
).split()
"""The synthetic vocabulary (40 words)."""

TINY_OVERRIDES = (
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=1",
    "model.dropout=0.0",
    "model.max_positions=64",
    "data.max_len=63",  # a config that trains: max_len pieces + BOS or EOS fit max_positions
    "data.vocab_size=100",
    "data.corpus=files",
    "training.seed=0",
)
"""Config overrides that make the model tiny; ``cfg_overrides`` are applied after these."""

_CACHE: dict[tuple, Path] = {}
_CACHE_ROOT: Path | None = None


SHIFTED = dict(zip(WORDS, WORDS[1:] + WORDS[:1]))
"""The ``shift`` task's dictionary: each word of :data:`WORDS` -> the next one."""


def _sentence(words: list[str], end: str) -> str:
    sentence = " ".join(words)
    return sentence[0].upper() + sentence[1:] + end


def synthetic_pairs(n: int = 400, *, seed: int = 0, task: str = "copy") -> list[tuple[str, str]]:
    """``n`` (source, target) pairs of 2-8 words; the target equals the source (``copy``), or
    has each word replaced by the next one of :data:`WORDS` (``shift``: a translation whose
    every word differs from its source word, aligned one to one)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]
        end = rng.choice([".", "", " !"])
        target = [SHIFTED[w] for w in words] if task == "shift" else words
        pairs.append((_sentence(words, end), _sentence(target, end)))
    return pairs


def _train_copy(
    model: torch.nn.Module,
    ids: list[list[int]],
    *,
    steps: int,
    seed: int,
    targets: list[list[int]] | None = None,
) -> None:
    """Teacher-forced training on (ids -> targets, default ids) with plain torch."""
    targets = targets or ids
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(ids), (32,), generator=gen).tolist()
        batch = [ids[r] for r in rows]
        outs = [targets[r] for r in rows]
        width = max(len(b) for b in batch)
        t_width = max(len(b) for b in outs)
        src = torch.full((len(batch), width + 1), PAD_ID, dtype=torch.long)  # (B, S) pieces+EOS
        tgt = torch.full((len(batch), t_width + 2), PAD_ID, dtype=torch.long)  # (B, T+1)
        for i, (b, o) in enumerate(zip(batch, outs)):
            src[i, : len(b) + 1] = torch.tensor(b + [EOS_ID])
            tgt[i, : len(o) + 2] = torch.tensor([BOS_ID] + o + [EOS_ID])
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        logits = model(src, tgt_in)  # (B, T, V)
        loss = F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()


def _build(
    path: Path, cfg_overrides: Sequence[str], train_steps: int, seed: int, task: str = "copy"
) -> None:
    torch.manual_seed(seed)
    cfg = load_config(None, [*TINY_OVERRIDES, *cfg_overrides])
    pairs = synthetic_pairs(400, seed=seed, task=task)
    with tempfile.TemporaryDirectory(prefix="seq2seq-factory-") as tmp:
        src_file, tgt_file = Path(tmp) / "train.src", Path(tmp) / "train.tgt"
        src_file.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        tgt_file.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        tokenizer = train_tokenizer(
            src_file,
            tgt_file,
            path,
            model_type=cfg.data.spm_type,
            vocab_size=cfg.data.vocab_size,
            joint=cfg.data.joint_vocab,
            character_coverage=cfg.data.character_coverage,
            seed=seed + 1,
        )
    model = build_model(
        cfg.model,
        src_vocab_size=tokenizer.src_vocab_size,
        tgt_vocab_size=tokenizer.tgt_vocab_size,
        pad_id=PAD_ID,
    )
    if train_steps > 0:
        ids = tokenizer.encode_src([s for s, _ in pairs])
        tgt_ids = tokenizer.encode_tgt([t for _, t in pairs]) if task != "copy" else None
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny matrices: more threads only add overhead
        try:
            _train_copy(model, ids, steps=train_steps, seed=seed, targets=tgt_ids)
        finally:
            torch.set_num_threads(threads)
    save_model_dir(path, model.eval(), cfg)


def make_model_dir(
    path: str | Path,
    *,
    cfg_overrides: Sequence[str] = (),
    train_steps: int = 0,
    seed: int = 0,
    task: str = "copy",
) -> Path:
    """Write a tiny, complete model directory at ``path`` (which must not exist) and return it.

    Args:
        path: the directory to create.
        cfg_overrides: ``key.sub=value`` config overrides on top of :data:`TINY_OVERRIDES`
            (e.g. ``("model.decoder_mask=window", "decoding.beam_size=3")``).
        train_steps: copy-task training steps (0: untrained, random weights).
        seed: seeds the synthetic corpus, SentencePiece and the weights.
        task: what the model learns (:func:`synthetic_pairs`): ``copy`` or ``shift``.
    """
    global _CACHE_ROOT
    path = Path(path)
    key = (tuple(cfg_overrides), train_steps, seed, task)
    if key not in _CACHE:
        if _CACHE_ROOT is None:
            _CACHE_ROOT = Path(tempfile.mkdtemp(prefix="seq2seq-factory-cache-"))
            atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)
        built = _CACHE_ROOT / f"model{len(_CACHE)}"
        _build(built, cfg_overrides, train_steps, seed, task)
        _CACHE[key] = built
    shutil.copytree(_CACHE[key], path)
    return path


def perturbed_copy(model_dir: Path, out: Path, *, seed: int, scale: float = 0.3) -> Path:
    """A copy of ``model_dir`` at ``out`` (same SentencePiece model and vocabulary) whose weights
    are each moved by ``scale`` times their tensor's standard deviation of Gaussian noise."""
    shutil.copytree(model_dir, out)
    loaded = load_model_dir(model_dir)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in loaded.model.parameters():
            p.add_(scale * p.std().nan_to_num(0.0) * torch.randn(p.shape, generator=gen))
    save_model_dir(out, loaded.model, loaded.cfg)
    return out


def run_app(app, body):
    """``await body(client)`` against the ASGI ``app`` with its lifespan run (startup and
    shutdown: the batcher's worker starts and stops), through httpx's in-process transport at
    ``http://serve``; returns what ``body`` returns."""
    import asyncio

    import httpx

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
                return await body(client)

    return asyncio.run(main())
