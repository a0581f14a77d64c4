"""Reliability of training, fine-tuning, averaging and loading (issue 34, causes 1, 2 and 9):
a fine-tuned model directory needs nothing outside it; a stop signal that lands while weights
load is reported as the signal; empty or blank input is a one-line error before any work; a
run prints our lines, not Lightning's; averages are byte-identical; ``data.max_len`` fits
``model.max_positions`` and over-long validation pairs are dropped like training ones."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from factories import make_model_dir
from test_finetune import ft_overrides, write_corpus
from test_own_files import _cfg, _pairs, _prefix, _tsv
from test_train import overrides, write_copy_corpus

from seq2seq.cli import main
from seq2seq.config.errors import InvalidValue
from seq2seq.config.loading import load_config
from seq2seq.core.errors import UserError
from seq2seq.core.signals import Stopped
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.data.tokenizer import ensure_tokenizer
from seq2seq.model import directory as model_directory
from seq2seq.model.directory import load_model_dir, state_dict_for_saving

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _err_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


# ---- 1. a fine-tuned model directory is self-contained ------------------------------------


@pytest.mark.slow
def test_a_fine_tuned_model_resumes_and_translates_after_its_parent_moves_or_is_replaced(
    tmp_path,
):
    parent = make_model_dir(tmp_path / "parent")
    parent_spm = (parent / "spm.model").read_bytes()
    data = write_corpus(tmp_path / "data")
    ft = tmp_path / "ft"
    assert main(["train", "--init-from", str(parent), "--out", str(ft), *ft_overrides(data)]) == 0
    before = load_model_dir(ft)

    # the parent moves away: resume and translate FT as before
    shutil.move(str(parent), str(tmp_path / "moved"))
    assert main(["train", "--resume", str(ft), "training.max_steps=4"]) == 0
    # another model, with another SentencePiece model, now sits at the parent's path
    make_model_dir(parent, cfg_overrides=("data.vocab_size=90",), seed=7)
    assert (parent / "spm.model").read_bytes() != parent_spm
    assert main(["train", "--resume", str(ft), "training.max_steps=6"]) == 0

    assert (ft / "spm.model").read_bytes() == parent_spm  # still the original parent's
    after = load_model_dir(ft)
    assert after.tokenizer.fingerprint() == before.tokenizer.fingerprint()
    assert int(after.cfg.training.max_steps) == 6  # it did resume and train on
    out = tmp_path / "hyp.txt"
    (tmp_path / "src.txt").write_text("a man runs\nthe dog\n", encoding="utf-8")
    argv = ["translate", str(ft), "-i", str(tmp_path / "src.txt"), "-o", str(out), "--greedy"]
    assert main(argv) == 0
    assert out.read_text(encoding="utf-8").count("\n") == 2


def test_resume_reads_only_the_runs_own_sentencepiece_model(tmp_path):
    train = _tsv(tmp_path / "train.tsv", _pairs(100))
    elsewhere = make_model_dir(tmp_path / "elsewhere")
    cfg = _cfg(tmp_path, train_prefix=str(train), valid_prefix=str(train))
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, spm_model=str(elsewhere)))
    run = tmp_path / "run"
    dm = TranslationDataModule(cfg, run, resume=True)
    assert dm.input_files() == [
        ("data.train_prefix file", train),
        ("data.valid_prefix file", train),
    ]
    with pytest.raises(UserError, match=r"run/spm\.model is missing: --resume continues with"):
        dm.prepare_data()
    assert not (run / "spm.model").exists()  # not taken from data.spm_model behind its back


def test_a_tokenizer_refusal_never_advises_deleting_it(tmp_path):
    """The refusal used to say 'remove it' of a model directory's spm.model, which destroys a
    finished model; it names a way out that loses nothing."""
    mine = make_model_dir(tmp_path / "mine")
    theirs = make_model_dir(tmp_path / "theirs", cfg_overrides=("data.vocab_size=90",), seed=7)
    text = tmp_path / "t.txt"
    text.write_text("a b\n", encoding="utf-8")
    with pytest.raises(UserError, match="use a new --out directory") as e:
        ensure_tokenizer(mine, text, text, spm_model=theirs)
    assert "remove" not in str(e.value) and "delete" not in str(e.value)
    with pytest.raises(UserError, match="already exists and was trained with") as e:
        ensure_tokenizer(mine, text, text, vocab_size=50)
    assert "remove" not in str(e.value) and "delete" not in str(e.value)


# ---- 2. a stop signal while weights load ---------------------------------------------------


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("rel") / "model")


def _run_with_checkpoints(path: Path) -> Path:
    """A model directory with two periodic checkpoints of perturbed weights (`average`'s input)."""
    run = make_model_dir(path)
    loaded = load_model_dir(run).model
    (run / "checkpoints").mkdir()
    for i, step in enumerate((10, 20)):
        m = copy.deepcopy(loaded)
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        state = {"model." + k: v for k, v in m.state_dict().items()}
        torch.save(
            {"state_dict": state, "global_step": step},
            run / "checkpoints" / f"step{step:08d}.ckpt",
        )
    return run


def _signal_inside_load(monkeypatch, signum: int, *, on_call: int) -> list[int]:
    """Send ``signum`` to this process while the ``on_call``-th load of weights (a model
    directory's, read in place, or torch's ``load_state_dict``, which catches ``Exception``)
    reads or copies its first tensor."""
    calls = [0]
    armed = [False]
    load_state_dict, copy_ = torch.nn.Module.load_state_dict, torch.Tensor.copy_
    copy_weights = model_directory._copy_weights

    def counting(load):
        def counted(*args, **kwargs):
            calls[0] += 1
            armed[0] = calls[0] == on_call
            try:
                return load(*args, **kwargs)
            finally:
                armed[0] = False

        return counted

    def copy_with_signal(self, *args, **kwargs):
        if armed[0]:
            armed[0] = False
            signal.pthread_kill(threading.get_ident(), signum)  # the handler runs here
        return copy_(self, *args, **kwargs)

    from seq2seq.model import tensor_files

    read = tensor_files.SafetensorsReader.read

    def read_with_signal(self, *args, **kwargs):  # a model directory's tensors, read in place
        if armed[0]:
            armed[0] = False
            signal.pthread_kill(threading.get_ident(), signum)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", counting(load_state_dict))
    monkeypatch.setattr(model_directory, "_copy_weights", counting(copy_weights))
    monkeypatch.setattr(torch.Tensor, "copy_", copy_with_signal)
    monkeypatch.setattr(tensor_files.SafetensorsReader, "read", read_with_signal)
    return calls


def test_stopped_is_not_an_exception_that_except_exception_swallows():
    assert issubclass(Stopped, BaseException) and not issubclass(Stopped, Exception)


@pytest.mark.parametrize(
    ("command", "signum"),
    [
        ("average", signal.SIGTERM),
        ("average", signal.SIGINT),
        ("translate", signal.SIGTERM),
        ("score", signal.SIGTERM),
        ("init-from", signal.SIGTERM),
    ],
)
def test_a_signal_while_weights_load_is_reported_as_the_signal(
    command, signum, model, tmp_path, monkeypatch, capsys
):
    text = tmp_path / "text.txt"
    text.write_text("a man runs\n", encoding="utf-8")
    out = tmp_path / "out"
    on_call = 1
    if command == "average":
        argv = ["average", str(_run_with_checkpoints(tmp_path / "run")), "-n", "2"]
        argv += ["--out", str(out)]
    elif command == "translate":
        argv = ["translate", str(model), "-i", str(text), "-o", str(out)]
    elif command == "score":
        argv = ["score", str(model), "--src", str(text), "--tgt", str(text), "-o", str(out)]
    else:  # the second load: the parent's weights into the new run's model
        data = write_corpus(tmp_path / "data")
        argv = ["train", "--init-from", str(model), "--out", str(out), *ft_overrides(data)]
        on_call = 2
    calls = _signal_inside_load(monkeypatch, signum, on_call=on_call)
    # A command starts with Python's SIGINT handler; the test process may not have it: started
    # as a background job of a shell without job control (`cmd &` in a script, as CI runners
    # and nohup launches do), Python inherits SIGINT ignored and keeps it so.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = main(argv)
    finally:
        signal.signal(signal.SIGINT, previous)
    err = _err_lines(capsys)
    assert calls[0] == on_call  # the signal came from that load, which went no further
    assert rc == 128 + signum, err
    name = "train" if command == "init-from" else command
    assert err[-1].startswith(f"seq2seq {name}: stopped by {signal.Signals(signum).name}"), err
    assert not any("does not fit" in line or "Traceback" in line for line in err), err
    if command != "init-from":
        assert not out.exists()


# ---- 9. one-line errors before any work -----------------------------------------------------


def test_score_of_empty_files_is_a_one_line_error(model, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "scores.txt"
    argv = ["score", str(model), "--src", str(empty), "--tgt", str(empty), "-o", str(out)]
    assert main(argv) == 2
    err = _err_lines(capsys)
    assert err == [
        f"seq2seq score: error: {empty} and {empty} are empty: no sentence pairs to score"
    ]
    assert not out.exists()


@pytest.mark.parametrize("splits", [",", "", " , "])
def test_prepare_with_no_split_named_is_a_one_line_error(splits, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["prepare", "multi30k", "--splits", splits, "--out", str(out)]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("seq2seq prepare: error: no multi30k split named")
    assert not out.exists()


def test_a_validation_tsv_of_blank_lines_fails_before_any_work_naming_it(tmp_path):
    train = _tsv(tmp_path / "train.tsv", _pairs(100))
    valid = tmp_path / "valid.tsv"
    valid.write_text("\n \t \n\t\n", encoding="utf-8")
    cfg = _cfg(tmp_path, train_prefix=str(train), valid_prefix=str(valid))
    run = tmp_path / "run"
    dm = TranslationDataModule(cfg, run)
    with pytest.raises(UserError) as e:
        dm.prepare_data()
    assert str(e.value) == (
        f"{valid}: no sentence pairs for the valid split: lines 1-3 are all blank or have an "
        "empty side"
    )
    # before SentencePiece and the stores
    assert not (run / "spm.model").exists() and not (run / "data" / "train").exists()


def test_data_max_len_must_fit_model_max_positions(tmp_path, capsys):
    cfg = load_config(None, ["model.max_positions=64"])
    with pytest.raises(InvalidValue, match=r"data\.max_len is 256, but model\.max_positions 64"):
        cfg.validate_training()
    load_config(None, ["model.max_positions=64", "data.max_len=63"]).validate_training()
    data = write_copy_corpus(tmp_path / "data")
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("model:\n  max_positions: 64\n", encoding="utf-8")
    argv = ["train", "--config", str(cfg_file), "--out", str(tmp_path / "run")]
    argv += [o for o in overrides(data) if not o.startswith("data.max_len")]
    assert main(argv) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and "set data.max_len to 63 or less" in err[0], err
    assert not (tmp_path / "run").exists()


def test_validation_pairs_the_model_cannot_hold_are_dropped_as_too_long(tmp_path, capsys):
    pairs = _pairs(60, 300)
    fits = ("der " * 15, "der " * 15)  # over data.max_len, within model.max_positions: kept
    long = ("der " * 30, "der " * 30)  # over model.max_positions - 1: dropped
    valid = _prefix(tmp_path / "valid", [pairs[0], long, fits, *pairs[1:]])
    train = _tsv(tmp_path / "train.tsv", _pairs(200))
    cfg = _cfg(tmp_path, train_prefix=str(train), valid_prefix=str(valid), max_len=40)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, max_positions=64))
    dm = TranslationDataModule(cfg, tmp_path / "run")
    dm.prepare_data()
    dm.setup("fit")
    pieces = [len(ids) for ids in dm.tokenizer.encode_src([fits[0], long[0]])]
    assert 40 < pieces[0] <= 63 < pieces[1]  # (what the pairs are for)
    err = capsys.readouterr().err
    assert "valid: kept 61 of 62 sentence pairs (dropped 0 empty, 1 too long" in err
    assert dm.valid_store.lines.tolist() == [0, *range(2, 62)]
    kept = [pairs[0], (fits[0].strip(), fits[1].strip()), *pairs[1:]]
    assert dm.valid_src_text == [s for s, _ in kept] and dm.valid_ref_text == [t for _, t in kept]
    assert int(dm.valid_store.src_lens.max()) <= 63 and int(dm.valid_store.tgt_lens.max()) <= 63


# ---- 9. a run prints our lines, not Lightning's ----------------------------------------------


def _train_process(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SEQ2SEQ_DEBUG", None)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("{}\n", encoding="utf-8")
    argv = [sys.executable, "-m", "seq2seq.cli", "train", "--config", str(cfg_file), *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


LIGHTNING_CHATTER = ("GPU available", "TPU available", "litlogger", "Tip:", "Trainable params",
                     "Trainer.fit", "┏")  # fmt: skip


@pytest.mark.slow
def test_a_run_prints_our_lines_and_its_errors_come_first(tmp_path):
    data = write_copy_corpus(tmp_path / "data", n_train=200, n_valid=8)
    with open(data / "valid.src", "a", encoding="utf-8") as f:  # one validation pair too long
        f.write("a " * 100 + "\n")
    with open(data / "valid.tgt", "a", encoding="utf-8") as f:
        f.write("a " * 100 + "\n")
    run = tmp_path / "run"
    done = _train_process(
        tmp_path, "--out", str(run), *overrides(data, max_steps=2, val_every_steps=2)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert not [line for line in lines if any(c in line for c in LIGHTNING_CHATTER)], lines
    assert any(line.startswith("val: kept 8 of 9 sentence pairs") for line in lines), lines
    assert any(line.startswith("model: ") and line.endswith(" parameters") for line in lines)
    assert "training ended at step 2: training.max_steps (2) reached" in lines

    blank = tmp_path / "blank.tsv"
    blank.write_text("\n\n", encoding="utf-8")
    argv = [o for o in overrides(data, max_steps=2) if not o.startswith("data.valid_prefix")]
    done = _train_process(tmp_path, "--out", str(tmp_path / "x"), *argv,
                          f"data.valid_prefix={blank}")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"seq2seq train: error: {blank}: no sentence pairs for the val split: lines 1-2 are all "
        "blank or have an empty side"
    ]


# ---- 9. averages are byte-identical ------------------------------------------------------------


def _header(path: Path) -> bytes:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return data[8 : 8 + n]


def test_two_averages_of_the_same_checkpoints_are_the_same_bytes(tmp_path):
    run = _run_with_checkpoints(tmp_path / "run")
    outs = [tmp_path / f"avg{i}" for i in range(4)]
    for out in outs:
        assert main(["average", str(run), "-n", "2", "--out", str(out)]) == 0
    for name in ("model.safetensors", "manifest.json", "config.yaml", "spm.model"):
        assert len({(out / name).read_bytes() for out in outs}) == 1, name
    # the header is canonical JSON (safetensors writes its metadata in hash-map order)
    header = _header(outs[0] / "model.safetensors")
    parsed = json.loads(header)
    assert parsed["__metadata__"] == {"format": "seq2seq-model", "version": "1"}
    assert header.rstrip(b" ") == json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()
    assert len(header) % 8 == 0
    # and the weights read back as they were
    loaded = state_dict_for_saving(load_model_dir(outs[0]).model)
    assert loaded.keys() == state_dict_for_saving(load_model_dir(outs[1]).model).keys()
    weights = [tmp_path / f"w{i}.safetensors" for i in range(2)]
    for path in weights:
        assert main(["average", str(run), "-n", "2", "--out", str(path)]) == 0
    assert weights[0].read_bytes() == weights[1].read_bytes()
