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
newest (:mod:`seq2seq.train.checkpointer`).

Exact resume: ``seq2seq train --resume DIR`` continues from ``DIR/checkpoints/last.ckpt``
with the model, optimizer, schedule, early-stopping state and data position (epoch and
batches consumed in it; the batch sampler skips them) of the checkpoint, and the per-batch
dropout seeds of :mod:`seq2seq.train.module`: a run killed at step k and resumed logs the same
losses as one that was never interrupted (in deterministic mode, up to float noise).
``--resume`` reads ``DIR/config.yaml``; overrides may change the training section (e.g. a
larger ``training.max_steps``) but not the model or data sections
(:func:`seq2seq.train.run_config.resolve_config`).

Distributed training (Lightning DDP; each rank reads its own shard of the batches, and
validation BLEU is computed once over the whole validation set)::

    # one machine, 4 GPUs: Lightning starts the 4 processes itself
    seq2seq train --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.strategy=ddp

    # the same through torchrun (one process per GPU; Lightning reads torchrun's variables)
    torchrun --standalone --nproc_per_node=4 -m seq2seq.cli train \\
        --config configs/wmt14_big.yaml --out runs/big \\
        training.accelerator=gpu training.devices=4 training.strategy=ddp

    # several machines with torchrun: run on each node (NODE = 0, 1, ...)
    torchrun --nnodes=2 --nproc_per_node=4 --node_rank=NODE \\
        --master_addr=HOST0 --master_port=29500 -m seq2seq.cli train \\
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

import sys
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping

from seq2seq.config import ExperimentConfig, dump_config
from seq2seq.core import Stopped, UserError, atomic_open
from seq2seq.model import CONFIG_FILE
from seq2seq.train.checkpointer import AtomicCheckpointIO, Checkpointer
from seq2seq.train.checkpoints import (
    BEST,
    CHECKPOINT_DIR,
    LAST,
    average_checkpoints,
    checkpoints_to_average,
    model_for_run,
)
from seq2seq.train.pace_watch import PaceWatch
from seq2seq.train.precision import resolve_precision
from seq2seq.train.progress import RunLines, StepProgressBar, TextProgress, quiet_lightning

__all__ = ["export_weights", "train"]


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
    force: bool = False,
    mirror: str | Path | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
) -> Path:
    """Train a model into ``out_dir`` (see the module docstring for what it holds).

    Args:
        cfg: the resolved config (:func:`resolve_config`).
        out_dir: the model directory.
        resume: continue from ``out_dir/checkpoints/last.ckpt``.
        force: a new run in an ``out_dir`` that holds a model or a run: that folder is
            deleted first (everything in it), and the new run starts in an empty one.
        mirror: passed to the data module (the offline corpus mirror).
        cache_dir: passed to the data module (the download cache).
        progress: TQDM progress bar (default: when stderr is a terminal); otherwise one
            text line every ``training.log_every_steps`` updates.

    Returns:
        ``out_dir``, holding ``model.safetensors`` (the exported model) when training ended
        normally.

    Raises:
        UserError: bad options, an existing model or run without ``resume`` or ``force``
            (:func:`seq2seq.model.check_out_dir`), an incompatible
            checkpoint, a diverged run (:class:`~seq2seq.train.module.TrainingDiverged`).
    """
    from seq2seq.core import check_accelerator, check_paths, check_strategy
    from seq2seq.data import TranslationDataModule
    from seq2seq.train.module import TranslationModule, check_training_config
    from seq2seq.train.stopping import SignalStop, stopped
    from seq2seq.train.validation import monitor_mode

    check_training_config(cfg)
    cfg.validate_training()
    t = cfg.training
    check_accelerator(t.accelerator, t.devices)
    check_strategy(t.strategy)
    out_dir = Path(out_dir)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    last = ckpt_dir / LAST
    rank = _global_rank()
    if resume:
        if force:
            raise UserError("--force starts a new run: give it with --out DIR, not --resume")
        if not last.is_file():
            raise UserError(f"nothing to resume: {last} is missing")
    elif rank == 0:
        _check_new_run(out_dir, force=force)
    dm = TranslationDataModule(cfg, out_dir, mirror=mirror, cache_dir=cache_dir, resume=resume)
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
    if t.precision in ("auto", "bf16-native") and rank == 0:
        print(
            f"training.precision {t.precision}: {choice.precision} ({choice.reason})",
            file=sys.stderr,
        )
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
    dearer_from = t.rdrop_start if t.two_passes else 0  # two passes an update from here
    callbacks: list = [
        checkpointer,
        signal_stop,
        StepProgressBar()
        if progress
        else TextProgress(every=t.log_every_steps, pace_changes_at=dearer_from),
        RunLines(),
    ]
    if t.expected_step_s > 0 or (t.max_time is not None and t.max_steps > 0):
        # the expected duration and the slow-run warning; with a time guard, whether the
        # guard stops the run before its last update (said within its first 100 updates)
        callbacks.append(
            PaceWatch(
                expected_step_s=t.expected_step_s,
                machine=t.expected_machine,
                pace_changes_at=dearer_from,
            )
        )
    if t.patience > 0:
        callbacks.append(
            EarlyStopping(
                monitor=monitor,
                mode=monitor_mode(t.val_metric),
                patience=t.patience,
                check_on_train_epoch_end=False,
            )
        )
    with warnings.catch_warnings(), quiet_lightning():  # our lines, not Lightning's
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


def _check_new_run(out_dir: Path, *, force: bool) -> None:
    """A new run never writes over a model or a run (a trained, converted or averaged
    model directory) unless ``force``, which deletes that folder first."""
    from seq2seq.core import discard_dir, printable
    from seq2seq.model import check_out_dir, held_model_files

    ckpt_dir = out_dir / CHECKPOINT_DIR
    run = ckpt_dir.is_dir() and any(ckpt_dir.glob("*.ckpt"))
    if run and not force:
        shown = printable(str(out_dir))
        raise UserError(
            f"--out {shown} already holds a training run ({printable(str(ckpt_dir))}); continue "
            f"it with `seq2seq train --resume {shown}`, pass --force to start over, or choose "
            "another --out"
        )
    check_out_dir(out_dir, force=force, whole=False)
    if force and (run or held_model_files(out_dir)):
        discard_dir(out_dir)
        print(f"--force: deleted the previous {out_dir}", file=sys.stderr)


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
        enable_model_summary=False,  # RunLines says the model's size in one line
        default_root_dir=str(out_dir),
        num_sanity_val_steps=1,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=str(last) if resume else None, weights_only=True)
    return trainer
