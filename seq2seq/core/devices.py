"""What torch can actually run on here: ``--device`` and ``training.accelerator`` checked up front.

``seq2seq translate --device cuda`` on a CPU build of torch, or ``training.accelerator=gpu``
on a machine without a GPU, would otherwise fail deep inside torch or Lightning after the
model is loaded or the data prepared. :func:`check_device` and :func:`check_accelerator` turn
that into one line naming the option, what was asked for and what this torch has.
"""

from __future__ import annotations

from seq2seq.core.errors import UserError

__all__ = ["available", "check_accelerator", "check_device", "check_strategy"]


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _mps() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available() -> str:
    """What this torch can use, in words (for error messages)."""
    import torch

    parts = ["cpu"]
    n = _cuda_count()
    if n:
        parts.append(f"cuda (devices 0-{n - 1})" if n > 1 else "cuda (device 0)")
    if _mps():
        parts.append("mps")
    build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
    return f"{', '.join(parts)} (torch {torch.__version__}, {build})"


def check_device(device: str, *, what: str = "--device") -> str:
    """Check a torch device string (``cpu``, ``cuda``, ``cuda:1``, ``mps``) against this machine.

    Returns:
        ``device`` unchanged.

    Raises:
        UserError: a string torch does not parse, or a device this torch cannot use.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise UserError(
            f"{what} {device!r} is not a torch device (e.g. cpu, cuda, cuda:1, mps); "
            f"this machine has {available()}"
        ) from None
    if dev.type == "cpu":
        return device
    if dev.type == "cuda":
        n = _cuda_count()
        if n == 0 or (dev.index is not None and dev.index >= n):
            raise UserError(f"{what} {device}: no such CUDA device; this machine has {available()}")
        return device
    if dev.type == "mps" and _mps():
        return device
    raise UserError(f"{what} {device}: torch cannot use it here; this machine has {available()}")


def _device_count(devices: str) -> int | None:
    """How many devices ``training.devices`` asks for (None: ``auto`` or ``-1``, all of them)."""
    value = devices.strip()
    if value in ("auto", "-1"):
        return None
    if "," in value:
        return len([p for p in value.split(",") if p.strip()])
    return int(value)


def check_accelerator(accelerator: str, devices: str) -> None:
    """Check ``training.accelerator`` / ``training.devices`` against what torch can use.

    The values were parsed when the config was loaded (:meth:`TrainingConfig.validate`);
    this checks the machine. ``auto`` is always fine (Lightning picks what there is).

    Raises:
        UserError: a GPU asked for where torch has none (or fewer than ``devices``), MPS on a
            machine without it, a TPU without torch_xla.
    """
    if accelerator in ("auto", "cpu"):
        return
    wanted = _device_count(devices)
    if accelerator in ("gpu", "cuda"):
        have = _cuda_count()
        if have == 0 and not _mps():
            raise UserError(
                f"training.accelerator={accelerator}, but torch finds no GPU; this machine has "
                f"{available()} (use training.accelerator=cpu or auto)"
            )
        if have and wanted is not None and wanted > have:
            raise UserError(
                f"training.devices={devices} asks for {wanted} GPUs, but torch finds {have}"
            )
        return
    if accelerator == "mps":
        if not _mps():
            raise UserError(f"training.accelerator=mps, but this machine has {available()}")
        return
    if accelerator == "tpu":
        import importlib.util

        if importlib.util.find_spec("torch_xla") is None:
            raise UserError(
                f"training.accelerator=tpu needs torch_xla, which is not installed; this "
                f"machine has {available()}"
            )


def check_strategy(strategy: str) -> None:
    """Check ``training.strategy`` against the strategies Lightning knows.

    Raises:
        UserError: an unknown name, with the valid ones listed.
    """
    from pytorch_lightning.strategies import StrategyRegistry

    known = ["auto", *sorted(StrategyRegistry.available_strategies())]
    if strategy not in known:
        raise UserError(f"training.strategy is {strategy!r}; expected one of {', '.join(known)}")
