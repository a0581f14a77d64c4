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

__all__ = [
    "EXPORTS_FOLDER",
    "ModelInfo",
    "choose_engine",
    "held_export",
    "load_translator",
    "model_info",
]

EXPORTS_FOLDER = "export"
"""Where a model directory holds its exports: ``MODEL_DIR/export/NAME/`` (``make demo`` writes
``runs/demo/averaged/export/ctranslate2-int8``)."""

_PREFERRED = ("int8", "int8_float32", "none", "float16")  # on a CPU: int8 is the fastest


@dataclass(frozen=True)
class ModelInfo:
    """What ``GET /v1/models`` says about the served model.

    Attributes:
        id: a name for the model (its folder's name).
        path: the model directory or export folder.
        engine: torch, ctranslate2 or onnx.
        source: the first direction's source language (``directions[0][0]``).
        target: the first direction's target language.
        parameters: number of parameters (torch engine; None for exports).
        size_bytes: bytes of the weight files.
        manifest_sha256: a model directory's manifest hash (its content sha256), or the
            sha256 of an export's export.json (which lists every file's sha256).
        max_positions: the longest source (and target) the model takes, in tokens.
        attention: whether ``/v1/attention`` works (the torch engine has the weights).
        directions: every ``(source, target)`` the model translates (the config's
            ``data.directions``), what ``/languages``, ``/detect`` and the pair check read.
        members: the model directories of an ensemble (empty for one model).
        many: a many-language model's languages (M2M100, NLLB-200) as LibreTranslate codes
            (:func:`seq2seq.data.libre_code`): it translates between any two of them, and
            ``directions`` holds its default direction only.
        model_codes: the model's own code of each of ``many``.
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
    directions: tuple[tuple[str, str], ...] = ()
    members: tuple[str, ...] = ()
    many: tuple[str, ...] = ()
    model_codes: tuple[str, ...] = ()

    def sources(self, target: str | None = None) -> list[str]:
        """The source languages (that translate into ``target``, when given), in order."""
        if self.many:
            return [x for x in self.many if x != target]
        return list(dict.fromkeys(s for s, t in self.directions if target in (None, t)))

    def targets(self, source: str) -> list[str]:
        """The languages ``source`` translates into, in order."""
        if self.many:
            return [x for x in self.many if x != source] if source in self.many else []
        return [t for s, t in self.directions if s == source]

    def languages(self) -> list[str]:
        """Every language the model reads or writes, sources first."""
        if self.many:
            return list(self.many)
        return list(dict.fromkeys([x for d in self.directions for x in d]))

    def resolve(self, code: str, what: str) -> str:
        """A many-language model's LibreTranslate code for ``code`` (the model's own code,
        ISO 639-1, LibreTranslate's); UserError naming close codes for an unknown one."""
        from seq2seq.data import libre_code, resolve_language

        model = resolve_language(code, self.model_codes, what=what)
        return libre_code(model, self.model_codes)


def _directions(cfg) -> tuple[tuple[str, str], ...]:
    data = getattr(cfg, "data", None)
    directions = tuple(data.directions) if data is not None else ()
    if not directions:
        pair = getattr(data, "pair", "")
        raise UserError(f"the model's data.pair {pair!r} is not of the form src-tgt")
    return directions


def model_info(translator, model_dir: str | Path | list, engine: str) -> ModelInfo:
    """Describe a loaded translator for ``/v1/models`` and ``/languages``.

    Args:
        translator: a loaded :class:`~seq2seq.decode.translator.Translator`.
        model_dir: the folder it was loaded from (a list of folders: an ensemble).
        engine: its engine's name.

    Raises:
        UserError: the model describes no language direction (``data.pair``).
    """
    members = (
        tuple(str(Path(d).resolve()) for d in model_dir) if isinstance(model_dir, list) else ()
    )
    path = Path(model_dir[0] if isinstance(model_dir, list) else model_dir)
    directions = _directions(translator.cfg)
    codes = tuple(getattr(translator, "languages", ()) or ())
    many: tuple[str, ...] = ()
    if codes:  # M2M100 / NLLB: between any two of its languages, by LibreTranslate's codes
        from seq2seq.data import libre_code

        many = tuple(libre_code(c, codes) for c in codes)
        default = translator.direction(None, None)
        directions = (tuple(libre_code(c, codes) for c in default),)
    src, tgt = directions[0]
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
    name = path.resolve().name
    return ModelInfo(
        id=name if not members else "+".join(Path(m).name for m in members),
        path=str(path.resolve()),
        engine=engine,
        source=src,
        target=tgt,
        parameters=parameters,
        size_bytes=sum(p.stat().st_size for p in weights),
        manifest_sha256=digest,
        max_positions=translator.max_src_positions,
        attention=model is not None and hasattr(model, "forward_with_attention"),
        directions=directions,
        members=members,
        many=many,
        model_codes=codes,
    )


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held_export(model_dir: str | Path, engine: str = "ctranslate2") -> Path | None:
    """The export of ``model_dir``'s own weights that it holds under :data:`EXPORTS_FOLDER`.

    An export counts when its export.json names ``engine`` and the sha256 of the weights it was
    made from equals the one in the model directory's manifest (an export left over from
    earlier weights is ignored). Of several, int8 first (then int8_float32, float32, float16),
    then by name.

    Args:
        model_dir: a model directory.
        engine: the export's engine.

    Returns:
        The export folder, or None.
    """
    path = Path(model_dir)
    weights = _read_json(path / "manifest.json").get("files", {}).get("model.safetensors")
    folder = path / EXPORTS_FOLDER
    if not weights or not folder.is_dir():
        return None
    found = []
    for export in sorted(folder.iterdir()):
        info = _read_json(export / "export.json")
        source = info.get("source_model") or {}
        if info.get("engine") == engine and source.get("weights_sha256") == weights:
            q = info.get("quantization", "none")
            found.append((_PREFERRED.index(q) if q in _PREFERRED else len(_PREFERRED), export))
    return min(found)[1] if found else None


def choose_engine(model_dirs: list[str | Path], engine: str | None) -> tuple[str, list[Path]]:
    """The engine to serve with and the folder(s) it reads.

    ``engine`` None chooses: an export folder's own engine; for one model directory, the
    CTranslate2 export it holds (:func:`held_export`), else torch; several directories are an
    ensemble on torch. ``ctranslate2`` or ``onnx`` with a model directory reads the export of
    that engine it holds.

    Args:
        model_dirs: the folders on the command line.
        engine: ``--engine``, or None.

    Raises:
        UserError: an ensemble on an engine that cannot run one; ``--engine ctranslate2`` or
            ``onnx`` with a model directory that holds no such export.
    """
    dirs = [Path(d) for d in model_dirs]
    if len(dirs) > 1:
        if engine not in (None, "torch", "torch-nocache", "torch-bf16", "torch-int8"):
            raise UserError(f"an ensemble is served with --engine torch, not {engine}")
        return engine or "torch", dirs
    (path,) = dirs
    exported = _read_json(path / "export.json").get("engine")
    if exported:  # an export folder
        return engine or str(exported), dirs
    if engine in (None, "ctranslate2", "onnx"):
        held = held_export(path, engine or "ctranslate2")
        if held is not None:
            return engine or "ctranslate2", [held]
        if engine is not None:
            raise UserError(
                f"{path} is a model directory and holds no {engine} export of its weights "
                f"(make one with `seq2seq export {path} --format {engine} --out "
                f"{path / EXPORTS_FOLDER / engine}`), or give the export folder itself"
            )
    return engine or "torch", dirs


def load_translator(
    model_dir: str | Path | list[Path],
    *,
    engine: str,
    device: str,
    search: dict[str, object],
    executor: ThreadPoolExecutor,
) -> tuple[Any, ModelInfo]:
    """Load ``model_dir`` and warm it up on ``executor``'s thread, the one that will run
    every engine call (:func:`seq2seq.serve.batcher.engine_thread` says why).

    Args:
        model_dir: a model directory, or an export folder for ``ctranslate2`` / ``onnx``; a
            list of several model directories: an ensemble.
        engine: the Translator's engine.
        device: torch device (cpu, cuda).
        search: search-option defaults (None = the model's config), as ``seq2seq translate``.
        executor: the engine thread.

    Returns:
        The translator and its :class:`ModelInfo`.
    """

    def load():
        from seq2seq.decode import Translator

        dirs = model_dir if isinstance(model_dir, list) and len(model_dir) > 1 else None
        one = model_dir[0] if isinstance(model_dir, list) and not dirs else model_dir
        translator = Translator.load(dirs or one, device=device, engine=engine, **search)
        info = model_info(translator, dirs or one, engine)
        # warm-up: the first call pays for lazy set-up (in the first direction: a multilingual
        # model needs one named)
        translator.translate([info.source], source_lang=info.source, target_lang=info.target)
        return translator, info

    return executor.submit(load).result()
