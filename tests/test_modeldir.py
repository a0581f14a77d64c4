"""Model directories: checksummed, versioned, pickle-free; tampering is a clear UserError.

Each test works on its own copy of a tiny model directory (tests/factories.py).
"""

from __future__ import annotations

import builtins
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from factories import make_model_dir
from safetensors.torch import load_file

from seq2seq.cli import main
from seq2seq.config.loading import load_config
from seq2seq.core.files import sha256_file
from seq2seq.model.directory import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ModelDirError,
    _content_sha256,
    load_model_dir,
    safetensors_bytes,
    save_model_dir,
    state_dict_for_saving,
    verify_model_dir,
    write_manifest,
)

FILES = ("config.yaml", "spm.model", "model.safetensors", "manifest.json")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """An untrained tiny model directory; tests copy it before changing anything."""
    return make_model_dir(tmp_path_factory.mktemp("pristine") / "model")


@pytest.fixture
def model_dir(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "model"))


class Payload:
    """Unpickling this runs code: it creates ``marker`` (what a hostile model file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


def write_hostile_pickle(path: Path, marker: Path) -> None:
    """A torch.save'd file whose loading with ``weights_only=False`` creates ``marker``."""
    torch.save({"encoder.embedding.weight": torch.zeros(2, 2), "evil": Payload(marker)}, path)


def rewrite_manifest(model_dir: Path, files: dict[str, str], **fields) -> None:
    """A manifest that is self-consistent (its own sha256 matches) but says what we want."""
    manifest = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "files": files, **fields}
    manifest["sha256"] = _content_sha256(manifest)
    (model_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


# ---- the format ------------------------------------------------------------------------------


def test_manifest_has_format_version_and_every_checksum(model_dir: Path) -> None:
    manifest = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["format"] == FORMAT_NAME and manifest["version"] == FORMAT_VERSION
    assert set(manifest["files"]) == {"config.yaml", "spm.model", "model.safetensors"}
    for name, digest in manifest["files"].items():
        assert digest == sha256_file(model_dir / name)
    assert manifest["sha256"] == _content_sha256(manifest)
    assert verify_model_dir(model_dir) == manifest


def test_save_and_load_round_trip_gives_the_same_model(model_dir: Path, tmp_path: Path) -> None:
    loaded = load_model_dir(model_dir)
    assert not loaded.model.training
    out = tmp_path / "copy"
    out.mkdir()
    shutil.copyfile(model_dir / "spm.model", out / "spm.model")
    save_model_dir(out, loaded.model, loaded.cfg)
    again = load_model_dir(out)
    a, b = state_dict_for_saving(loaded.model), state_dict_for_saving(again.model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert again.cfg == loaded.cfg
    # tied output projection restored by construction, not stored twice
    assert "output_proj.weight" not in a
    assert again.model.output_proj.weight is again.model.decoder.embedding.weight


def test_state_dict_for_saving_works_on_the_meta_device(model_dir: Path) -> None:
    from seq2seq.model.directory import _unique_state
    from seq2seq.model.transformer import build_model

    cfg = load_config(model_dir / "config.yaml")
    real = build_model(cfg.model, src_vocab_size=100, tgt_vocab_size=100, pad_id=0)
    with torch.device("meta"):
        meta = build_model(cfg.model, src_vocab_size=100, tgt_vocab_size=100, pad_id=0)
    real_state = state_dict_for_saving(real)
    meta_state = _unique_state(meta)
    assert list(meta_state) == list(real_state)  # data pointers are all 0 on meta: not used
    assert all(meta_state[k].shape == real_state[k].shape for k in real_state)


# ---- tampering: each file truncated, altered or deleted -----------------------------------------


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _delete(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize(
    "damage", [_truncate, _flip, _delete], ids=["truncated", "flipped", "deleted"]
)
def test_a_damaged_file_is_a_user_error_naming_it(model_dir: Path, name: str, damage) -> None:
    damage(model_dir / name)
    with pytest.raises(ModelDirError) as e:
        load_model_dir(model_dir)
    message = str(e.value)
    assert str(model_dir / name) in message
    assert "\n" not in message
    others = [f for f in FILES if f != name]
    assert not any(str(model_dir / f) in message for f in others)


def test_any_bit_flip_in_the_manifest_names_the_manifest(model_dir: Path) -> None:
    """Flipping a hash digit must not blame the file the hash belongs to."""
    path = model_dir / "manifest.json"
    original = path.read_bytes()
    for i in range(len(original)):
        for bit in (0x01, 0x20):
            data = bytearray(original)
            data[i] ^= bit
            path.write_bytes(bytes(data))
            with pytest.raises(ModelDirError, match="manifest.json"):
                verify_model_dir(model_dir)
    path.write_bytes(original)
    verify_model_dir(model_dir)


def test_cli_translate_on_a_tampered_directory_is_one_line_exit_2(
    model_dir: Path, tmp_path: Path, capsys
) -> None:
    _flip(model_dir / "model.safetensors")
    src = tmp_path / "in.txt"
    src.write_text("a man\n", encoding="utf-8")
    assert main(["translate", str(model_dir), "-i", str(src), "--greedy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seq2seq translate: error: ")
    assert f"{model_dir / 'model.safetensors'} is corrupt or was altered" in err[0]


def test_missing_directory_and_unsupported_version(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match="model directory not found"):
        load_model_dir(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelDirError, match="manifest.json is missing"):
        load_model_dir(empty)
    files = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))["files"]
    rewrite_manifest(model_dir, files, version=FORMAT_VERSION + 1)
    with pytest.raises(
        ModelDirError, match=f"format version {FORMAT_VERSION + 1} is not supported"
    ):
        load_model_dir(model_dir)


def test_manifest_cannot_point_outside_or_leave_files_unverified(model_dir: Path) -> None:
    files = json.loads((model_dir / "manifest.json").read_text(encoding="utf-8"))["files"]
    rewrite_manifest(model_dir, {**files, "../config.yaml": files["config.yaml"]})
    with pytest.raises(ModelDirError, match="outside the directory"):
        load_model_dir(model_dir)
    # a manifest that does not vouch for the SentencePiece model: the model is not loaded
    rewrite_manifest(model_dir, {k: v for k, v in files.items() if k != "spm.model"})
    with pytest.raises(ModelDirError, match="lists no SentencePiece model"):
        load_model_dir(model_dir)


def test_unlisted_extra_files_are_never_read(model_dir: Path) -> None:
    """Stray files (another tokenizer pair, a pickled model) beside a valid directory are ignored."""
    (model_dir / "spm.src.model").write_bytes(b"not a sentencepiece model")
    (model_dir / "spm.tgt.model").write_bytes(b"not a sentencepiece model")
    (model_dir / "model.pt").write_bytes(b"not a pickle")
    loaded = load_model_dir(model_dir)
    assert [p.name for p in loaded.tokenizer.files] == ["spm.model"]


# ---- hostile content with a matching manifest: no code runs -----------------------------------


def test_pickled_weights_are_refused_and_never_run(model_dir: Path, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    weights = model_dir / "model.safetensors"
    write_hostile_pickle(weights, marker)
    # the payload is real: an unsafe load would run it
    with open(weights, "rb") as f:  # a file object: torch.load would route the name to safetensors
        torch.load(f, weights_only=False)
    assert marker.exists()
    marker.unlink()
    write_manifest(model_dir)  # checksums match: the checksum is not what stops it
    verify_model_dir(model_dir)
    with pytest.raises(ModelDirError, match="model.safetensors is not a safetensors file"):
        load_model_dir(model_dir)
    assert not marker.exists()


def test_a_python_tag_in_the_config_is_refused_and_never_runs(
    model_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    config = model_dir / "config.yaml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f"evil: !!python/object/apply:os.system ['touch {marker}']\n",
        encoding="utf-8",
    )
    write_manifest(model_dir)
    with pytest.raises(ModelDirError, match="config.yaml"):
        load_model_dir(model_dir)
    assert not marker.exists()


def test_a_config_that_does_not_fit_the_weights_allocates_nothing(
    model_dir: Path, monkeypatch
) -> None:
    """A huge d_model in the config is found from the safetensors header, on the meta device."""
    import seq2seq.model.directory as modeldir

    config = model_dir / "config.yaml"
    cfg = load_config(config, ["model.d_model=65536", "model.n_heads=2"])
    from seq2seq.config.loading import dump_config

    config.write_text(dump_config(cfg), encoding="utf-8")
    write_manifest(model_dir)
    devices = []
    real_build = modeldir.build_model

    def spy(*args, **kwargs):
        devices.append(torch.get_default_device().type)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(modeldir, "build_model", spy)
    with pytest.raises(ModelDirError) as e:
        load_model_dir(model_dir)
    assert "model.safetensors" in str(e.value) and "config.yaml" in str(e.value)
    assert "65536" in str(e.value)
    assert devices == ["meta"]  # the real model (13 GB of weights) was never built


def test_an_invalid_model_section_is_a_model_dir_error(model_dir: Path) -> None:
    config = model_dir / "config.yaml"
    config.write_text(
        config.read_text(encoding="utf-8").replace("n_heads: 2", "n_heads: 3"), encoding="utf-8"
    )
    write_manifest(model_dir)
    with pytest.raises(ModelDirError, match=r"model.n_heads in \S+config.yaml must divide"):
        load_model_dir(model_dir)


def test_integer_weights_are_refused(model_dir: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = model_dir / "model.safetensors"
    tensors = load_file(str(weights))
    name = "encoder.embedding.weight"
    tensors[name] = tensors[name].to(torch.int64)
    save_file(tensors, str(weights))
    write_manifest(model_dir)
    with pytest.raises(ModelDirError, match=f"{name} has dtype I64"):
        load_model_dir(model_dir)


# ---- inference never unpickles ---------------------------------------------------------------


def _forbid_unpickling(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("an inference path unpickled something")

    class GuardedUnpickler(pickle.Unpickler):  # still subclassable (torch does, on import)
        def load(self):
            refuse()

    monkeypatch.setattr(pickle, "Unpickler", GuardedUnpickler)
    for name in ("load", "loads"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    monkeypatch.setattr(torch.serialization, "load", refuse)


def test_translate_evaluate_plot_and_export_never_unpickle(
    model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    from seq2seq.decode.translator import Translator
    from seq2seq.evaluate.evaluation import evaluate
    from seq2seq.evaluate.plots import attention_maps
    from seq2seq.export.exporter import export_model

    src, ref = tmp_path / "t.src", tmp_path / "t.ref"
    src.write_text("a man\nthe dog runs\n", encoding="utf-8")
    ref.write_text("a man\nthe dog runs\n", encoding="utf-8")
    _forbid_unpickling(monkeypatch)
    with pytest.raises(AssertionError):
        torch.load(model_dir / "model.safetensors")  # the guard works

    translator = Translator.load(model_dir, method="greedy", max_len_b=5)
    assert len(translator.translate(["a man", "two cats"])) == 2
    result = evaluate(
        model_dir, src=src, ref=ref, out_dir=tmp_path / "eval", method="greedy", max_len_b=5
    )
    assert result["n_sentences"] == 2
    maps = attention_maps(load_model_dir(model_dir), "a man", layer=None, head=None, target=None)
    assert maps.source
    pytest.importorskip("ctranslate2")
    out = export_model(
        model_dir, tmp_path / "ct2", fmt="ctranslate2", quantization="none", opset=17, force=False
    )
    ct2 = Translator.load(out, engine="ctranslate2", method="greedy", max_len_b=5)
    assert len(ct2.translate(["a man", "two cats"])) == 2
    pytest.importorskip("onnxruntime")
    out = export_model(model_dir, tmp_path / "onnx", fmt="onnx", opset=17)
    onnx = Translator.load(out, engine="onnx", method="greedy", max_len_b=5)
    assert len(onnx.translate(["a man", "two cats"])) == 2


def test_loading_a_model_leaves_torch_dynamo_unimported(model_dir: Path) -> None:
    """The shapes-only model built on the meta device (to check the weights' header) fills no
    tensor: torch's meta ``normal_`` and ``arange`` import ``torch._dynamo``, seconds at the
    start of every command that loads a model."""
    code = (
        "import sys; from seq2seq.model.directory import load_model_dir; "
        f"load_model_dir({str(model_dir)!r}); print('torch._dynamo' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_each_stored_tensor_is_read_once_into_the_model(model_dir: Path, monkeypatch) -> None:
    """Weights load one tensor at a time, each stored tensor read once, straight into the
    parameter it fills (memory: the model, not the model twice), and a tied tensor reaches
    every alias."""
    from seq2seq.model.tensor_files import SafetensorsReader

    reads = []
    read = SafetensorsReader.read

    def counted(self, name, out=None):
        got = read(self, name, out=out)
        reads.append((name, out is not None and got.data_ptr() == out.data_ptr()))
        return got

    monkeypatch.setattr(SafetensorsReader, "read", counted)
    loaded = load_model_dir(model_dir)
    monkeypatch.undo()
    stored = load_file(str(model_dir / "model.safetensors"))
    assert sorted(reads) == sorted((name, True) for name in stored)
    state = loaded.model.state_dict()
    for name, tensor in stored.items():
        assert torch.equal(state[name], tensor), name


def test_streamed_safetensors_are_the_library_file_and_read_back(tmp_path: Path) -> None:
    """``write_safetensors`` writes what safetensors' own ``save`` writes (header made
    canonical), for every dtype a model directory may hold; the reader reads each tensor back,
    into a given tensor when the dtype agrees, and refuses a truncated file."""
    import struct

    from safetensors.torch import save

    from seq2seq.model.tensor_files import SafetensorsReader

    g = torch.Generator().manual_seed(0)
    tensors = {
        "b.w": torch.randn(3, 4, generator=g),
        "a": torch.randn(5, generator=g).half(),
        "c": torch.randn(2, 2, generator=g).bfloat16(),
        "d": torch.randn(2, generator=g).double(),
        "i": torch.arange(7),
        "j": torch.arange(3, dtype=torch.int32),
        "m": torch.tensor([True, False]),
        "u": torch.arange(3, dtype=torch.uint8),
        "e": torch.zeros(0, 3),
        "s": torch.tensor(1.5),
    }
    metadata = {"format": "x", "version": "1"}
    data = save(tensors, metadata=metadata)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.dumps(json.loads(data[8 : 8 + n]), sort_keys=True, separators=(",", ":"))
    header = header.encode() + b" " * (-len(header) % 8)
    assert (
        safetensors_bytes(tensors, metadata)
        == struct.pack("<Q", len(header)) + header + data[8 + n :]
    )
    path = tmp_path / "t.safetensors"
    path.write_bytes(safetensors_bytes(tensors, metadata))
    with SafetensorsReader(path) as f:
        assert f.metadata == metadata and set(f.keys()) == set(tensors)
        for name, tensor in tensors.items():
            assert torch.equal(f.read(name), tensor) and f.read(name).dtype == tensor.dtype
        into = torch.empty(3, 4)
        assert f.read("b.w", out=into) is into and torch.equal(into, tensors["b.w"])
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ValueError, match="do not fit"):
        SafetensorsReader(path)
