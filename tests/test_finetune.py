"""`seq2seq train --init-from`: the parent's weights, vocabulary and shape; fresh optimizer."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from factories import WORDS, make_model_dir

from seq2seq.cli import main
from seq2seq.config.errors import ConfigError
from seq2seq.config.loading import dump_config, load_config
from seq2seq.data.datamodule import TranslationDataModule
from seq2seq.model.directory import ModelDirError, load_model_dir, verify_model_dir
from seq2seq.train.finetune import read_parent
from seq2seq.train.module import TranslationModule
from seq2seq.train.run_config import resolve_config
from seq2seq.train.trainer import train


def write_corpus(directory: Path, *, seed: int = 5) -> Path:
    """New data for the fine-tuning run: a copy task over the parent's words."""
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 120), ("valid", 12)):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
        text = "".join(line + "\n" for line in lines)
        (directory / f"{split}.src").write_text(text, encoding="utf-8")
        (directory / f"{split}.tgt").write_text(text, encoding="utf-8")
    return directory


def ft_overrides(data: Path, **training: object) -> list[str]:
    base = [
        "data.pair=src-tgt",
        f"data.train_prefix={data}/train",
        f"data.valid_prefix={data}/valid",
        "data.max_tokens=200",
        "training.lr=0.001",
        "training.warmup_steps=1",
        "training.max_steps=2",
        "training.val_every_steps=2",
        "training.log_every_steps=1",
        "training.accelerator=cpu",
        "training.devices=1",
        "training.threads=1",
        "training.keep_last=1",
        "training.average_last=1",
        "training.val_method=greedy",
    ]
    return base + [f"training.{k}={v}" for k, v in training.items()]


def first_losses(run: Path) -> dict[int, float]:
    out = {}
    for version in sorted((run / "logs" / "csv").glob("version_*")):
        with open(version / "metrics.csv", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                if row.get("train/loss"):
                    out[int(row["step"])] = float(row["train/loss"])
    return out


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("ft") / "parent", train_steps=150)


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_first_loss_is_the_parents_and_the_vocabulary_is_byte_identical(parent, tmp_path):
    data = write_corpus(tmp_path / "data")
    out = tmp_path / "child"
    cfg = resolve_config(out, resume=False, overrides=ft_overrides(data), init_from=parent)
    parent_cfg = load_config(parent / "config.yaml")
    assert cfg.model == parent_cfg.model and cfg.training.init_from == str(parent.resolve())
    train(cfg, out, progress=False)

    assert (out / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    record = read_parent(out)
    assert record == {
        "path": str(parent.resolve()),
        "manifest_sha256": json.loads((parent / "manifest.json").read_text())["sha256"],
    }
    assert "parent.json" in verify_model_dir(out)["files"]  # covered by the child's manifest
    assert load_model_dir(out).cfg.training.init_from == str(parent.resolve())

    # The first logged loss (update 1, before any step) is the parent's loss on that batch.
    dm = TranslationDataModule(cfg, out)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    loaded = load_model_dir(parent)
    module = TranslationModule(
        cfg=cfg,
        src_vocab_size=loaded.tokenizer.src_vocab_size,
        tgt_vocab_size=loaded.tokenizer.tgt_vocab_size,
    )
    module.model.load_state_dict(loaded.model.state_dict())
    module.model.eval()  # parent dropout is 0 (adopted); eval only to be explicit
    with torch.no_grad():
        want = module.compute_loss(batch.src_ids, batch.tgt_ids)
    losses = first_losses(out)
    assert losses[0] == pytest.approx(float(want.loss) / want.n_tokens, rel=1e-5)
    # and the run did train: the second update's loss is another batch's, weights moved
    child = load_model_dir(out).model.state_dict()
    moved = any(not torch.equal(child[k], v) for k, v in loaded.model.state_dict().items())
    assert moved


def test_a_conflicting_model_key_is_a_one_line_error_naming_it(parent, tmp_path, capsys):
    data = write_corpus(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"model\.d_model is 64, but --init-from .* has 32"):
        resolve_config(
            tmp_path / "x",
            resume=False,
            overrides=[*ft_overrides(data), "model.d_model=64"],
            init_from=parent,
        )
    # A config file: keys it leaves out are the parent's; keys it sets must agree.
    yaml_path = tmp_path / "ft.yaml"
    yaml_path.write_text("model:\n  dropout: 0.3\ntraining:\n  lr: 0.0001\n", encoding="utf-8")
    cfg = resolve_config(
        tmp_path / "y", resume=False, config_path=yaml_path, overrides=[], init_from=parent
    )
    assert cfg.model.d_model == 32 and cfg.model.dropout == 0.3 and cfg.training.lr == 1e-4
    yaml_path.write_text("model:\n  n_heads: 4\n", encoding="utf-8")
    argv = ["train", "--config", str(yaml_path), "--init-from", str(parent)]
    assert main([*argv, "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.n_heads is 4" in err
    # A config that names the parent in training.init_from works like --init-from.
    yaml_path.write_text(f"training:\n  init_from: {parent}\n", encoding="utf-8")
    cfg = resolve_config(tmp_path / "w", resume=False, config_path=yaml_path, overrides=[])
    assert cfg.model.d_model == 32 and cfg.data.spm_model == str(parent.resolve())


def test_an_incompatible_or_missing_parent_is_a_clear_error(parent, tmp_path, capsys):
    data = write_corpus(tmp_path / "data")
    with pytest.raises(ModelDirError, match="not found"):
        resolve_config(tmp_path / "x", resume=False, overrides=[], init_from=tmp_path / "nope")
    with pytest.raises(ConfigError, match="data.joint_vocab"):
        resolve_config(
            tmp_path / "x",
            resume=False,
            overrides=[*ft_overrides(data), "data.joint_vocab=false"],
            init_from=parent,
        )
    # A parent whose weights do not fit its own config (altered behind the manifest's back
    # is caught by the manifest; here a run config that skipped the resolution).
    cfg = load_config(None, [*ft_overrides(data), f"training.init_from={parent}"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.yaml").write_text(dump_config(cfg), encoding="utf-8")
    with pytest.raises(Exception, match="do not fit"):
        train(cfg, tmp_path / "bad", progress=False)
    rc = main(["train", "--init-from", str(parent), "--resume", str(tmp_path / "bad")])
    assert rc == 2
    assert "not both" in capsys.readouterr().err


def _start_module(start_is_eos: bool, bias: bool) -> TranslationModule:
    from dataclasses import replace

    from seq2seq.config import ExperimentConfig, ModelConfig

    model = ModelConfig(
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        dropout=0.0,
        final_logits_bias=bias,
        start_is_eos=start_is_eos,
    )
    torch.manual_seed(0)
    return TranslationModule(
        cfg=replace(ExperimentConfig(), model=model), src_vocab_size=20, tgt_vocab_size=20
    )


@pytest.mark.parametrize("bias", [False, True], ids=["fused-loss", "output-bias"])
def test_with_start_is_eos_the_start_row_takes_no_gradient(bias):
    """``model.start_is_eos`` (what ``convert m2m100`` sets): the start id reads the ``</s>``
    row, and its own row takes no gradient, neither as the decoder's input nor through the
    output (the label-smoothed loss spreads mass on every class), in the training module's
    loss, fused on the CPU (no output bias) or not; without the option it takes one."""
    from seq2seq.data import BOS_ID, EOS_ID

    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 0]])
    tgt = torch.tensor([[BOS_ID, 10, 11, 12, EOS_ID], [BOS_ID, 13, 14, EOS_ID, 0]])
    for start_is_eos in (False, True):
        module = _start_module(start_is_eos, bias)
        module.compute_loss(src, tgt).loss.backward()
        grad = module.model.decoder.embedding.weight.grad
        assert bool(grad[EOS_ID].abs().gt(0).any())
        assert bool(grad[BOS_ID].abs().gt(0).any()) is not start_is_eos, start_is_eos


def test_start_is_eos_is_exactly_the_eos_row_as_the_start():
    """The option changes nothing but the start's row: its log-probabilities, teacher-forced
    and step by step with the KV cache, are bit for bit those of the same model without it
    whose ``<s>`` row is a copy of ``</s>`` (a converted M2M100's), the start's own column
    (never a candidate) aside."""
    from seq2seq.data import BOS_ID, EOS_ID
    from seq2seq.model import START_BIAS

    plain, flagged = _start_module(False, True).model.eval(), _start_module(True, True).model
    flagged.eval()
    with torch.no_grad():
        plain.final_logits_bias[BOS_ID] = START_BIAS  # as conversion writes it
        flagged.load_state_dict(plain.state_dict())
        flagged.decoder.embedding.weight[BOS_ID] += 1.0  # unused: the start reads </s>
        plain.decoder.embedding.weight[BOS_ID] = plain.decoder.embedding.weight[EOS_ID]
    others = torch.arange(20) != BOS_ID
    src = torch.tensor([[5, 6, 7, EOS_ID], [8, 9, EOS_ID, 0]])
    tgt_in = torch.tensor([[BOS_ID, 10, 11, 12], [BOS_ID, 13, 14, 15]])
    with torch.no_grad():
        want = plain(src, tgt_in).log_softmax(-1)[..., others]
        assert torch.equal(flagged(src, tgt_in).log_softmax(-1)[..., others], want)
        states = [plain.start_state(src), flagged.start_state(src)]
        for t in range(1, tgt_in.size(1) + 1):
            steps = [m.decode_step(tgt_in[:, :t], s) for m, s in zip((plain, flagged), states)]
            states = [s for _, s in steps]
            assert torch.equal(steps[1][0][:, others], steps[0][0][:, others]), t
            assert float(steps[1][0][:, BOS_ID].max()) < -1e3  # never a candidate
