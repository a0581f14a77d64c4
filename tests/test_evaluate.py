"""`seq2seq evaluate`: the numbers are sacreBLEU's, on the files it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import make_model_dir, synthetic_pairs
from sacrebleu.metrics import BLEU, CHRF, TER

from seq2seq.core.errors import UserError
from seq2seq.evaluate.evaluation import evaluate
from seq2seq.evaluate.metrics import moses_lc

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("eval") / "model", train_steps=150)


@pytest.fixture
def test_files(tmp_path: Path) -> tuple[Path, Path]:
    """A copy-task test set whose references differ from the sources in case and punctuation."""
    src_lines = [s for s, _ in synthetic_pairs(30, seed=11)]
    ref_lines = [
        (s.upper() if i % 3 == 0 else s.replace(".", " .")) if i % 2 else s
        for i, s in enumerate(src_lines)
    ]
    src, ref = tmp_path / "test.src", tmp_path / "test.ref"
    src.write_text("".join(s + "\n" for s in src_lines), encoding="utf-8")
    ref.write_text("".join(r + "\n" for r in ref_lines), encoding="utf-8")
    return src, ref


def sacrebleu_scores(hyp_path: Path, ref_path: Path, **bleu_args) -> dict:
    """sacreBLEU called directly on the files."""
    hyps = hyp_path.read_text(encoding="utf-8").splitlines()
    refs = [ref_path.read_text(encoding="utf-8").splitlines()]
    lowercase = bleu_args.get("lowercase", False)
    bleu, chrf, ter = BLEU(**bleu_args), CHRF(lowercase=lowercase), TER()
    return {
        "bleu": bleu.corpus_score(hyps, refs).score,
        "chrf": chrf.corpus_score(hyps, refs).score,
        "ter": ter.corpus_score(hyps, refs).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "ter_signature": str(ter.get_signature()),
    }


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SEQ2SEQ_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args],
        capture_output=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_cli_scores_equal_sacrebleu_on_the_written_files(model_dir, test_files, tmp_path) -> None:
    src, ref = test_files
    out_dir = tmp_path / "out"
    r = run_cli(
        "evaluate", str(model_dir), "--src", str(src), "--ref", str(ref), "--out-dir", str(out_dir)
    )
    assert r.returncode == 0, r.stderr.decode()
    hyp_path = out_dir / "test.src.hyp"
    result = json.loads((out_dir / "test.src.json").read_text(encoding="utf-8"))
    assert len(hyp_path.read_text(encoding="utf-8").splitlines()) == 30
    expected = sacrebleu_scores(hyp_path, ref)
    for key, value in expected.items():
        assert result["scores"][key] == value, key
    assert 0 < result["scores"]["bleu"] < 100  # the copy model is good, the refs differ
    out = r.stdout.decode()
    for key in ("bleu_signature", "chrf_signature", "ter_signature"):
        assert expected[key] in out
    assert f"BLEU = {expected['bleu']:.2f}" in out
    assert result["src"] == str(src) and result["ref"] == str(ref)
    assert result["search"]["method"] == "beam" and result["tokenized_lc"] is False


def test_tokenized_lc_equals_sacrebleu_none_lowercase(model_dir, test_files, tmp_path) -> None:
    src, ref = test_files
    result = evaluate(model_dir, src=src, ref=ref, tokenized_lc=True, method="greedy")
    assert Path(result["hyp"]).parent == model_dir / "eval"  # the default output folder
    expected = sacrebleu_scores(Path(result["hyp"]), ref, tokenize="none", lowercase=True)
    for key, value in expected.items():
        assert result["scores"][key] == value, key
    assert "tok:none" in expected["bleu_signature"] and "case:lc" in expected["bleu_signature"]
    assert result["tokenized_lc"] is True and result["search"]["method"] == "greedy"
    default = evaluate(model_dir, src=src, ref=ref, method="greedy")
    assert default["scores"]["bleu"] != result["scores"]["bleu"]


def test_moses_lc_scores_the_moses_tokenized_lowercased_text(model_dir, test_files, tmp_path):
    src, ref = test_files
    out_dir = tmp_path / "out"
    r = run_cli(
        "evaluate", str(model_dir), "--src", str(src), "--ref", str(ref), "--out-dir",
        str(out_dir), "--moses-lc", "--greedy",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    result = json.loads((out_dir / "test.src.moses-lc.json").read_text(encoding="utf-8"))
    hyp_path = out_dir / "test.src.moses-lc.hyp"
    assert result["hyp"] == str(hyp_path) and result["moses_lc"] == "de"  # the pair's target
    hyps = hyp_path.read_text(encoding="utf-8").splitlines()
    refs = ref.read_text(encoding="utf-8").splitlines()
    expected_bleu = BLEU(tokenize="none", lowercase=True).corpus_score(
        moses_lc(hyps, "de"), [moses_lc(refs, "de")]
    )
    assert result["scores"]["bleu"] == expected_bleu.score
    assert "tok:none" in result["scores"]["bleu_signature"]
    # The same translation is scored the default way beside (cased, detokenized): one
    # translation for both numbers.
    beside = json.loads((out_dir / "test.src.json").read_text(encoding="utf-8"))
    assert beside["moses_lc"] is None and not beside["tokenized_lc"]
    assert Path(beside["hyp"]).read_text(encoding="utf-8") == hyp_path.read_text(encoding="utf-8")
    assert beside["scores"]["bleu"] == BLEU().corpus_score(hyps, [refs]).score
    # The references' split-off " ." and upper case no longer cost anything: the score rises
    # above the default's, which sees them.
    default = evaluate(model_dir, src=src, ref=ref, out_dir=out_dir, method="greedy")
    assert result["scores"]["bleu"] > default["scores"]["bleu"]
    assert default["scores"] == beside["scores"]
    assert (out_dir / "test.src.moses-lc.json").is_file()  # beside, not over, the moses-lc ones
    with pytest.raises(UserError, match="--moses-lc and --tokenized-lc exclude each other"):
        evaluate(model_dir, src=src, ref=ref, moses_lc=True, tokenized_lc=True)
    # Tokenized text through the Moses tokenizer again would be escaped twice (&amp;quot;).
    with pytest.raises(UserError, match="test set is the tok variant .* use --tokenized-lc"):
        evaluate(model_dir, variant="tok", moses_lc=True, out_dir=tmp_path / "tok")
    assert not (tmp_path / "tok").exists()
    tok_model = make_model_dir(tmp_path / "tok_model", cfg_overrides=["data.variant=tok"])
    with pytest.raises(UserError, match="model was trained on the tok variant"):
        evaluate(tok_model, src=src, ref=ref, moses_lc=True)


def test_mismatched_line_counts_exit_2_naming_both_files(model_dir, test_files, tmp_path) -> None:
    src, ref = test_files
    ref.write_text("".join(ref.read_text(encoding="utf-8").splitlines(True)[:-2]), encoding="utf-8")
    out_dir = tmp_path / "out"
    r = run_cli(
        "evaluate", str(model_dir), "--src", str(src), "--ref", str(ref), "--out-dir", str(out_dir)
    )
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seq2seq evaluate: error: ")
    assert f"{src} has 30 lines but {ref} has 28" in err[0]
    assert not out_dir.exists()


def test_bad_arguments(model_dir, test_files, tmp_path) -> None:
    src, ref = test_files
    with pytest.raises(UserError, match="--src and --ref go together"):
        evaluate(model_dir, src=src)
    with pytest.raises(UserError, match="file not found: .*missing.txt"):
        evaluate(model_dir, src=src, ref=tmp_path / "missing.txt")
    bad = tmp_path / "bad.ref"
    bad.write_bytes(ref.read_bytes().replace(b"\n", b"\xff\n", 4)[:-1] + b"\n")
    with pytest.raises(UserError, match=r"bad\.ref:1: invalid UTF-8"):
        evaluate(model_dir, src=src, ref=bad)


def test_corpus_split_from_the_mirror(model_dir, mirror, tmp_path) -> None:
    out_dir = tmp_path / "out"
    result = evaluate(
        model_dir,
        corpus="multi30k",
        pair="en-de",
        split="test_2016_flickr",
        variant="tok",
        mirror=mirror,
        cache_dir=tmp_path / "cache",
        out_dir=out_dir,
        tokenized_lc=True,
        method="greedy",
        max_len_a=0.0,
        max_len_b=4,
    )
    assert result["n_sentences"] == 1000
    hyp = out_dir / "multi30k.en-de.test_2016_flickr.tok.hyp"
    assert (
        Path(result["hyp"]) == hyp
        and (out_dir / "multi30k.en-de.test_2016_flickr.tok.json").is_file()
    )
    ref = Path(result["ref"])
    assert ref.read_text(encoding="utf-8").splitlines()[0].startswith("ein mann mit einem")
    expected = sacrebleu_scores(hyp, ref, tokenize="none", lowercase=True)
    for key, value in expected.items():
        assert result["scores"][key] == value, key
