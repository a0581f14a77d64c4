"""The model being served: loading it on the engine thread, and what ``GET /v1/models`` and
``GET /languages`` say about it (:class:`ModelInfo`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seq2seq.core import UserError

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["ModelInfo", "load_translator", "model_info"]


@dataclass(frozen=True)
class ModelInfo:
    """What ``GET /v1/models`` says about the served model.

    Attributes:
        id: a name for the model (its folder's name).
        path: the model directory or export folder.
        engine: torch, ctranslate2 or onnx.
        source: source language code (from the config's ``data.pair``).
        target: target language code.
        parameters: number of parameters (torch engine; None for exports).
        size_bytes: bytes of the weight files.
        manifest_sha256: a model directory's manifest hash (its content sha256), or the
            sha256 of an export's export.json (which lists every file's sha256).
        max_positions: the longest source (and target) the model takes, in tokens.
        attention: whether ``/v1/attention`` works (the torch engine has the weights).
    """

    id: str
    path: str
    engine: str
    source: str
    target: str
    parameters: int | None
    size_bytes: int
    manifest_sha256: str | None
    max_positions: int
    attention: bool


def _pair(cfg) -> tuple[str, str]:
    pair = getattr(getattr(cfg, "data", None), "pair", "") or ""
    src, sep, tgt = pair.partition("-")
    if not sep or not src or not tgt:
        raise UserError(f"the model's data.pair {pair!r} is not of the form src-tgt")
    return src.lower(), tgt.lower()


def model_info(translator, model_dir: str | Path, engine: str) -> ModelInfo:
    """Describe a loaded translator for ``/v1/models`` and ``/languages``.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator`.
        model_dir: the folder it was loaded from.
        engine: its engine's name.

    Raises:
        UserError: the model's ``data.pair`` is not of the form ``src-tgt``.
    """
    path = Path(model_dir)
    src, tgt = _pair(translator.cfg)
    weights = [p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".onnx")]
    manifest = path / "manifest.json"
    digest = None
    if manifest.is_file():
        try:
            digest = json.loads(manifest.read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError):
            digest = None
    elif (path / "export.json").is_file():
        digest = hashlib.sha256((path / "export.json").read_bytes()).hexdigest()
    model = getattr(translator.engine, "model", None)
    parameters = None
    if model is not None and hasattr(model, "parameters"):
        parameters = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return ModelInfo(
        id=path.resolve().name,
        path=str(path.resolve()),
        engine=engine,
        source=src,
        target=tgt,
        parameters=parameters,
        size_bytes=sum(p.stat().st_size for p in weights),
        manifest_sha256=digest,
        max_positions=translator.max_src_positions,
        attention=model is not None and hasattr(model, "forward_with_attention"),
    )


def load_translator(
    model_dir: str | Path,
    *,
    engine: str,
    device: str,
    search: dict[str, object],
    executor: ThreadPoolExecutor,
) -> tuple[Any, ModelInfo]:
    """Load ``model_dir`` and warm it up on ``executor``'s thread, the one that will run
    every engine call (:func:`seq2seq.serve.batcher.engine_thread` says why).

    Args:
        model_dir: a model directory, or an export folder for ``ctranslate2`` / ``onnx``.
        engine: the Translator's engine.
        device: torch device (cpu, cuda).
        search: search-option defaults (None = the model's config), as ``seq2seq translate``.
        executor: the engine thread.

    Returns:
        The translator and its :class:`ModelInfo`.
    """

    def load():
        from seq2seq.decode import Translator

        translator = Translator.load(model_dir, device=device, engine=engine, **search)
        info = model_info(translator, model_dir, engine)
        translator.translate([info.source])  # warm-up: the first call pays for lazy set-up
        return translator, info

    return executor.submit(load).result()
