"""One model, many directions (issue 36): target-language tags, direction checks, mixed batches
with temperature sampling, per-direction validation, and a tagged model through every path
(Translator, constraints, ensembles, alignments, attention maps, scoring, exports, the CLI)."""

from __future__ import annotations

import csv
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import run_app

from seq2seq.config import ConfigError
from seq2seq.config.loading import load_config
from seq2seq.core import UserError
from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, resolve_direction
from seq2seq.data.batching import TokenBucketSampler
from seq2seq.data.directions import (
    DirectionSampler,
    direction_of_lines,
    read_direction_counts,
    temperature_probs,
    write_directions_split,
)
from seq2seq.data.tags import split_tag, tag_for, tag_source, tags_for
from seq2seq.data.tokenizer import Tokenizer, train_tokenizer
from seq2seq.decode import Translator
from seq2seq.model.directory import save_model_dir
from seq2seq.model.transformer import build_model

REPO = Path(__file__).resolve().parents[1]
WORDS = "red blue green dog cat man woman runs sits park ball tree car bike two old".split()

# ---- directions in the config ---------------------------------------------------------------


def test_pairs_all_is_every_direction_among_the_languages():
    cfg = load_config(None, ["data.pairs=all", "data.languages=[en, de, fr, cs]"])
    assert cfg.data.multilingual
    assert len(cfg.data.directions) == 12
    assert ("en", "de") in cfg.data.directions and ("cs", "fr") in cfg.data.directions
    assert all(s != t for s, t in cfg.data.directions)
    listed = load_config(None, ["data.pairs=[en-de, DE-en]"])
    assert listed.data.directions == (("en", "de"), ("de", "en"))


def test_a_bilingual_config_has_one_direction_and_no_tags():
    cfg = load_config(REPO / "configs" / "multi30k_quick.yaml")
    assert cfg.data.directions == (("en", "de"),)
    assert not cfg.data.multilingual


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["data.pairs=every"], "data.pairs"),
        (["data.pairs=all", "data.languages=[en]"], "data.languages"),
        (["data.languages=[en, de]"], "data.languages"),
        (["data.pairs=[en-de, en-de]"], "data.pairs"),
        (["data.pairs=[en-en]"], "data.pairs"),
        (["data.pairs=[ende]"], "data.pairs"),
        (["data.pairs=[en-de]", "data.corpus=files"], "data.pairs"),
        (["data.pairs=[en-de]", "data.sampling_temperature=0"], "data.sampling_temperature"),
    ],
)
def test_bad_directions_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, overrides)


# ---- tags -----------------------------------------------------------------------------------


def test_tag_convention():
    assert tag_for("FR") == "<2fr>"
    assert tag_source("A dog.", "de") == "<2de> A dog."
    assert split_tag("<2de> A dog.") == ("<2de>", "A dog.")
    assert split_tag("<2de>A dog.") == (None, "<2de>A dog.")  # a tag needs its space
    assert split_tag("A <2de> dog.") == (None, "A <2de> dog.")  # only at the start
    assert tags_for([("en", "de"), ("fr", "de"), ("de", "en")]) == ["<2de>", "<2en>"]


def _sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 4))) for _ in range(n)]


@pytest.fixture(scope="module")
def tagged_tokenizer(tmp_path_factory) -> Tokenizer:
    tmp = tmp_path_factory.mktemp("spm")
    text = "".join(s + "\n" for s in _sentences(300, 0))
    (tmp / "a").write_text(text, encoding="utf-8")
    return train_tokenizer(
        tmp / "a", tmp / "a", tmp / "tok", vocab_size=60, user_symbols=["<2cp>", "<2rv>"]
    )


def test_a_tag_is_one_piece_prepended_to_the_source(tagged_tokenizer):
    tok = tagged_tokenizer
    plain = tok.encode_src(["red dog runs"])[0]
    tagged = tok.encode_src(["<2rv> red dog runs"])[0]
    assert tagged == [tok._src.piece_to_id("<2rv>"), *plain]
    assert tok.src_pieces("<2rv> red dog runs")[0] == "<2rv>"
    assert tok.language_tags() == ["<2cp>", "<2rv>"]
    # a tag the model lacks is text, as before: never a tag id
    assert tok.encode_src(["<2xx> red"])[0][0] != tagged[0]


def test_a_model_without_tags_encodes_exactly_as_before(tmp_path):
    text = "".join(s + "\n" for s in _sentences(200, 1))
    (tmp_path / "a").write_text(text, encoding="utf-8")
    tok = train_tokenizer(tmp_path / "a", tmp_path / "a", tmp_path / "tok", vocab_size=60)
    assert tok.language_tags() == []
    line = "<2fr> red dog"
    assert tok.encode_src([line]) == [tok._src.encode(line)]


# ---- direction checks -----------------------------------------------------------------------

DIRS = (("en", "de"), ("de", "en"), ("en", "fr"))


def test_resolve_direction():
    assert resolve_direction(DIRS, "en", "fr") == ("en", "fr")
    assert resolve_direction(DIRS, None, "FR") == ("en", "fr")
    assert resolve_direction(DIRS, "de", None) == ("de", "en")
    assert resolve_direction((("en", "de"),)) == ("en", "de")  # bilingual: optional
    assert resolve_direction((), "xx", "yy") == ("xx", "yy")  # nothing to check against


@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        ("de", "fr", "does not translate de-fr; the model translates en-de, de-en, en-fr"),
        (None, "cs", "does not translate ?-cs; the model translates en-de, de-en, en-fr"),
        (None, None, "give the target language (--target-lang); the model translates en-de"),
        ("en", None, "give the target language"),
    ],
)
def test_unknown_directions_are_one_line_errors_listing_the_known_ones(src, tgt, message):
    with pytest.raises(UserError, match=re.escape(message)) as e:
        resolve_direction(DIRS, src, tgt)
    assert "\n" not in str(e.value)


def test_user_codes_in_a_direction_error_are_terminal_safe():
    # An escape sequence and a newline in --target-lang used to reach the terminal raw.
    with pytest.raises(UserError) as e:
        resolve_direction(DIRS, "\x1b[2Jen", "fr\nfake line\u202e")
    message = str(e.value)
    assert message.isprintable(), message
    assert message.startswith("the model does not translate \\x1b[2jen-fr\\nfake line\\u202e; ")


def test_cli_errors_are_one_terminal_safe_line(tmp_path, capfd):
    from factories import make_model_dir

    from seq2seq.cli import main

    model = make_model_dir(tmp_path / "m")
    src = tmp_path / "in.txt"
    src.write_text("a man\n", encoding="utf-8")
    capfd.readouterr()
    for argv in (
        ["translate", str(model), "-i", str(src), "--target-lang", "\x1b[31mfr\nINJECTED"],
        ["translate", str(model), "-i", str(tmp_path / "no\nsuch\x1b]0;title\x07file")],
    ):
        assert main(argv) == 2
        err = capfd.readouterr().err
        assert err.count("\n") == 1 and err.endswith("\n"), err
        assert err[:-1].isprintable() and "\\x1b" in err, err


def test_bilingual_direction_is_checked():
    with pytest.raises(UserError, match="does not translate en-fr; the model translates en-de"):
        resolve_direction((("en", "de"),), "en", "fr")


# ---- mixed batches and temperature sampling --------------------------------------------------


def test_temperature_probabilities():
    sizes = [100, 900]
    np.testing.assert_allclose(temperature_probs(sizes, 1.0), [0.1, 0.9])
    w = np.array([0.1, 0.9]) ** 0.5  # T = 2
    np.testing.assert_allclose(temperature_probs(sizes, 2.0), w / w.sum())
    np.testing.assert_allclose(temperature_probs(sizes, 1e6), [0.5, 0.5], atol=1e-5)


def test_temperature_sampling_gives_the_expected_proportions():
    groups = np.array([0] * 100 + [1] * 900)
    sampler = DirectionSampler(groups, temperature=5.0, seed=3)
    p = temperature_probs([100, 900], 5.0)
    picked = sampler(0)
    counts = np.bincount(groups[picked], minlength=2)
    assert counts.tolist() == [round(1000 * p[0]), round(1000 * p[1])]
    assert counts[0] > 100  # the small direction is upsampled
    assert len(set(picked[groups[picked] == 1].tolist())) == counts[1]  # subsample: no repeats
    assert np.array_equal(sampler(0), picked)  # deterministic per epoch (exact resume)
    assert not np.array_equal(sampler(1), picked)
    every = DirectionSampler(groups, temperature=1.0, seed=3)(0)  # T = 1: each pair once
    assert sorted(every.tolist()) == list(range(1000))


def test_batches_mix_directions_and_follow_the_sampling():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(4), 50)  # four directions of 50 pairs
    src = rng.integers(3, 12, size=200)
    tgt = rng.integers(3, 12, size=200)
    select = DirectionSampler(groups, temperature=1.0, seed=0)
    sampler = TokenBucketSampler(src, tgt, max_tokens=120, seed=0, select=select)
    batches = sampler.batches(0)
    assert sorted(i for b in batches for i in b.tolist()) == list(range(200))
    mixed = [b for b in batches if len(set(groups[b].tolist())) > 1]
    assert len(mixed) >= len(batches) // 2  # batches are cut by length, not by direction
    for b in batches:  # the token budget holds for the selected pairs
        assert len(b) * max(src[b].max(), tgt[b].max()) <= 120 or len(b) == 1


def test_direction_split_files(tmp_path):
    text = tmp_path / "text"
    text.mkdir()
    (text / "val.en").write_text("a dog\n\nthe cat\n", encoding="utf-8")
    (text / "val.de").write_text("ein Hund\nleer\ndie Katze\n", encoding="utf-8")
    (text / "val.fr").write_text("un chien\nvide\nle chat\n", encoding="utf-8")
    out = tmp_path / "multi"
    dirs = [("en", "de"), ("de", "fr"), ("en", "fr")]
    assert write_directions_split(text, out, "val", dirs, limit=2) == [2, 2, 2]
    src = (out / "val.src").read_text(encoding="utf-8").split("\n")
    tgt = (out / "val.tgt").read_text(encoding="utf-8").split("\n")
    assert src[:6] == ["<2de> a dog", "", "<2fr> ein Hund", "<2fr> leer", "<2fr> a dog", ""]
    assert tgt[:6] == ["ein Hund", "leer", "un chien", "vide", "un chien", "vide"]
    assert read_direction_counts(out, "val") == [("en", "de", 2), ("de", "fr", 2), ("en", "fr", 2)]
    assert direction_of_lines(np.array([0, 1, 2, 5]), [2, 2, 2]).tolist() == [0, 0, 1, 2]
    before = (out / "val.src").stat().st_mtime_ns
    write_directions_split(text, out, "val", dirs, limit=2)  # same inputs: nothing rewritten
    assert (out / "val.src").stat().st_mtime_ns == before


# ---- a tagged model through every path --------------------------------------------------------


def _target(sentence: str, lang: str) -> str:
    return sentence if lang == "cp" else " ".join(reversed(sentence.split()))


@pytest.fixture(scope="module")
def tagged_model(tmp_path_factory, tagged_tokenizer) -> Path:
    """A tiny two-direction model (xx-cp copies, xx-rv reverses the words), trained with plain
    torch on tagged sources until the tag decides the output."""
    path = tmp_path_factory.mktemp("tagged") / "model"
    path.mkdir()
    for f in tagged_tokenizer.files:
        (path / f.name).write_bytes(f.read_bytes())
    tok = Tokenizer.load(path)
    cfg = load_config(
        None,
        [
            "model.d_model=48",
            "model.n_heads=2",
            "model.d_ff=96",
            "model.n_encoder_layers=2",
            "model.n_decoder_layers=1",
            "model.dropout=0.0",
            "model.max_positions=64",
            "data.pairs=[xx-cp, xx-rv]",
            "decoding.method=greedy",
        ],
    )
    torch.manual_seed(0)
    model = build_model(
        cfg.model, src_vocab_size=tok.src_vocab_size, tgt_vocab_size=tok.tgt_vocab_size, pad_id=0
    )
    sents = _sentences(400, 2)
    pairs = [(tag_source(s, t), _target(s, t)) for s in sents for t in ("cp", "rv")]
    src_ids = tok.encode_src([s for s, _ in pairs])
    tgt_ids = tok.encode_tgt([t for _, t in pairs])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    # decayed to zero at the last step: a settled model, not one caught mid-step (at a constant
    # rate, a change of float rounding anywhere upstream could leave a word uncopied)
    steps = 500
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / steps)
    gen = torch.Generator().manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            rows = torch.randint(len(pairs), (32,), generator=gen).tolist()
            s_w = max(len(src_ids[r]) for r in rows) + 1
            t_w = max(len(tgt_ids[r]) for r in rows) + 2
            src = torch.full((32, s_w), PAD_ID)
            tgt = torch.full((32, t_w), PAD_ID)
            for i, r in enumerate(rows):
                src[i, : len(src_ids[r]) + 1] = torch.tensor(src_ids[r] + [EOS_ID])
                tgt[i, : len(tgt_ids[r]) + 2] = torch.tensor([BOS_ID, *tgt_ids[r], EOS_ID])
            logits = model(src, tgt[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), tgt[:, 1:], ignore_index=PAD_ID
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            decay.step()
    finally:
        torch.set_num_threads(threads)
    save_model_dir(path, model.eval(), cfg)
    return path


TEST = ["red dog runs", "old cat sits", "green car"]


def test_the_tag_selects_the_output_language(tagged_model):
    tr = Translator.load(tagged_model)
    assert tr.multilingual and tr.directions == (("xx", "cp"), ("xx", "rv"))
    copies = tr.translate(TEST, target_lang="cp")
    reversals = tr.translate(TEST, source_lang="xx", target_lang="rv")
    assert copies == TEST
    right = [r == _target(s, "rv") for r, s in zip(reversals, TEST)]
    assert sum(right) >= 2, reversals
    assert tr.translate(["", "red dog"], target_lang="cp") == ["", "red dog"]  # blank: no tag


def test_translator_direction_errors(tagged_model):
    tr = Translator.load(tagged_model)
    with pytest.raises(UserError, match="does not translate xx-fr; the model translates xx-cp, "):
        tr.translate(TEST, target_lang="fr")
    with pytest.raises(UserError, match="give the target language"):
        tr.translate(TEST)
    tr.set_direction("xx", "rv")  # the command line's default for every call
    assert tr.translate(TEST[:1]) == [_target(TEST[0], "rv")]


def test_constraints_ensembles_and_scoring_with_tags(tagged_model, tmp_path):
    tr = Translator.load(tagged_model)
    out = tr.translate(["red dog runs"], target_lang="rv", constraints=[["park"]], method="beam")
    assert "park" in out[0].split()
    twice = Translator.load([tagged_model, tagged_model])  # members with the same directions
    assert twice.translate(TEST, target_lang="rv") == tr.translate(TEST, target_lang="rv")
    from seq2seq.decode import Scorer

    scorer = Scorer.load(tagged_model)
    scorer.set_direction(None, "rv")
    good = scorer.score(TEST, [_target(s, "rv") for s in TEST])
    scorer.set_direction(None, "cp")
    bad = scorer.score(TEST, [_target(s, "rv") for s in TEST])
    assert sum(s.log_prob for s in good) > sum(s.log_prob for s in bad)


def test_alignments_and_attention_maps_skip_the_tag(tagged_model):
    tr = Translator.load(tagged_model)
    (best,) = tr.translate_nbest(["red dog runs"], target_lang="cp", alignments=True)
    pairs = best[0].alignment
    assert {i for i, _ in pairs} <= {0, 1, 2}  # three source words, the tag is none of them
    assert (0, 0) in pairs  # a copy aligns the first word with the first word, not the tag
    from seq2seq.evaluate import attention_maps
    from seq2seq.model import load_model_dir

    loaded = load_model_dir(tagged_model)
    maps = attention_maps(loaded, "red dog runs", target_lang="cp")
    assert "<2cp>" not in maps.src_labels
    n = len(maps.src_labels)
    assert maps.cross.shape[1] == n and maps.encoder.shape == (n, n)
    assert maps.translation == "red dog runs"


@pytest.mark.parametrize("fmt", ["ctranslate2", "onnx"])
def test_an_export_of_a_tagged_model_translates_the_same(tagged_model, tmp_path, fmt):
    pytest.importorskip("ctranslate2" if fmt == "ctranslate2" else "onnxruntime")
    from seq2seq.export import export_model

    out = export_model(tagged_model, tmp_path / fmt, fmt=fmt)
    exported = Translator.load(out, engine=fmt, method="greedy")
    torch_tr = Translator.load(tagged_model, method="greedy")
    for lang in ("cp", "rv"):
        assert exported.translate(TEST, target_lang=lang) == torch_tr.translate(
            TEST, target_lang=lang
        )
    with pytest.raises(UserError, match="the model translates xx-cp, xx-rv"):
        exported.translate(TEST, target_lang="de")


def test_old_bilingual_model_directories_load_unchanged(tmp_path):
    from factories import make_model_dir

    model_dir = make_model_dir(tmp_path / "m")
    text = (model_dir / "config.yaml").read_text(encoding="utf-8")
    assert "pairs" in text  # a new dump; write it as an old one, without the new keys
    old = "".join(
        line + "\n"
        for line in text.splitlines()
        if not line.strip().startswith(("pairs:", "languages:", "sampling_temperature:"))
        and not line.strip().startswith("rdrop_alpha:")
    )
    (model_dir / "config.yaml").write_text(old, encoding="utf-8")
    from seq2seq.model.directory import write_manifest

    write_manifest(model_dir)
    tr = Translator.load(model_dir)
    assert not tr.multilingual
    lines = ["a man runs", "two dogs"]
    assert tr.tag(lines) is lines  # no tag: the sentences go in as they are
    assert tr.translate(lines) == tr.translate(lines, source_lang="en", target_lang="de")
    with pytest.raises(UserError, match="does not translate en-fr; the model translates en-de"):
        tr.translate(lines, target_lang="fr")


# ---- end to end through the CLI: training, per-direction validation, --target-lang --------------


def _cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", *args],
        capture_output=True,
        timeout=timeout,
        env=env,
        text=True,
    )


@pytest.mark.slow
def test_tiny_multilingual_model_end_to_end(tmp_path, mirror):
    out = tmp_path / "run"
    r = _cli(
        "train", "--config", str(REPO / "configs" / "multi30k_multi_quick.yaml"),
        "--out", str(out), "--mirror", str(mirror),
        "data.languages=[en, de, fr]", "data.max_train_pairs=150", "data.max_valid_pairs=6",
        "data.vocab_size=300", "data.max_tokens=600", "model.d_model=32", "model.d_ff=64",
        "model.n_encoder_layers=1", "model.n_decoder_layers=1", "model.n_heads=2",
        "training.max_steps=24", "training.val_every_steps=12", "training.save_every_steps=12",
        "training.warmup_steps=4", "training.expected_step_s=0", "training.threads=1",
        "training.average_last=1", "data.sampling_temperature=2.0", "decoding.beam_size=2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "BLEU per direction: en-de" in r.stdout + r.stderr
    (metrics,) = (out / "logs" / "csv").rglob("metrics.csv")
    with open(metrics, encoding="utf-8") as f:
        rows = [row for row in csv.DictReader(f) if row.get("val/bleu")]
    names = ["en-de", "en-fr", "de-en", "de-fr", "fr-en", "fr-de"]
    for row in rows:  # the logged BLEU is the mean of the six directions
        per = [float(row[f"val/bleu/{n}"]) for n in names]
        assert float(row["val/bleu"]) == pytest.approx(sum(per) / 6, abs=1e-4)
    assert rows
    cfg = load_config(out / "config.yaml")
    assert (
        cfg.data.directions == tuple(tuple(n.split("-")) for n in names[:0])
        or len(cfg.data.directions) == 6
    )  # the model directory records its directions
    tok = Tokenizer.load(out)
    assert tok.language_tags() == ["<2de>", "<2en>", "<2fr>"]
    src = tmp_path / "in.en"
    src.write_text("A dog runs.\nTwo men.\n", encoding="utf-8")
    ok = _cli("translate", str(out), "-i", str(src), "--target-lang", "fr", "--greedy")
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.splitlines()) == 2
    bad = _cli("translate", str(out), "-i", str(src), "--target-lang", "cs")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "seq2seq translate: error: the model does not translate ?-cs; the model translates "
        "en-de, en-fr, de-en, de-fr, fr-en, fr-de"
    ]
    none = _cli("translate", str(out), "-i", str(src))
    assert none.returncode == 2 and "give the target language" in none.stderr
    ev = _cli(
        "evaluate", str(out), "--src", str(src), "--ref", str(src), "--out-dir",
        str(tmp_path / "eval"), "--source-lang", "en", "--target-lang", "de", "--greedy",
    )  # fmt: skip
    assert ev.returncode == 0, ev.stderr
    sc = _cli("score", str(out), "--src", str(src), "--tgt", str(src), "--target-lang", "de")
    assert sc.returncode == 0, sc.stderr
    assert len(sc.stdout.splitlines()) == 2


def test_the_native_api_takes_source_lang_and_target_lang(tagged_model):
    from seq2seq.serve.app import create_app
    from seq2seq.serve.served_model import model_info

    translator = Translator.load(tagged_model)
    app = create_app(translator, info=model_info(translator, tagged_model, "torch"))

    async def main(client):
        post = client.post
        return (
            await post("/v1/translate", json={"text": TEST, "target_lang": "rv"}),
            await post("/v1/translate", json={"text": TEST[0], "target_lang": "cp"}),
            await post("/v1/translate", json={"text": TEST[0], "target_lang": "fr"}),
        )

    rv, cp, unknown = run_app(app, main)
    assert rv.status_code == 200 and cp.status_code == 200
    texts = [t["text"] for t in rv.json()["translations"]]
    assert texts == translator.translate(TEST, target_lang="rv")
    assert cp.json()["translations"][0]["text"] == TEST[0]
    assert unknown.status_code == 400
    assert (
        "served languages: xx, cp, rv; supported pairs: xx->cp, xx->rv" in unknown.json()["error"]
    )


def test_the_server_loads_a_multilingual_model_and_serves_every_direction(tagged_model):
    # The server's own loading path (its warm-up included), then LibreTranslate's routes.

    from seq2seq.serve.app import create_app
    from seq2seq.serve.batcher import engine_thread
    from seq2seq.serve.served_model import load_translator

    executor = engine_thread()
    translator, info = load_translator(
        tagged_model, engine="torch", device="cpu", search={}, executor=executor
    )
    app = create_app(translator, info=info, executor=executor)

    async def main(client):
        return (
            await client.get("/languages"),
            await client.post("/translate", json={"q": TEST[0], "source": "xx", "target": "rv"}),
            await client.post("/translate", json={"q": TEST[0], "source": "xx", "target": "cp"}),
        )

    try:
        languages, rv, cp = run_app(app, main)
    finally:
        executor.shutdown()
    targets = {x["code"]: sorted(x["targets"]) for x in languages.json()}
    assert targets == {"xx": ["cp", "rv"], "cp": [], "rv": []}  # every language, its targets
    assert rv.status_code == 200, rv.text
    assert rv.json()["translatedText"] == translator.translate([TEST[0]], target_lang="rv")[0]
    assert cp.json()["translatedText"] == TEST[0]
