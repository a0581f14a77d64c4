"""OPUS-MT (Marian) in and out: ``seq2seq convert marian`` and ``export --format hf``.

The fixture builds a small MarianMTModel with transformers' own classes (d_model 64, 2+2
layers, swish, separate SentencePiece models trained on Multi30K lines, a joint vocab.json in
Marian's convention), trains it a few hundred steps so that it stops and its outputs differ,
gives it a non-zero final_logits_bias, saves it with save_pretrained, and converts it once
per session. No hub access: HF_HUB_OFFLINE=1 throughout.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
transformers = pytest.importorskip("transformers")

N_TRAIN = 400
N_TEST = 30
MAX_NEW = 100  # generated tokens, EOS included: our max_len_b with max_len_a 0


def _lines(mirror: Path, split: str, lang: str, n: int) -> list[str]:
    with gzip.open(mirror / "data" / "task1" / "raw" / f"{split}.{lang}.gz", "rt") as f:
        return [next(f).strip() for _ in range(n)]


def _train_spm(lines: list[str], prefix: Path, vocab_size: int) -> Path:
    import sentencepiece as spm

    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    model = prefix.with_suffix(".model")
    return model


def _marian_vocab(src_spm: Path, tgt_spm: Path) -> dict[str, int]:
    """Marian's convention: </s> 0, <unk> 1, the pieces of both models, <pad> last."""
    import sentencepiece as spm

    vocab = {"</s>": 0, "<unk>": 1}
    for path in (src_spm, tgt_spm):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not sp.is_control(i) and not sp.is_unknown(i) and piece not in vocab:
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    return vocab


def _run(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"}
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        **kw,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"seq2seq {' '.join(args)} failed:\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def marian(tmp_path_factory, mirror):
    """(hf_dir, model_dir, test sources, test targets): a trained small Marian, converted."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    root = tmp_path_factory.mktemp("marian")
    src = _lines(mirror, "train", "en", N_TRAIN)
    tgt = _lines(mirror, "train", "de", N_TRAIN)
    work = root / "spm"
    work.mkdir()
    src_spm = _train_spm(src, work / "src", 160)
    tgt_spm = _train_spm(tgt, work / "tgt", 200)
    vocab = _marian_vocab(src_spm, tgt_spm)
    hf_dir = root / "hf"
    hf_dir.mkdir()
    (hf_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (hf_dir / "source.spm").write_bytes(src_spm.read_bytes())
    (hf_dir / "target.spm").write_bytes(tgt_spm.read_bytes())
    tok = MarianTokenizer(
        vocab=str(hf_dir / "vocab.json"),
        source_spm=str(hf_dir / "source.spm"),
        target_spm=str(hf_dir / "target.spm"),
        source_lang="en",
        target_lang="de",
    )
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=96,
        decoder_ffn_dim=96,
        activation_function="swish",
        max_position_embeddings=256,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        scale_embedding=True,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    g = torch.Generator().manual_seed(0)
    for _ in range(250):
        idx = torch.randint(0, N_TRAIN, (32,), generator=g).tolist()
        batch = tok(
            [src[i] for i in idx], text_target=[tgt[i] for i in idx], padding=True,
            return_tensors="pt",
        )
        batch["labels"] = batch["labels"].masked_fill(batch["labels"].eq(pad), -100)
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        model.final_logits_bias.copy_(0.3 * torch.randn(model.final_logits_bias.shape, generator=g))
        model.final_logits_bias[0, pad] = 0.0
    model.generation_config.bad_words_ids = [[pad]]
    model.generation_config.num_beams = 4
    model.generation_config.max_length = 256
    model.save_pretrained(hf_dir)
    tok.save_pretrained(hf_dir)
    model_dir = root / "converted"
    _run("convert", "marian", str(hf_dir), "--out", str(model_dir))
    test_src = _lines(mirror, "test_2016_flickr", "en", N_TEST)
    test_tgt = _lines(mirror, "test_2016_flickr", "de", N_TEST)
    return hf_dir, model_dir, test_src, test_tgt


def _hf(hf_dir: Path):
    from transformers import MarianMTModel, MarianTokenizer

    return MarianMTModel.from_pretrained(hf_dir).eval(), MarianTokenizer.from_pretrained(hf_dir)


def _hf_translate(hf_dir: Path, sentences: list[str], beams: int) -> list[str]:
    model, tok = _hf(hf_dir)
    batch = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **batch,
            num_beams=beams,
            do_sample=False,
            early_stopping=True,
            length_penalty=1.0,
            max_new_tokens=MAX_NEW,
        )
    return tok.batch_decode(out, skip_special_tokens=True)


def _our_translate(model_dir: Path, sentences: list[str], tmp: Path, *search: str) -> list[str]:
    src = tmp / "in.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    result = _run(
        "translate", str(model_dir), "-i", str(src), "--max-len-a", "0", "--max-len-b",
        str(MAX_NEW), "--len-penalty", "1.0", *search,
    )
    return result.stdout.splitlines()


def test_converted_model_stops_and_differs(marian, tmp_path):
    hf_dir, model_dir, test_src, _ = marian
    hyps = _hf_translate(hf_dir, test_src, 1)
    assert len(set(hyps)) > N_TEST // 2  # a trained model: outputs differ
    model, tok = _hf(hf_dir)
    batch = tok(test_src, padding=True, return_tensors="pt")
    out = model.generate(**batch, num_beams=1, max_new_tokens=MAX_NEW)
    assert sum(int(row.eq(0).any()) for row in out) == N_TEST  # every output ended with </s>


def test_forced_decoding_log_probs_match_transformers(marian, tmp_path):
    hf_dir, model_dir, test_src, test_tgt = marian
    model, tok = _hf(hf_dir)
    batch = tok(test_src, text_target=test_tgt, padding=True, return_tensors="pt")
    labels = batch.pop("labels")
    pad = model.config.pad_token_id
    with torch.no_grad():
        logits = model(**batch, labels=labels).logits.float()
    lp = logits.log_softmax(-1).gather(-1, labels[..., None])[..., 0]
    keep = labels.ne(pad)
    expected = (lp * keep).sum(1)
    assert bool((labels.eq(pad).any(1)).any())  # the batch is padded
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(test_src) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(test_tgt) + "\n", encoding="utf-8")
    out = _run(
        "score", str(model_dir), "--src", str(src), "--tgt", str(tgt), "--output-format", "jsonl"
    )
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    got = torch.tensor([r["log_prob"] for r in rows])
    assert [r["n_tokens"] for r in rows] == keep.sum(1).tolist()
    assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()


@pytest.mark.parametrize("beams", [1, 4])
def test_translations_match_transformers_generate(marian, tmp_path, beams):
    hf_dir, model_dir, test_src, _ = marian
    expected = _hf_translate(hf_dir, test_src, beams)
    search = ("--greedy",) if beams == 1 else ("--beam", "4")
    assert _our_translate(model_dir, test_src, tmp_path, *search) == expected
