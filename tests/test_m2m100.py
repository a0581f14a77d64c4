"""M2M100 and NLLB-200 in: ``seq2seq convert m2m100``, its tokenizers, decoding and languages.

Each fixture builds a small ``M2M100ForConditionalGeneration`` with transformers' own classes
(d_model 64, 2+2 layers, ReLU, pre-norm), a BPE SentencePiece model trained on Multi30K lines,
and the family's tokenizer (``M2M100Tokenizer`` with vocab.json, or ``NllbTokenizer`` with a
tokenizer.json that holds the language codes), trains it a few hundred steps on en->de and
de->en (labels ``[tgt_lang] pieces </s>``, the decoder starting from ``</s>``) so that its
outputs stop and differ, saves it with save_pretrained and converts it once per session. No
hub access: HF_HUB_OFFLINE=1 throughout.
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

N_TRAIN = 200
N_TEST = 24  # the first training sentences: the small model has learnt them, so it stops
STEPS = 300
MAX_NEW = 60  # generated tokens (the language token and EOS included)
NLLB_CODES = ["eng_Latn", "deu_Latn", "fra_Latn", "ces_Latn", "zho_Hans", "zho_Hant"]
LANG = {"m2m100": ("en", "de"), "nllb": ("eng_Latn", "deu_Latn")}


def _lines(mirror: Path, split: str, lang: str, n: int) -> list[str]:
    with gzip.open(mirror / "data" / "task1" / "raw" / f"{split}.{lang}.gz", "rt") as f:
        return [next(f).strip() for _ in range(n)]


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "default"}
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args], capture_output=True, text=True, env=env
    )
    if check and result.returncode != 0:
        raise AssertionError(f"seq2seq {' '.join(args)} failed:\n{result.stderr}")
    return result


def _train_spm(lines: list[str], prefix: Path) -> Path:
    import sentencepiece as spm

    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(prefix),
        vocab_size=700,
        model_type="bpe",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def _tokenizer(family: str, spm_model: Path, folder: Path):
    """The family's transformers tokenizer, built from ``spm_model`` (and saved in
    ``folder``)."""
    import sentencepiece as spm

    src, tgt = LANG[family]
    if family == "m2m100":
        from transformers import M2M100Tokenizer

        sp = spm.SentencePieceProcessor(model_file=str(spm_model))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for i in range(sp.get_piece_size()):
            if not sp.is_control(i) and not sp.is_unknown(i):
                vocab[sp.id_to_piece(i)] = len(vocab)
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
        (folder / "sentencepiece.bpe.model").write_bytes(spm_model.read_bytes())
        return M2M100Tokenizer(
            vocab_file=str(folder / "vocab.json"),
            spm_file=str(folder / "sentencepiece.bpe.model"),
            src_lang=src,
            tgt_lang=tgt,
        )
    from transformers import NllbTokenizer

    (folder / "sentencepiece.bpe.model").write_bytes(spm_model.read_bytes())
    tok = NllbTokenizer.from_pretrained(
        str(folder), additional_special_tokens=NLLB_CODES, src_lang=src, tgt_lang=tgt
    )
    (folder / "sentencepiece.bpe.model").unlink()  # save_pretrained writes tokenizer.json
    return tok


def _build(root: Path, mirror: Path, family: str):
    """(hf_dir, model_dir, test sources, test targets) of a small trained model."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    en, de = _lines(mirror, "train", "en", N_TRAIN), _lines(mirror, "train", "de", N_TRAIN)
    fr = _lines(mirror, "train", "fr", N_TRAIN)
    work = root / "spm"
    work.mkdir()
    spm_model = _train_spm(en + de + fr, work / "sp")
    hf_dir = root / "hf"
    hf_dir.mkdir()
    tok = _tokenizer(family, spm_model, hf_dir)
    src, tgt = LANG[family]
    if family == "nllb":
        assert tok.convert_tokens_to_ids("eng_Latn") != tok.unk_token_id
    if family == "m2m100":  # the language tokens follow vocab.json, then 8 made-up words
        rows = len(tok.encoder) + len(tok.lang_code_to_id) + 8
    else:  # the tokenizer's ids, then two rows of padding (as NLLB-200 has)
        rows = len(tok) + 2
    config = M2M100Config(
        vocab_size=rows,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=96,
        decoder_ffn_dim=96,
        activation_function="relu",
        max_position_embeddings=128,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config)
    batches = []
    for s_lang, t_lang, s_text, t_text in ((src, tgt, en, de), (tgt, src, de, en)):
        tok.src_lang, tok.tgt_lang = s_lang, t_lang
        batches.append(tok(s_text, text_target=t_text, padding=True, return_tensors="pt"))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    g = torch.Generator().manual_seed(0)
    for step in range(STEPS):
        data = batches[step % 2]
        idx = torch.randint(0, N_TRAIN, (24,), generator=g)
        ids, mask, labels = (data[k][idx] for k in ("input_ids", "attention_mask", "labels"))
        s_len, t_len = int(mask.sum(1).max()), int(labels.ne(1).sum(1).max())
        labels = labels[:, :t_len]
        loss = model(
            input_ids=ids[:, :s_len],
            attention_mask=mask[:, :s_len],
            labels=labels.masked_fill(labels.eq(1), -100),
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    tok.src_lang, tok.tgt_lang = src, tgt
    model.save_pretrained(hf_dir)
    tok.save_pretrained(hf_dir)
    model_dir = root / "converted"
    _run("convert", "m2m100", str(hf_dir), "--out", str(model_dir))
    return hf_dir, model_dir, en[:N_TEST], de[:N_TEST]


@pytest.fixture(scope="session")
def m2m100(tmp_path_factory, mirror):
    """A trained small M2M100 (vocab.json + sentencepiece.bpe.model), converted."""
    return _build(tmp_path_factory.mktemp("m2m100"), mirror, "m2m100")


@pytest.fixture(scope="session")
def nllb(tmp_path_factory, mirror):
    """A trained small NLLB-200 (tokenizer.json with language codes), converted."""
    return _build(tmp_path_factory.mktemp("nllb"), mirror, "nllb")


BOTH = pytest.mark.parametrize("family", ["m2m100", "nllb"])


def _hf(hf_dir: Path):
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    model = M2M100ForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(hf_dir)


@BOTH
def test_logits_equal_transformers(family, request):
    """Teacher-forced log-probabilities of the converted model equal transformers'."""
    from seq2seq.model import load_model_dir

    hf_dir, model_dir, src, tgt = request.getfixturevalue(family)
    model, tok = _hf(hf_dir)
    s_lang, t_lang = LANG[family]
    tok.src_lang, tok.tgt_lang = s_lang, t_lang
    batch = tok(src[:6], text_target=tgt[:6], padding=True, return_tensors="pt")
    labels = batch["labels"]
    with torch.no_grad():
        theirs = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels
        ).logits.log_softmax(-1)
    ours = load_model_dir(model_dir)
    tk = ours.tokenizer
    src_ids = [tk.source_ids(r, s_lang) for r in tk.encode_src(src[:6])]
    tgt_ids = [[tk.language_id(t_lang), *r, 3] for r in tk.encode_tgt(tgt[:6])]
    for i in range(6):
        s = torch.tensor([src_ids[i]])
        t_in = torch.tensor([[2, *tgt_ids[i][:-1]]])
        with torch.no_grad():
            lp = ours.model(s, t_in).log_softmax(-1)[0]
        n = len(tgt_ids[i])
        hf_lp = theirs[i, :n].gather(1, labels[i, :n, None])[:, 0]
        our_lp = lp.gather(1, torch.tensor(tgt_ids[i])[:, None])[:, 0]
        torch.testing.assert_close(our_lp, hf_lp, atol=1e-4, rtol=0)
