"""TranslationModule pieces that need no Trainer: schedules, config checks, the loss, decoding."""

from __future__ import annotations

import io
import math

import pytest
import torch
from factories import make_model_dir, synthetic_pairs

from seq2seq.config.errors import ConfigError
from seq2seq.config.loading import config_from_dict, load_config
from seq2seq.core.errors import UserError
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.decode.translator import Translator
from seq2seq.model.directory import load_model_dir
from seq2seq.model.loss import label_smoothed_nll
from seq2seq.train.lr_schedule import lr_factor
from seq2seq.train.module import TranslationModule, check_training_config
from seq2seq.train.validation import monitor_mode

TINY = [
    "model.d_model=32",
    "model.n_heads=2",
    "model.d_ff=64",
    "model.n_encoder_layers=1",
    "model.n_decoder_layers=2",
    "model.dropout=0.0",
]


def test_inverse_sqrt_schedule_warms_up_linearly_then_decays():
    f = lr_factor("inverse_sqrt", warmup_steps=4, d_model=512)
    # f(k) is the factor of the (k+1)-th update
    assert [f(k) for k in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert f(15) == pytest.approx(math.sqrt(4 / 16))
    assert f(99) == pytest.approx(math.sqrt(4 / 100))
    assert max(f(k) for k in range(1000)) == pytest.approx(1.0)


def test_noam_and_constant_schedules():
    noam = lr_factor("noam", warmup_steps=10, d_model=64)
    for n in (1, 5, 10, 11, 400):
        assert noam(n - 1) == pytest.approx(64**-0.5 * min(n**-0.5, n * 10**-1.5))
    peak = max(range(1, 50), key=lambda n: noam(n - 1))
    assert peak == 10
    const = lr_factor("constant", warmup_steps=3, d_model=64)
    assert [const(k) for k in range(6)] == pytest.approx([1 / 3, 2 / 3, 1, 1, 1, 1])
    assert lr_factor("constant", warmup_steps=0, d_model=64)(0) == 1.0
    with pytest.raises(ConfigError, match="training.schedule"):
        lr_factor("exponential", warmup_steps=3, d_model=64)


def test_linear_and_cosine_schedules_warm_up_then_decay_to_min_lr_at_max_steps():
    lin = lr_factor("linear", warmup_steps=4, d_model=64, max_steps=14, min_ratio=0.1)
    # warmup over updates 1..4, then a line from 1 (update 4) to 0.1 (update 14), then flat
    assert [lin(n - 1) for n in (1, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    assert [lin(n - 1) for n in (5, 9, 14, 20)] == pytest.approx([0.91, 0.55, 0.1, 0.1])
    cos = lr_factor("cosine", warmup_steps=4, d_model=64, max_steps=14)
    assert [cos(n - 1) for n in (2, 4, 9, 14, 15)] == pytest.approx([0.5, 1.0, 0.5, 0.0, 0.0])
    assert cos(5) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.2)))  # update 6
    values = [cos(k) for k in range(3, 14)]
    assert values == sorted(values, reverse=True)  # decays monotonically after warmup
    no_warmup = lr_factor("linear", warmup_steps=0, d_model=64, max_steps=10)
    assert [no_warmup(k) for k in (0, 4, 9)] == pytest.approx([0.9, 0.5, 0.0])
    with pytest.raises(ConfigError, match="max_steps"):
        lr_factor("cosine", warmup_steps=10, d_model=64, max_steps=10)


def test_the_optimizer_follows_a_cosine_schedule():
    cfg = load_config(
        None,
        [*TINY, "training.schedule=cosine", "training.lr=0.01", "training.min_lr=0.001",
         "training.warmup_steps=2", "training.max_steps=6"],
    )  # fmt: skip
    check_training_config(cfg)
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(7):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    mid = 0.001 + 0.009 * 0.5 * (1 + math.cos(math.pi * 0.5))
    assert lrs[:2] == pytest.approx([0.005, 0.01]) and lrs[3] == pytest.approx(mid)
    assert lrs[5:] == pytest.approx([0.001, 0.001])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("training.precision=fp8", "training.precision"),
        ("training.val_metric=ter", "training.val_metric"),
        ("training.val_method=sample", "training.val_method"),
        ("training.schedule=exponential", "training.schedule"),
        ("training.schedule=cosine training.max_steps=0 training.max_epochs=2", "max_steps"),
        ("training.schedule=linear training.warmup_steps=10000", "training.warmup_steps"),
        ("training.min_lr=0.1", "training.min_lr"),
        ("training.average_last=9", "training.average_last"),
        ("training.val_every_steps=0", "training.val_every_steps"),
        ("training.lr=-1", "training.lr"),
        ("training.label_smoothing=1.0", "training.label_smoothing"),
    ],
)
def test_bad_training_options_are_config_errors_naming_the_key(override, key):
    cfg = load_config(None, override.split())
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        check_training_config(cfg)


def test_defaults_pass_and_monitor_modes():
    check_training_config(load_config(None))
    assert monitor_mode("bleu") == "max" and monitor_mode("chrf") == "max"
    assert monitor_mode("loss") == "min"


def _batch(vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src_lens, tgt_lens = [7, 3, 5], [4, 6, 2]
    src = torch.full((3, 8), PAD_ID)
    tgt = torch.full((3, 8), PAD_ID)
    for i, (s, t) in enumerate(zip(src_lens, tgt_lens)):
        src[i, :s] = torch.randint(4, vocab, (s,), generator=g)
        src[i, s] = EOS_ID
        tgt[i, 0] = BOS_ID
        tgt[i, 1 : t + 1] = torch.randint(4, vocab, (t,), generator=g)
        tgt[i, t + 1] = EOS_ID
    return src, tgt


def test_loss_on_non_pad_positions_equals_the_full_loss():
    cfg = load_config(None, [*TINY, "training.label_smoothing=0.1"])
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    src, tgt = _batch(50)
    out = module.compute_loss(src, tgt)
    logits = module.model(src, tgt[:, :-1])  # (B, T, V): projection of every position
    ref = label_smoothed_nll(logits, tgt[:, 1:], epsilon=0.1, ignore_index=PAD_ID)
    assert out.n_tokens == ref.n_tokens == int(tgt[:, 1:].ne(PAD_ID).sum()) == 4 + 6 + 2 + 3
    torch.testing.assert_close(out.loss, ref.loss)
    torch.testing.assert_close(out.nll, ref.nll)
    # the gradients agree too
    g1 = torch.autograd.grad(out.loss, module.model.output_proj.weight)[0]
    logits = module.model(src, tgt[:, :-1])
    ref = label_smoothed_nll(logits, tgt[:, 1:], epsilon=0.1, ignore_index=PAD_ID)
    g2 = torch.autograd.grad(ref.loss, module.model.output_proj.weight)[0]
    torch.testing.assert_close(g1, g2)


def test_optimizer_schedule_and_weight_decay_groups():
    cfg = load_config(
        None,
        [
            *TINY,
            "training.lr=0.002",
            "training.warmup_steps=4",
            "training.weight_decay=0.01",
            "training.betas=[0.9, 0.997]",
        ],
    )
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    assert conf["lr_scheduler"]["interval"] == "step"
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(
        p.dim() < 2 for p in plain["params"]
    )
    n_params = len({id(p) for p in module.model.parameters()})
    assert len(decayed["params"]) + len(plain["params"]) == n_params  # tied weights once
    assert opt.defaults["betas"] == (0.9, 0.997)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx(
        [0.0005, 0.001, 0.0015, 0.002, 0.002 * math.sqrt(4 / 5), 0.002 * math.sqrt(4 / 6)]
    )


def test_checkpoint_state_is_plain_and_loads_with_weights_only():
    cfg = load_config(None, TINY)
    module = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    module.data_position = (2, 17)
    ckpt = {"state_dict": module.state_dict()}
    module.on_save_checkpoint(ckpt)
    buf = io.BytesIO()
    torch.save(ckpt, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    state = loaded["seq2seq"]
    assert config_from_dict(state["config"]) == cfg
    assert (state["data_epoch"], state["data_batches"]) == (2, 17)
    other = TranslationModule(cfg=cfg, src_vocab_size=50, tgt_vocab_size=50)
    other.on_load_checkpoint(loaded)
    assert other.resume_position == (2, 17)
    changed = TranslationModule(
        cfg=load_config(None, [*TINY, "model.d_ff=128"]), src_vocab_size=50, tgt_vocab_size=50
    )
    with pytest.raises(UserError, match=r"model\.d_ff \(64 -> 128\)"):
        changed.on_load_checkpoint(loaded)


def test_validation_decoding_matches_the_translator(tmp_path):
    """The module's BLEU decode is the inference path: same greedy output as Translator."""
    model_dir = make_model_dir(tmp_path / "m", train_steps=150)
    loaded = load_model_dir(model_dir)
    cfg = loaded.cfg
    module = TranslationModule(
        cfg=cfg,
        src_vocab_size=loaded.tokenizer.src_vocab_size,
        tgt_vocab_size=loaded.tokenizer.tgt_vocab_size,
    )
    module.model.load_state_dict(loaded.model.state_dict())
    module.tokenizer = loaded.tokenizer
    module.eval()
    sentences = [s for s, _ in synthetic_pairs(6, seed=5)]
    pieces = loaded.tokenizer.encode_src(sentences)
    width = max(len(p) for p in pieces) + 1
    src = torch.full((len(pieces), width), PAD_ID)
    for i, p in enumerate(pieces):
        src[i, : len(p) + 1] = torch.tensor(p + [EOS_ID])
    ours = module.translate_batch(src)
    theirs = Translator.load(model_dir, method="greedy").translate(sentences)
    assert ours == theirs
    assert sum(a == b for a, b in zip(ours, sentences)) >= 3  # the copy model mostly copies
