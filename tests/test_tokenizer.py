"""SentencePiece training and loading; the special ids."""

from __future__ import annotations

import gzip
import io
import random

import pytest
import sentencepiece as spm

from seq2seq.core.errors import UserError
from seq2seq.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    model_files,
    train_tokenizer,
)

WORDS_EN = "the a man woman dog cat runs walks red blue small big house street park ball".split()
WORDS_DE = "der die ein eine mann frau hund katze rennt geht rot blau klein groß haus park".split()


def _corpus(tmp_path, n=300, seed=0):
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        k = rng.randint(2, 9)
        src.append(" ".join(rng.choice(WORDS_EN) for _ in range(k)))
        tgt.append(" ".join(rng.choice(WORDS_DE) for _ in range(k)))
    src_path, tgt_path = tmp_path / "train.en", tmp_path / "train.de"
    src_path.write_text("\n".join(src) + "\n", encoding="utf-8")
    tgt_path.write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return src_path, tgt_path, src, tgt


def test_special_ids_are_fixed():
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)


def test_joint_model_roundtrip_and_specials(tmp_path):
    src_path, tgt_path, src, tgt = _corpus(tmp_path)
    # far more pieces than 300 short sentences allow: the vocabulary shrinks instead of failing
    tok = train_tokenizer(src_path, tgt_path, tmp_path / "tok", vocab_size=8000)
    assert tok.joint and tok.files == [tmp_path / "tok" / "spm.model"]
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["spm.model"]  # no temp files
    assert 20 < tok.src_vocab_size == tok.tgt_vocab_size < 8000
    assert tok.tgt_pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = tok.encode_src(src[:20])
    assert all(ids) and all(
        PAD_ID not in row and BOS_ID not in row and EOS_ID not in row for row in ids
    )
    assert tok.decode_src(ids) == src[:20]
    tgt_ids = tok.encode_tgt(tgt[:20])
    # decoding ignores the specials wherever they are
    noisy = [[BOS_ID, *row, EOS_ID, PAD_ID, PAD_ID] for row in tgt_ids]
    assert tok.decode_tgt(noisy) == tgt[:20]
    assert tok.decode_tgt([]) == []
    pieces = tok.src_pieces(src[0])
    assert "".join(pieces).replace("▁", " ").strip() == src[0]
    assert tok.tgt_pieces([BOS_ID, *tgt_ids[0], EOS_ID])[0] == "<s>"
    # the same vocabulary on both sides
    assert tok.encode_src(["der hund"]) == tok.encode_tgt(["der hund"])


def test_separate_models(tmp_path):
    src_path, tgt_path, src, tgt = _corpus(tmp_path)
    tok = train_tokenizer(
        src_path, tgt_path, tmp_path / "tok", joint=False, vocab_size=30, model_type="unigram"
    )
    assert not tok.joint
    assert [p.name for p in tok.files] == ["spm.src.model", "spm.tgt.model"]
    assert tok.src_vocab_size == 30 and tok.tgt_vocab_size == 30
    assert tok.decode_src(tok.encode_src(src[:5])) == src[:5]
    assert tok.decode_tgt(tok.encode_tgt(tgt[:5])) == tgt[:5]
    # each side has its own pieces: a German word is no single piece of the English model
    assert tok.encode_src(["katze"]) != tok.encode_tgt(["katze"])
    loaded = Tokenizer.load(tmp_path / "tok")
    assert not loaded.joint and loaded.fingerprint() == tok.fingerprint()
    # a joint model in the same folder makes the kind ambiguous
    train_tokenizer(src_path, tgt_path, tmp_path / "tok", vocab_size=30)
    with pytest.raises(UserError, match="holds both"):
        Tokenizer.load(tmp_path / "tok")
    assert Tokenizer.load(tmp_path / "tok", joint=False).fingerprint() == tok.fingerprint()
    assert Tokenizer.load(tmp_path / "tok", joint=True).joint


def test_fingerprint_follows_the_model(tmp_path):
    src_path, tgt_path, *_ = _corpus(tmp_path)
    a = train_tokenizer(src_path, tgt_path, tmp_path / "a", vocab_size=80)
    b = train_tokenizer(src_path, tgt_path, tmp_path / "b", vocab_size=80)
    c = train_tokenizer(src_path, tgt_path, tmp_path / "c", vocab_size=90)
    assert len(a.fingerprint()) == 64
    assert a.fingerprint() == b.fingerprint()  # same data, same seed: same model
    assert a.fingerprint() != c.fingerprint()
    assert Tokenizer.load(tmp_path / "a").fingerprint() == a.fingerprint()


def test_reads_gzip_crlf_and_skips_blank_lines(tmp_path):
    src_path, tgt_path, src, _ = _corpus(tmp_path, n=100)
    gz = tmp_path / "train.en.gz"
    gz.write_bytes(gzip.compress(("\r\n".join(src) + "\r\n\r\n   \r\n").encode()))
    tok = train_tokenizer(gz, tgt_path, tmp_path / "tok", vocab_size=60)
    # no piece carries a carriage return
    pieces = [tok.tgt_pieces([i])[0] for i in range(tok.tgt_vocab_size)]
    assert not any("\r" in p for p in pieces)


def test_bad_utf8_in_training_text(tmp_path):
    src_path, tgt_path, *_ = _corpus(tmp_path, n=10)
    src_path.write_bytes(b"fine\nalso fine\nbad \xff byte\n" + b"x\n" * 7)
    with pytest.raises(UserError, match=r"train\.en:3: invalid UTF-8"):
        train_tokenizer(src_path, tgt_path, tmp_path / "tok", vocab_size=50)
    assert not (tmp_path / "tok" / "spm.model").exists()


def test_bad_options_and_missing_models(tmp_path):
    src_path, tgt_path, *_ = _corpus(tmp_path, n=10)
    with pytest.raises(UserError, match="bpe or unigram"):
        train_tokenizer(src_path, tgt_path, tmp_path / "t", model_type="word")
    with pytest.raises(UserError, match="not found"):
        train_tokenizer(tmp_path / "missing", tgt_path, tmp_path / "t")
    with pytest.raises(UserError, match=r"no SentencePiece model in .*empty \(expected spm\.model"):
        Tokenizer.load(tmp_path / "empty")
    with pytest.raises(UserError, match=r"SentencePiece model not found: .*empty/spm\.model$"):
        Tokenizer.load(tmp_path / "empty", joint=True)
    with pytest.raises(UserError, match="spm.src.model"):
        Tokenizer.load(tmp_path / "empty", joint=False)


def test_model_with_other_special_ids_is_refused(tmp_path):
    src_path, _, src, _ = _corpus(tmp_path, n=50)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
        sentence_iterator=iter(src), model_writer=proto, vocab_size=30, minloglevel=2
    )
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "spm.model").write_bytes(proto.getvalue())
    with pytest.raises(UserError, match=r"foreign/spm\.model has special ids"):
        Tokenizer.load(tmp_path / "foreign")


def test_model_files_layout(tmp_path):
    assert model_files(tmp_path, joint=True) == [tmp_path / "spm.model"]
    assert model_files(tmp_path, joint=False) == [
        tmp_path / "spm.src.model",
        tmp_path / "spm.tgt.model",
    ]
