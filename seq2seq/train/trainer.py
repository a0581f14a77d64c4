"""``seq2seq train``: fit a translator with Lightning and write a self-contained model directory.

Output (``--out DIR``)::

    DIR/config.yaml              the resolved config (every key)
    DIR/spm.model                SentencePiece model(s), trained by the data module
    DIR/data/                    binarized corpus (the data module's cache)
    DIR/checkpoints/last.ckpt    the newest checkpoint (what --resume continues from)
    DIR/checkpoints/best.ckpt    best by training.val_metric
    DIR/checkpoints/stepNNNNNNNN.ckpt   the last training.keep_last periodic checkpoints
    DIR/logs/csv/version_K/metrics.csv, DIR/logs/tb/version_K/   one version per launch
    DIR/model.safetensors + manifest.json   written at the end: the average of the last
                                 training.average_last periodic checkpoints from the second
                                 half of the run (the best one when average_last is 1);
                                 `load_model_dir(DIR)` loads it

Checkpoints are written atomically (temporary file, fsync, rename), hold only tensors and
plain values, and are read back with ``torch.load(weights_only=True)``. A periodic checkpoint
is written every ``training.save_every_steps`` updates (default: every ``val_every_steps``),
after the validation of that step when there is one; ``last.ckpt`` is a hard link to the
newest.

Exact resume: ``seq2seq train --resume DIR`` continues from ``DIR/checkpoints/last.ckpt``
with the model, optimizer, schedule, early-stopping state and data position (epoch and
batches consumed in it; the batch sampler skips them) of the checkpoint, and the per-batch
dropout seeds of :mod:`seq2seq.train.module`: a run killed at step k and resumed logs the same
losses as one that was never interrupted (in deterministic mode, up to float noise).
``--resume`` reads ``DIR/config.yaml``; overrides may change the training section (e.g. a
larger ``training.max_steps``) but not the model or data sections.

Distributed training (Lightning DDP; each rank reads its own shard of the batches, and
validation BLEU is computed once over the whole validation set)::

    # one machine, 4 GPUs: Lightning starts the 4 processes itself
    seq2seq train --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.strategy=ddp

    # the same through torchrun (one process per GPU; Lightning reads torchrun's variables)
    torchrun --standalone --nproc_per_node=4 -m seq2seq.cli.command train \\
        --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.strategy=ddp

    # several machines with torchrun: run on each node (NODE = 0, 1, ...)
    torchrun --nnodes=2 --nproc_per_node=4 --node_rank=NODE \\
        --master_addr=HOST0 --master_port=29500 -m seq2seq.cli.command train \\
        --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.num_nodes=2 training.strategy=ddp

    # SLURM: one task per GPU; Lightning reads SLURM's variables
    #   #SBATCH --nodes=2 --ntasks-per-node=4 --gpus-per-node=4
    srun seq2seq train --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.num_nodes=2 training.strategy=ddp

    # CPU processes (testing): gloo backend
    seq2seq train --config configs/x.yaml --out runs/x \\
        training.accelerator=cpu training.devices=2 training.strategy=ddp

``--out`` must be on a file system every node sees (rank 0 writes the SentencePiece model,
the data and the checkpoints; the other ranks read them). ``--resume`` works the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint, EarlyStopping, Timer, TQDMProgressBar
from pytorch_lightning.callbacks.progress.tqdm_progress import _update_n
from pytorch_lightning.plugins.io import TorchCheckpointIO

from seq2seq.config import (
    ExperimentConfig,
    apply_overrides,
    dump_config,
    load_config,
    model_data_changes,
)
from seq2seq.core import Stopped, UserError, atomic_open
from seq2seq.train.checkpoints import (
    average_checkpoints,
    checkpoints_to_average,
    model_for_run,
    periodic_checkpoints,
    read_checkpoint,
)
from seq2seq.train.pace_watch import PaceWatch
from seq2seq.train.precision import resolve_precision

__all__ = [
    "AtomicCheckpointIO",
    "Checkpointer",
    "StepProgressBar",
    "TextProgress",
    "export_weights",
    "resolve_config",
    "train",
]

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
LAST = "last.ckpt"
BEST = "best.ckpt"


# ---------------------------------------------------------------------------------------------
# Checkpoint files


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that never leaves a half-written file, and loads safely.

    Saving writes a temporary sibling, fsyncs it and renames it over the target, so a crash
    or kill while saving leaves the previous checkpoint intact. Loading always uses
    ``torch.load(weights_only=True)``: a checkpoint that would need unsafe unpickling is a
    :class:`~seq2seq.train.checkpoints.CheckpointError`.
    """

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        with atomic_open(Path(path), "wb") as f:
            torch.save(checkpoint, f)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return read_checkpoint(path)


def _link_or_copy(src: Path, dst: Path) -> None:
    """Make ``dst`` a hard link to ``src`` (a copy where links are impossible), atomically."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class Checkpointer(Checkpoint):
    """Periodic, last and best checkpoints for exact resume and averaging.

    - every ``save_every`` updates: ``stepNNNNNNNN.ckpt`` (written after that step's
      validation, if it has one, so that it holds the validation's early-stopping and
      best-score state), and ``last.ckpt`` linked to it; only the newest ``keep_last``
      periodic checkpoints are kept;
    - after a validation that improves ``monitor``: ``best.ckpt``;
    - at the end of training (max steps, early stop, time limit): a final periodic one.

    Its state (best score and step) is saved in the checkpoints and restored on resume.
    Lightning orders :class:`Checkpoint` callbacks last, so early stopping has updated its
    own state before a checkpoint is written.
    """

    def __init__(
        self, *, dirpath: str | Path, save_every: int, keep_last: int, monitor: str, mode: str
    ) -> None:
        self.dirpath = Path(dirpath)
        self.save_every = save_every
        self.keep_last = keep_last
        self.monitor = monitor
        self.mode = mode
        self.best_score: float | None = None
        self.best_step = -1
        self.last_saved_step = -1

    @property
    def state_key(self) -> str:
        return "Checkpointer"

    def state_dict(self) -> dict:
        return {"best_score": self.best_score, "best_step": self.best_step}

    def load_state_dict(self, state_dict: dict) -> None:
        self.best_score = state_dict.get("best_score")
        self.best_step = int(state_dict.get("best_step", -1))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            for stale in self.dirpath.glob(".*.tmp"):  # left by a kill while writing
                with contextlib.suppress(OSError):
                    stale.unlink()

    def save_now(self, trainer: pl.Trainer) -> None:
        """A periodic checkpoint of the current step, unless there is one (a SIGTERM stop)."""
        if 0 < trainer.global_step != self.last_saved_step:
            self._save_periodic(trainer)

    def _improved(self, score: float) -> bool:
        if self.best_score is None:
            return True
        return score > self.best_score if self.mode == "max" else score < self.best_score

    def _save_periodic(self, trainer: pl.Trainer) -> Path:
        step = trainer.global_step
        path = self.dirpath / f"step{step:08d}.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # all ranks call; rank 0 writes
        self.last_saved_step = step
        if trainer.is_global_zero:
            _link_or_copy(path, self.dirpath / LAST)
            for old in periodic_checkpoints(self.dirpath)[: -self.keep_last]:
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        trainer.strategy.barrier("Checkpointer")
        return path

    @staticmethod
    def _validation_follows(trainer: pl.Trainer) -> bool:
        """Whether Lightning validates right after this training batch.

        Two rules of Lightning's ``_should_check_val_fx``: every ``val_check_batch`` batches,
        and once more when a callback (the ``max_time`` Timer) has asked the run to stop.
        """
        every = trainer.val_check_batch
        if not trainer.enable_validation or not isinstance(every, int) or every < 1:
            return False
        if trainer.should_stop and trainer.fit_loop._can_stop_early:
            return True
        return (trainer.fit_loop.epoch_loop.total_batch_idx + 1) % every == 0

    def _due(self, trainer: pl.Trainer) -> bool:
        """A periodic step, or the last one (max_steps reached, or a callback stops the run).

        Saving the last step here, while Lightning is still inside the epoch, lets a run
        that is resumed with a larger ``max_steps`` continue exactly.
        """
        step = trainer.global_step
        if step == 0 or step == self.last_saved_step:
            return False
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= step
        return step % self.save_every == 0 or last or trainer.should_stop

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._due(trainer):
            return
        if self._validation_follows(trainer):
            return  # saved in on_validation_end, with the validation's state
        self._save_periodic(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        step = trainer.global_step
        value = trainer.callback_metrics.get(self.monitor)
        new_best = value is not None and self._improved(float(value))
        if new_best:
            self.best_score, self.best_step = float(value), step
        saved = self._save_periodic(trainer) if self._due(trainer) else None
        if new_best:
            if saved is not None:
                if trainer.is_global_zero:
                    _link_or_copy(saved, self.dirpath / BEST)
                trainer.strategy.barrier("Checkpointer best")
            else:
                trainer.save_checkpoint(self.dirpath / BEST, weights_only=False)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step > 0 and trainer.global_step != self.last_saved_step:
            self._save_periodic(trainer)


# ---------------------------------------------------------------------------------------------
# Progress display


def _short_metrics(metrics: dict) -> dict:
    out = {}
    for key, value in metrics.items():
        if key == "v_num":
            continue
        out[key.removeprefix("train/")] = value
    return out


class StepProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar counting updates towards ``max_steps`` (hence a run-wide ETA).

    The postfix shows the step's loss, perplexity, learning rate and target tokens per
    second. Without a step limit it is Lightning's per-epoch bar.
    """

    def on_train_epoch_start(self, trainer, *args) -> None:
        if trainer.max_steps is None or trainer.max_steps < 1:
            return super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:
            bar.reset(total=trainer.max_steps)
            bar.initial = trainer.global_step  # rate and ETA from this launch's progress
        _update_n(bar, trainer.global_step)
        bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.max_steps is None or trainer.max_steps < 1:
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        n = trainer.global_step
        bar = self.train_progress_bar
        if bar is not None and self._should_update(n, bar.total):
            _update_n(bar, n)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer, pl_module) -> dict:
        return _short_metrics(super().get_metrics(trainer, pl_module))


class TextProgress(pl.Callback):
    """One line every ``every`` updates, for logs that are not a terminal (SLURM, CI).

    ``step 1200/10000 loss 3.214 ppl 21.5 lr 4.1e-04 tok_s 12345 eta 0:12:34``
    """

    def __init__(self, *, every: int) -> None:
        self.every = max(1, every)
        self._start: tuple[float, int] | None = None
        self._last = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = (time.monotonic(), trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == self._last or step % self.every or not trainer.is_global_zero:
            return
        self._last = step
        metrics = _short_metrics(trainer.progress_bar_metrics)
        parts = [f"step {step}" + (f"/{trainer.max_steps}" if trainer.max_steps > 0 else "")]
        for key in ("loss", "ppl", "lr", "tok_s"):
            if key in metrics:
                value = float(metrics[key])
                parts.append(f"{key} {value:.2e}" if key == "lr" else f"{key} {value:.4g}")
        if self._start is not None and trainer.max_steps > 0 and step > self._start[1]:
            rate = (time.monotonic() - self._start[0]) / (step - self._start[1])
            eta = int(rate * (trainer.max_steps - step))
            for cb in trainer.callbacks:  # training.max_time may end the run sooner
                if isinstance(cb, Timer) and cb.time_remaining("train") is not None:
                    eta = min(eta, int(cb.time_remaining("train")))
            parts.append(f"eta {eta // 3600}:{eta // 60 % 60:02d}:{eta % 60:02d}")
        print(" ".join(parts), file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Config for a new run or a resumed one


def resolve_config(
    out_dir: str | Path,
    *,
    resume: bool,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    init_from: str | Path | None = None,
) -> ExperimentConfig:
    """The config of a new run (``--config`` + overrides) or of a resumed one.

    A new run with ``init_from`` (or ``training.init_from``) is fine-tuned from that model
    directory: :func:`seq2seq.train.finetune.resolve_init_config` gives its config.

    Resuming reads ``DIR/config.yaml``; overrides (or a ``--config``) may change the training,
    decoding and export sections, never the model or data sections.

    Raises:
        UserError: no config for a new run; nothing to resume; a model or data change on
            resume (the changed keys named).
    """
    out_dir = Path(out_dir)
    overrides = list(overrides or [])
    if not resume:
        if config_path is None and init_from is None:
            raise UserError(
                "give --config FILE, --init-from MODEL_DIR (fine-tune), or --resume DIR"
            )
        cfg = load_config(config_path, overrides) if config_path is not None else None
        parent = init_from or (cfg.training.init_from if cfg is not None else None)
        if parent is None:
            return cfg
        from seq2seq.train.finetune import resolve_init_config

        return resolve_init_config(parent, config_path=config_path, overrides=overrides)
    if init_from is not None:
        raise UserError("give either --init-from (a new run) or --resume DIR, not both")
    saved_path = out_dir / CONFIG_FILE
    if not saved_path.is_file():
        raise UserError(f"nothing to resume: {saved_path} is missing")
    if not (out_dir / CHECKPOINT_DIR / LAST).is_file():
        raise UserError(f"nothing to resume: {out_dir / CHECKPOINT_DIR / LAST} is missing")
    saved = load_config(saved_path)
    requested = (
        load_config(config_path, overrides)
        if config_path is not None
        else apply_overrides(saved, overrides)
    )
    changes = model_data_changes(saved, requested)
    if changes:
        shown = ", ".join(changes[:3]) + (
            f" and {len(changes) - 3} more" if len(changes) > 3 else ""
        )
        raise UserError(
            f"--resume {out_dir}: the model and data of a run cannot change, but {shown} "
            f"differ from {saved_path}; start a new run with --out instead"
        )
    return requested


# ---------------------------------------------------------------------------------------------
# The driver


def _devices(value: str) -> int | str:
    value = value.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    return value


def _global_rank() -> int:
    from lightning_fabric.utilities.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0) or 0)


def _loggers(out_dir: Path) -> list:
    from pytorch_lightning.loggers import CSVLogger

    loggers = [CSVLogger(save_dir=str(out_dir / "logs"), name="csv")]
    try:
        from pytorch_lightning.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(save_dir=str(out_dir / "logs"), name="tb"))
    except ModuleNotFoundError:  # tensorboard not installed: CSV only
        pass
    return loggers


def export_weights(out_dir: Path, cfg: ExperimentConfig, *, log=print) -> Path:
    """Write DIR/model.safetensors + manifest from the checkpoints (average or best)."""
    from seq2seq.model import save_model_dir

    ckpt_dir = out_dir / CHECKPOINT_DIR
    n = cfg.training.average_last
    paths = checkpoints_to_average(ckpt_dir, n) if n > 1 else []
    if paths:
        if len(paths) < n:
            log(
                f"averaging {len(paths)} periodic checkpoints, not training.average_last = {n} "
                "(fewer were written in the second half of the run)"
            )
        what = f"the average of {', '.join(p.name for p in paths)}"
    elif (ckpt_dir / BEST).is_file():
        paths, what = [ckpt_dir / BEST], BEST
    else:
        paths, what = [ckpt_dir / LAST], LAST
    weights = average_checkpoints(paths)
    model = model_for_run(out_dir, cfg)
    model.load_state_dict(weights)
    save_model_dir(out_dir, model, cfg)
    log(f"wrote {out_dir / 'model.safetensors'}: {what}")
    return out_dir


def train(
    cfg: ExperimentConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    mirror: str | Path | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
) -> Path:
    """Train a model into ``out_dir`` (see the module docstring for what it holds).

    Args:
        cfg: the resolved config (:func:`resolve_config`).
        out_dir: the model directory.
        resume: continue from ``out_dir/checkpoints/last.ckpt``.
        mirror, cache_dir: passed to the data module (offline corpus mirror, download cache).
        progress: TQDM progress bar (default: when stderr is a terminal); otherwise one
            text line every ``training.log_every_steps`` updates.

    Returns:
        ``out_dir``, holding ``model.safetensors`` (the exported model) when training ended
        normally.

    Raises:
        UserError: bad options, an existing run without ``resume``, an incompatible
            checkpoint, a diverged run (:class:`~seq2seq.train.module.TrainingDiverged`).
    """
    from seq2seq.core import check_accelerator, check_paths, check_strategy
    from seq2seq.data import TranslationDataModule
    from seq2seq.train.module import TranslationModule, check_training_config, monitor_mode
    from seq2seq.train.stopping import SignalStop, stopped

    check_training_config(cfg)
    t = cfg.training
    check_accelerator(t.accelerator, t.devices)
    check_strategy(t.strategy)
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    last = ckpt_dir / LAST
    rank = _global_rank()
    if resume:
        if not last.is_file():
            raise UserError(f"nothing to resume: {last} is missing")
    elif rank == 0 and ckpt_dir.is_dir() and any(ckpt_dir.glob("*.ckpt")):
        raise UserError(
            f"{out_dir} already holds a training run ({ckpt_dir}); continue it with "
            f"`seq2seq train --resume {out_dir}` or choose another --out"
        )
    dm = TranslationDataModule(cfg, out_dir, mirror=mirror, cache_dir=cache_dir)
    check_paths(input_files=dm.input_files(), output_dirs=[("--out", out_dir)])
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_config(out_dir, cfg)
    if t.threads > 0:
        torch.set_num_threads(t.threads)
    choice = resolve_precision(
        t.precision,
        accelerator=t.accelerator,
        forward=_probe_forward(cfg) if t.precision == "auto" else None,
        probe=t.devices in ("1", "auto") and t.num_nodes == 1,
    )
    if t.precision == "auto" and rank == 0:
        print(f"training.precision auto: {choice.precision} ({choice.reason})", file=sys.stderr)
    pl.seed_everything(t.seed, workers=True, verbose=False)

    if t.init_from is not None and not resume:  # fine-tuning: the parent's weights
        from seq2seq.train.finetune import start_from_parent

        module = start_from_parent(cfg, out_dir, write_record=rank == 0)
    else:  # (a resumed run's checkpoint holds the weights)
        module = TranslationModule(cfg=cfg)
    if progress is None:
        progress = sys.stderr.isatty()
    monitor = f"val/{t.val_metric}"
    checkpointer = Checkpointer(
        dirpath=ckpt_dir,
        save_every=t.save_every_steps or t.val_every_steps,
        keep_last=t.keep_last,
        monitor=monitor,
        mode=monitor_mode(t.val_metric),
    )
    signal_stop = SignalStop(save=checkpointer.save_now)
    callbacks: list = [
        checkpointer,
        signal_stop,
        StepProgressBar() if progress else TextProgress(every=t.log_every_steps),
    ]
    if t.expected_step_s > 0:
        callbacks.append(PaceWatch(expected_step_s=t.expected_step_s, machine=t.expected_machine))
    if t.patience > 0:
        callbacks.append(
            EarlyStopping(
                monitor=monitor,
                mode=monitor_mode(t.val_metric),
                patience=t.patience,
                check_on_train_epoch_end=False,
            )
        )
    with warnings.catch_warnings():
        # Mid-epoch resume is exact here (the sampler skips what was consumed), and
        # the batches are built in the main process by design.
        warnings.filterwarnings("ignore", message=".*resuming from a checkpoint that ended before")
        warnings.filterwarnings("ignore", message=".*does not have many workers.*")
        warnings.filterwarnings("ignore", message=".*isinstance.treespec, LeafSpec.*")
        try:
            trainer = _fit(
                cfg, out_dir, module, dm, callbacks, progress=progress, resume=resume,
                precision=choice.precision,
            )  # fmt: skip
        except (SystemExit, Stopped):  # Lightning's exit after SIGINT (1) or SIGTERM (0!)
            stop = stopped(signal_stop, last, out_dir)
            if stop is None:
                raise
            raise stop from None
    if trainer.interrupted:
        raise UserError(
            f"training was interrupted; continue with `seq2seq train --resume {out_dir}`"
        )
    if trainer.is_global_zero:
        export_weights(out_dir, cfg, log=lambda m: print(m, file=sys.stderr))
    return out_dir


def _probe_forward(cfg: ExperimentConfig, lengths: tuple[int, ...] = (12, 19, 27, 36)):
    """``training.precision: auto``'s probe: the summed loss of this config's model (random
    weights, in training mode) on a synthetic batch of about ``data.max_tokens`` tokens per
    side, its sentences ``lengths[i]`` tokens long at the i-th call, cycling (batch shapes
    vary in training, and bf16's speed with them; seq2seq.train.precision.bf16_speedup times it)."""
    import itertools

    from seq2seq.data import BOS_ID, EOS_ID
    from seq2seq.train.module import TranslationModule
    from seq2seq.train.precision import PROBE_SHAPES

    assert len(lengths) == PROBE_SHAPES, "bf16_speedup times one cycle of shapes per round"
    vocab = cfg.data.vocab_size
    module = TranslationModule(cfg=cfg, src_vocab_size=vocab, tgt_vocab_size=vocab).train()
    g = torch.Generator().manual_seed(0)
    batches = []
    for length in lengths:
        rows = max(1, cfg.data.max_tokens // length)
        src = torch.randint(4, vocab, (rows, length), generator=g)
        src[:, -1] = EOS_ID
        tgt = torch.randint(4, vocab, (rows, length + 1), generator=g)
        tgt[:, 0], tgt[:, -1] = BOS_ID, EOS_ID
        batches.append((src, tgt))
    cycle = itertools.cycle(batches)
    return lambda: module.compute_loss(*next(cycle)).loss


def _write_config(out_dir: Path, cfg: ExperimentConfig) -> None:
    """Write DIR/config.yaml; in a directory that already holds an exported model (a resumed
    run), rewrite its manifest too, so the model stays loadable while the run goes on (only the
    training, decoding or export sections can differ: the weights still fit)."""
    from seq2seq.model import MANIFEST_FILE, write_manifest

    path = out_dir / CONFIG_FILE
    text = dump_config(cfg)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)
    if (out_dir / MANIFEST_FILE).is_file():
        write_manifest(out_dir)


def _fit(
    cfg, out_dir: Path, module, dm, callbacks: list, *, progress: bool, resume: bool, precision: str
):
    t = cfg.training
    last = out_dir / CHECKPOINT_DIR / LAST
    trainer = pl.Trainer(
        accelerator=t.accelerator,
        devices=_devices(t.devices),
        num_nodes=t.num_nodes,
        strategy=t.strategy,
        precision=precision,  # training.precision, with auto resolved
        max_steps=t.max_steps if t.max_steps > 0 else -1,
        max_epochs=t.max_epochs if t.max_epochs > 0 else -1,
        max_time=t.max_time,
        val_check_interval=t.val_every_steps * t.accumulate,
        check_val_every_n_epoch=None,
        accumulate_grad_batches=t.accumulate,
        gradient_clip_val=t.clip_norm if t.clip_norm > 0 else None,
        log_every_n_steps=t.log_every_steps,
        deterministic=t.deterministic,
        callbacks=callbacks,
        logger=_loggers(out_dir),
        plugins=[AtomicCheckpointIO()],
        use_distributed_sampler=False,  # the token-bucket sampler shards per rank itself
        enable_progress_bar=progress,
        enable_model_summary=True,
        default_root_dir=str(out_dir),
        num_sanity_val_steps=1,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=str(last) if resume else None, weights_only=True)
    return trainer
