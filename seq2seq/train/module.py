"""TranslationModule: the Lightning "system" around the Seq2SeqTransformer.

It owns what training adds to the model: the label-smoothed loss (computed on the non-padding
target positions only), AdamW with a per-update learning-rate schedule
(:mod:`seq2seq.train.lr_schedule`), the guard against non-finite losses, per-step metrics, the
state a checkpoint adds, and validation (:mod:`seq2seq.train.validation`).

Normalization (as in fairseq): each micro-batch's backward runs on its *summed* token losses,
and before the update the accumulated gradient is divided by the target tokens of the whole
update, over all ``training.accumulate`` micro-batches and all DDP ranks. Micro-batches and ranks
of unequal size weigh by their tokens, and ``accumulate=2`` over batches A and B gives the
gradient of one update over A and B together.

Exactness on resume: the random state of every training batch (dropout) is reseeded from
``(training.seed, epoch, batch index, rank)`` before the batch runs, so a run resumed from a
checkpoint draws the same dropout masks as an uninterrupted one, whatever ran in between
(validation, a restart) and without storing per-rank generator states.
"""

from __future__ import annotations

import hashlib
import math
import time

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from torch import Tensor

from seq2seq.config import (
    ConfigError,
    ExperimentConfig,
    TrainingConfig,
    config_to_dict,
    model_data_changes,
)
from seq2seq.core import UserError, keep_freed_memory
from seq2seq.data import PAD_ID
from seq2seq.model import (
    LossOutput,
    Seq2SeqTransformer,
    build_model,
    label_smoothed_nll,
    projected_label_smoothed_nll,
    projected_rdrop_loss,
    rdrop_loss,
    token_cutoff,
)
from seq2seq.train.checkpoints import CHECKPOINT_KEY
from seq2seq.train.distributed import world_size
from seq2seq.train.lr_schedule import DECAYING, SCHEDULES, lr_factor
from seq2seq.train.validation import VAL_METHODS, VAL_METRICS, ValidationMixin

__all__ = ["TrainingDiverged", "TranslationModule", "check_training_config"]

PRECISIONS = ("32", "bf16-mixed", "16-mixed", "auto", "bf16-native")  # seq2seq/train/precision.py


class TrainingDiverged(UserError):
    """The loss stayed non-finite for ``training.max_nonfinite`` updates in a row."""


def check_training_config(cfg: ExperimentConfig) -> None:
    """Reject training options that cannot work, naming the key (before anything runs).

    Raises:
        ConfigError: an unknown schedule, precision, validation metric or method, or a
            count that must be positive.
    """
    t = cfg.training

    def choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
        if value not in allowed:
            raise ConfigError(f"training.{key} is {value!r}; expected one of {', '.join(allowed)}")

    choice("schedule", t.schedule, SCHEDULES)
    choice("precision", t.precision, PRECISIONS)
    choice("val_metric", t.val_metric, VAL_METRICS)
    choice("val_method", t.val_method, VAL_METHODS)
    for key in ("val_every_steps", "accumulate", "keep_last", "average_last", "log_every_steps"):
        if getattr(t, key) < 1:
            raise ConfigError(f"training.{key} must be >= 1, got {getattr(t, key)}")
    for key in ("warmup_steps", "save_every_steps", "patience", "max_nonfinite", "threads"):
        if getattr(t, key) < 0:
            raise ConfigError(f"training.{key} must be >= 0, got {getattr(t, key)}")
    if t.average_last > t.keep_last:
        raise ConfigError(
            f"training.average_last ({t.average_last}) cannot exceed training.keep_last "
            f"({t.keep_last}): only keep_last periodic checkpoints are kept"
        )
    if t.lr <= 0 or not math.isfinite(t.lr):
        raise ConfigError(f"training.lr must be a positive number, got {t.lr}")
    if not 0.0 <= t.label_smoothing < 1.0:
        raise ConfigError(f"training.label_smoothing must be in [0, 1), got {t.label_smoothing}")
    if t.schedule in DECAYING:
        if t.max_steps < 1:
            raise ConfigError(
                f"training.schedule {t.schedule} decays to training.min_lr at "
                "training.max_steps: set training.max_steps"
            )
        if t.warmup_steps >= t.max_steps:
            raise ConfigError(
                f"training.warmup_steps ({t.warmup_steps}) must be below training.max_steps "
                f"({t.max_steps}) for the {t.schedule} schedule"
            )
    if not 0.0 <= t.min_lr <= t.lr:
        raise ConfigError(f"training.min_lr must be in [0, training.lr], got {t.min_lr}")
    if t.expected_step_s < 0 or not math.isfinite(t.expected_step_s):
        raise ConfigError(f"training.expected_step_s must be >= 0, got {t.expected_step_s}")
    if t.expected_step_s > 0 and t.max_steps < 1:
        raise ConfigError("training.expected_step_s needs training.max_steps (updates) to be set")
    if t.rdrop_start > 0 and not t.two_passes:
        raise ConfigError(
            "training.rdrop_start needs training.rdrop_alpha or training.rdrop_cutoff above 0"
        )
    if t.max_steps < 1 and t.max_epochs < 1 and t.max_time is None:
        raise ConfigError(
            "set a limit: training.max_steps, training.max_epochs or training.max_time"
        )


def _adamw(groups: list[dict], t: TrainingConfig, *, fused: bool) -> torch.optim.AdamW:
    """AdamW whose update runs as one fused kernel over all parameters (``fused=True``).

    torch's default on the CPU is the per-parameter loop: ~10 small kernels per parameter
    tensor (130 tensors in the Tiny shape), which costs more than the update's arithmetic on
    small models. The fused kernel computes the same update (tests/test_step_speed.py). Not
    with ``16-mixed``: a fused AdamW unscales the gradients itself, inside ``step``, so
    Lightning would hand this module's gradient normalization, norm and clipping scaled
    gradients; and not under any mixed precision with ``clip_norm`` (Lightning's mixed
    precision plugin refuses to clip for an optimizer that unscales itself): those cases take
    the multi-tensor (``foreach``) implementation.
    """
    kwargs = {"lr": t.lr, "betas": tuple(t.betas), "eps": t.eps}
    if fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kwargs)
        except RuntimeError:  # a device or dtype without the fused kernel
            pass
    return torch.optim.AdamW(groups, foreach=True, **kwargs)


def _fused_loss_dtype(hidden: Tensor) -> torch.dtype | None:
    """The dtype the fused CPU projection + loss computes in for ``hidden``, or None (unfused).

    float32/float64 without autocast; bfloat16 under CPU autocast to bf16 (``bf16-mixed``)
    or for bf16 hidden states. Elsewhere (CUDA, fp16) the plain projection and loss.
    """
    if hidden.device.type != "cpu":
        return None
    if torch.is_autocast_enabled("cpu"):
        return torch.bfloat16 if torch.get_autocast_dtype("cpu") == torch.bfloat16 else None
    if hidden.dtype in (torch.float32, torch.float64, torch.bfloat16):
        return hidden.dtype
    return None


def _batch_seed(seed: int, epoch: int, batch_idx: int, rank: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{epoch}:{batch_idx}:{rank}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


class TranslationModule(ValidationMixin, pl.LightningModule):
    """Training and validation of a :class:`~seq2seq.model.transformer.Seq2SeqTransformer`.

    The model is built from ``cfg.model`` either here (when the vocabulary sizes are given)
    or in :meth:`setup` from the data module's tokenizer (``seq2seq train``: the
    SentencePiece model is trained by the data module's ``prepare_data``, after this module
    exists). Validation BLEU needs the data module's ``tokenizer``, ``valid_src_text`` and
    ``valid_ref_text``; each validation batch's ``index`` names its sentences.

    No hyperparameters are pickled: the resolved config is stored in each checkpoint as plain
    dicts (under ``"seq2seq"``), so checkpoints load with ``torch.load(weights_only=True)``.
    """

    def __init__(
        self,
        *,
        cfg: ExperimentConfig,
        src_vocab_size: int | None = None,
        tgt_vocab_size: int | None = None,
    ) -> None:
        super().__init__()
        check_training_config(cfg)
        self.cfg = cfg
        self.model: Seq2SeqTransformer | None = None
        if (src_vocab_size is None) != (tgt_vocab_size is None):
            raise ValueError("give both vocabulary sizes or neither")
        if src_vocab_size is not None:
            self._build(src_vocab_size, tgt_vocab_size)
        self.tokenizer = None
        self.valid_src_text: list[str] | None = None
        self.valid_ref_text: list[str] | None = None
        self.valid_directions: list[str] | None = None  # multilingual: each pair's direction
        # training bookkeeping (all reset per optimizer step unless noted)
        self._acc: Tensor | None = None  # (3,) loss sum, nll sum, target tokens
        self._local_nonfinite = False
        self._tick: float | None = None
        self.nonfinite_in_row = 0  # saved in checkpoints
        self.nonfinite_total = 0  # saved in checkpoints
        self.data_position = (0, 0)  # (epoch, batches consumed in it); saved in checkpoints
        self.wall_before_s = 0.0  # training wall-clock of earlier launches; saved in checkpoints
        self._launch_t0: float | None = None
        self.resume_position: tuple[int, int] | None = None  # from a loaded checkpoint
        # validation bookkeeping
        self._val_sums: Tensor | None = None  # (3,) loss sum, nll sum, target tokens
        self._val_hyps: dict[int, str] = {}
        self._signature_shown = False
        self._compiled = False

    # ---- construction ----------------------------------------------------------------------

    def _build(self, src_vocab_size: int, tgt_vocab_size: int) -> None:
        self.model = build_model(
            self.cfg.model,
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            pad_id=PAD_ID,
        )

    def setup(self, stage: str) -> None:
        """Build the model from the data module's tokenizer; take the validation texts."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None:
            self._maybe_compile()
            return
        self.tokenizer = dm.tokenizer
        self.valid_src_text = list(dm.valid_src_text) if dm.valid_src_text is not None else None
        self.valid_ref_text = list(dm.valid_ref_text) if dm.valid_ref_text is not None else None
        directions = getattr(dm, "valid_directions", None)
        self.valid_directions = list(directions) if directions is not None else None
        if self.model is None:
            self._build(dm.tokenizer.src_vocab_size, dm.tokenizer.tgt_vocab_size)
        elif (self.model.src_vocab_size, self.model.tgt_vocab_size) != (
            dm.tokenizer.src_vocab_size,
            dm.tokenizer.tgt_vocab_size,
        ):
            raise UserError(
                f"the model's vocabularies ({self.model.src_vocab_size}, "
                f"{self.model.tgt_vocab_size}) do not match the tokenizer's "
                f"({dm.tokenizer.src_vocab_size}, {dm.tokenizer.tgt_vocab_size})"
            )
        self._maybe_compile()

    def _maybe_compile(self) -> None:
        """``training.compile``: compile the encoder and decoder stacks in place.

        ``nn.Module.compile`` keeps parameter names (checkpoints and the exported weights are
        unchanged); ``dynamic=True`` because every batch has other lengths.
        """
        if not self.cfg.training.compile or self.model is None or self._compiled:
            return
        self.model.encoder.compile(dynamic=True)
        self.model.decoder.compile(dynamic=True)
        self._compiled = True

    def on_fit_start(self) -> None:
        """``training.keep_freed_memory`` on the CPU (seq2seq/core/memory.py)."""
        if self.cfg.training.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()

    def configure_optimizers(self):
        """AdamW (decay on matrices only) and the per-update LambdaLR schedule."""
        t: TrainingConfig = self.cfg.training
        decay, no_decay = [], []
        seen: set[int] = set()
        for p in self.model.parameters():  # shared/tied parameters appear once
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": t.weight_decay}]
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0})
        # the precision Lightning runs (auto and bf16-native resolved), when it runs
        precision = str(self.trainer.precision) if self._trainer is not None else t.precision
        mixed = precision.endswith("-mixed") or precision in ("auto", "bf16-native")
        fused = not precision.startswith("16") and not (mixed and t.clip_norm > 0)
        optimizer = _adamw(groups, t, fused=fused)
        factor = lr_factor(
            t.schedule,
            warmup_steps=t.warmup_steps,
            d_model=self.cfg.model.d_model,
            max_steps=t.max_steps,
            min_ratio=t.min_lr / t.lr,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
        }

    # ---- the loss ----------------------------------------------------------------------------

    def compute_loss(self, src_ids: Tensor, tgt_ids: Tensor) -> LossOutput:
        """Label-smoothed loss sums of a batch.

        Args:
            src_ids: (B, S) source ids (pieces + EOS, padded).
            tgt_ids: (B, T+1) target ids (BOS + pieces + EOS, padded).

        The output projection (D x V, the largest matmul) runs only on the non-padding
        target positions; on the CPU it is fused with the loss, chunk by chunk. With
        ``training.rdrop_alpha`` or ``training.rdrop_cutoff`` > 0, a training batch runs
        through the model twice (:func:`seq2seq.model.loss.rdrop_loss`, fused on the CPU as
        :func:`~seq2seq.model.loss.projected_rdrop_loss`), the second time with its token
        embeddings cut (:func:`seq2seq.model.cutoff.token_cutoff`), from update
        ``training.rdrop_start`` on; validation runs once.
        """
        tgt_in, tgt_out = tgt_ids[:, :-1], tgt_ids[:, 1:]  # (B, T) each
        keep = tgt_out.ne(PAD_ID)  # (B, T)
        target, epsilon = tgt_out[keep], self.cfg.training.label_smoothing  # (N,)
        alpha, cutoff = self.cfg.training.rdrop_alpha, self.cfg.training.rdrop_cutoff
        two_passes = (
            self.cfg.training.two_passes
            and self.training
            and self.global_step >= self.cfg.training.rdrop_start
        )
        hiddens = []
        for p in (0.0, cutoff) if two_passes else (0.0,):
            # R-Drop: two dropout masks (the generator moves on between them), the second
            # pass cut (SimCut) if asked
            with token_cutoff(self.model, p):
                memory, src_pad = self.model.encode(src_ids)  # (B, S, D), (B, S)
                hidden = self.model.decode(tgt_in, memory, src_pad)  # (B, T, D)
            hiddens.append(hidden[keep])  # (N, D)
        dtype = _fused_loss_dtype(hiddens[0])
        plain = self.model.final_logits_bias is None and not self.model.start_is_eos
        weight = self.model.output_proj.weight
        if dtype is not None and plain:  # fused: no bias term, no fixed start logit (project)
            # Chunked projection + loss: the (N, V) logits never exist at once (loss.py); in
            # bf16 mixed precision its multiplies run in bf16, the softmax in float32.
            if two_passes:
                return projected_rdrop_loss(
                    *hiddens, weight, target, epsilon=epsilon, alpha=alpha, compute_dtype=dtype
                )
            return projected_label_smoothed_nll(
                hiddens[0], weight, target, epsilon=epsilon, compute_dtype=dtype
            )
        logits = [self.model.project(h) for h in hiddens]  # (N, V) each
        if two_passes:
            return rdrop_loss(*logits, target, epsilon=epsilon, alpha=alpha, ignore_index=PAD_ID)
        return label_smoothed_nll(logits[0], target, epsilon=epsilon, ignore_index=PAD_ID)

    # ---- training ----------------------------------------------------------------------------

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        """Reseed dropout for this batch; remember how far into the epoch the data is."""
        epoch = self.trainer.current_epoch
        torch.manual_seed(
            _batch_seed(self.cfg.training.seed, epoch, batch_idx, self.trainer.global_rank)
        )
        # Once this batch has run (any checkpoint is written after that), batch_idx + 1
        # batches of this epoch are consumed.
        self.data_position = (epoch, batch_idx + 1)
        if self._tick is None:
            self._tick = time.perf_counter()
        if self._launch_t0 is None:
            self._launch_t0 = self._tick

    def wall_seconds(self) -> float:
        """Wall-clock seconds of training so far, validation included, over all launches."""
        launch = time.perf_counter() - self._launch_t0 if self._launch_t0 is not None else 0.0
        return self.wall_before_s + launch

    def training_step(self, batch, batch_idx: int) -> Tensor:
        """The micro-batch's summed loss; :meth:`on_before_optimizer_step` normalizes the
        accumulated gradient by the whole update's token count (fairseq's normalization)."""
        out = self.compute_loss(batch.src_ids, batch.tgt_ids)
        loss = out.loss
        sums = torch.stack([out.loss.detach().float(), out.nll.detach().float()])
        sums = torch.cat([sums, sums.new_tensor([float(out.n_tokens)])])
        self._acc = sums if self._acc is None else self._acc + sums
        if not bool(torch.isfinite(out.loss.detach())):
            self._local_nonfinite = True
        return loss

    def _normalize_grads(self, tokens: float, world: int) -> None:
        """Turn the accumulated gradient of summed losses into that of the update's mean.

        Each micro-batch's backward ran on its summed loss, which Lightning divided by
        ``accumulate_grad_batches`` (k); DDP averaged the gradients over the ``world`` ranks.
        Multiplying by ``k * world / tokens``, with ``tokens`` the target tokens of the whole
        update (all micro-batches, all ranks), leaves ``d(sum of token losses) / tokens``:
        micro-batches and ranks weigh by their tokens, as in fairseq, not equally.
        """
        k = self.trainer.accumulate_grad_batches if self._trainer is not None else 1
        scale = k * world / max(tokens, 1.0)
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if grads and scale != 1.0:
            torch._foreach_mul_(grads, scale)

    def _grad_norm(self) -> float:
        """Global L2 norm of the gradients (before clipping); inf or nan when not finite."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return 0.0
        norms = torch._foreach_norm(grads)  # one kernel per dtype/device group
        return float(torch.linalg.vector_norm(torch.stack(norms).float()))

    def on_before_optimizer_step(self, optimizer) -> None:
        """Skip a non-finite update (consistently on every rank), log the step's metrics."""
        t = self.cfg.training
        world = world_size()
        flag = torch.tensor([1.0 if self._local_nonfinite else 0.0], device=self.device)
        acc = self._acc if self._acc is not None else torch.zeros(3, device=self.device)
        if world > 1:  # one small all-reduce: the global loss and the any-rank flag
            both = torch.cat([acc.to(self.device), flag])
            dist.all_reduce(both)
            acc, flag = both[:3], both[3:]
        bad = bool(flag.item() > 0)
        self._normalize_grads(float(acc[2]), world)
        grad_norm = self._grad_norm()
        if t.precision != "16-mixed":
            # (16-mixed: the grad scaler skips overflowing steps itself, and overflows while
            # it calibrates are expected, so only a non-finite loss counts there.)
            # After DDP's all-reduce the gradients are equal on all ranks: same decision.
            bad = bad or not math.isfinite(grad_norm)
        self._local_nonfinite = False
        self._acc = None
        now = time.perf_counter()
        elapsed = now - self._tick if self._tick is not None else 0.0
        self._tick = now
        if bad:
            self.nonfinite_in_row += 1
            self.nonfinite_total += 1
        else:
            self.nonfinite_in_row = 0
        # Every metric is logged at every update (a skipped one logs its NaN loss): Lightning
        # would otherwise repeat a step's stale value at the next.
        loss_sum, nll_sum, tokens = (float(x) for x in acc.tolist())
        tokens = max(tokens, 1.0)
        metrics = {
            "train/loss": loss_sum / tokens,
            "train/ppl": math.exp(min(nll_sum / tokens, 50.0)) if not bad else math.nan,
            "train/lr": optimizer.param_groups[0]["lr"],
            "train/tok_s": tokens / elapsed if elapsed > 0 else 0.0,
        }
        for name, value in metrics.items():
            self.log(name, value, on_step=True, on_epoch=False, prog_bar=True, batch_size=1)
        self.log("train/grad_norm", grad_norm, on_step=True, on_epoch=False, batch_size=1)
        self.log("train/nonfinite", float(self.nonfinite_total), on_step=True, batch_size=1)
        if not bad:
            return
        for p in self.model.parameters():
            p.grad = None  # AdamW skips parameters without gradients: no update
        if t.max_nonfinite and self.nonfinite_in_row >= t.max_nonfinite:
            raise TrainingDiverged(
                f"the loss was not finite in {self.nonfinite_in_row} updates in a row "
                f"(at step {self.global_step}); stopping (training.max_nonfinite = "
                f"{t.max_nonfinite}). The last checkpoint, from before, is kept: lower "
                "training.lr, raise training.warmup_steps or set training.clip_norm"
            )

    # ---- checkpoints -------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """Store the config and the data position as plain values (weights_only-loadable)."""
        epoch, consumed = self.data_position
        checkpoint[CHECKPOINT_KEY] = {
            "format": 1,
            "config": config_to_dict(self.cfg),
            "data_epoch": int(epoch),
            "data_batches": int(consumed),
            "nonfinite_in_row": int(self.nonfinite_in_row),
            "nonfinite_total": int(self.nonfinite_total),
            "wall_s": float(self.wall_seconds()),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Check the checkpoint fits this config; make the sampler skip the consumed batches."""
        state = checkpoint.get(CHECKPOINT_KEY)
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
            raise UserError("the checkpoint was not written by `seq2seq train` (no seq2seq state)")
        changes = model_data_changes(state["config"], self.cfg)
        if changes:
            raise UserError(
                "the checkpoint was trained with another model or data config: "
                + ", ".join(changes[:3])
            )
        self.nonfinite_in_row = int(state.get("nonfinite_in_row", 0))
        self.nonfinite_total = int(state.get("nonfinite_total", 0))
        self.wall_before_s = float(state.get("wall_s", 0.0))
        self._launch_t0 = None
        epoch, consumed = int(state["data_epoch"]), int(state["data_batches"])
        self.resume_position = (epoch, consumed)
        self.data_position = self.resume_position
        trainer = self._trainer
        sampler = getattr(getattr(trainer, "datamodule", None), "train_sampler", None)
        if sampler is not None:
            # The next batch is `consumed` of `epoch`, or the first of the next epoch when
            # the checkpoint was written after an epoch's last batch. Lightning creates the
            # first iterator before its own epoch counter is settled: name the epoch.
            if consumed >= len(sampler.batches(epoch)):
                epoch, consumed = epoch + 1, 0
            sampler.set_start_batch(consumed, epoch=epoch)
