"""Export to CTranslate2 and ONNX: the exported models translate exactly like the torch model."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import make_model_dir, synthetic_pairs

from seq2seq.cli import main
from seq2seq.core.errors import UserError
from seq2seq.decode.ctranslate2_engine import CTranslate2Engine
from seq2seq.decode.onnx_engine import OnnxEngine
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.translator import Translator
from seq2seq.export.ctranslate2 import export_ctranslate2
from seq2seq.export.exporter import export_model
from seq2seq.export.format import ExportError
from seq2seq.export.onnx import export_onnx
from seq2seq.model.directory import load_model_dir

pytest.importorskip("ctranslate2")
pytest.importorskip("onnxruntime")

# Two trained variants cover pre-/post-norm, shared/separate vocabularies and embeddings,
# sinusoidal/learned positions, relu/gelu, one and two layers.
VARIANTS = {
    "prenorm-shared-sinusoidal": (),
    "postnorm-separate-learned": (
        "data.joint_vocab=false",
        "model.share_embeddings=false",
        "model.tie_output=false",
        "model.norm_first=false",
        "model.positions=learned",
        "model.activation=gelu",
        "model.n_encoder_layers=2",
        "model.n_decoder_layers=2",
    ),
}
TRAIN_STEPS = 150
SENTENCES = [s for s, _ in synthetic_pairs(24, seed=7)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """Per variant: the model directory and its float32 CTranslate2 and ONNX exports."""
    out = {}
    for name, overrides in VARIANTS.items():
        root = tmp_path_factory.mktemp(name)
        model_dir = make_model_dir(root / "model", cfg_overrides=overrides, train_steps=TRAIN_STEPS)
        out[name] = {
            "torch": model_dir,
            "ctranslate2": export_ctranslate2(model_dir, root / "ct2"),
            "onnx": export_onnx(model_dir, root / "onnx"),
        }
    return out


def _search(folder, engine: str, opts: SearchOptions):
    translator = Translator.load(folder, engine=engine)
    src = translator.encode(SENTENCES)
    return translator.engine.translate_ids(src, opts)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_output_is_token_identical_on_every_engine(exported, variant):
    dirs = exported[variant]
    greedy = SearchOptions(method="greedy")
    reference = _search(dirs["torch"], "torch", greedy)
    tokens = [h[0].tokens for h in reference]
    assert len({tuple(t) for t in tokens}) > len(tokens) // 2  # a trained, input-dependent model
    for engine in ("ctranslate2", "onnx"):
        hyps = _search(dirs[engine], engine, greedy)
        assert [h[0].tokens for h in hyps] == tokens, engine
        for ref, got in zip(reference, hyps):
            # ONNX runs seq2seq's own search: the same scores. CTranslate2 renormalizes without EOS
            # at the min_len step (seq2seq/decode/ctranslate2_engine.py says so): slightly higher scores.
            if engine == "onnx":
                assert got[0].score == pytest.approx(ref[0].score, abs=1e-4)
            else:
                assert ref[0].score - 1e-4 <= got[0].score <= ref[0].score + 0.05


def test_ctranslate2_parallel_workers_keep_outputs_and_order(exported):
    # On CPU the engine runs one single-threaded worker per thread, each on sub-batches of
    # CT2_SUB_BATCH sentences; 150 sentences give three sub-batches spread over two workers.
    dirs = exported["prenorm-shared-sinusoidal"]
    sentences = [s for s, _ in synthetic_pairs(150, seed=11)]
    translator = Translator.load(dirs["torch"], engine="torch")
    src = translator.encode(sentences)
    greedy = SearchOptions(method="greedy")
    reference = [h[0].tokens for h in translator.engine.translate_ids(src, greedy)]
    two = CTranslate2Engine(dirs["ctranslate2"], threads=2)
    assert two.sub_batch < len(src) and two.batches_per_call > 1
    assert [h[0].tokens for h in two.translate_ids(src, greedy)] == reference
    one = CTranslate2Engine(dirs["ctranslate2"], threads=1)
    assert one.sub_batch == 0 and one.batches_per_call == 1
    assert [h[0].tokens for h in one.translate_ids(src, greedy)] == reference
    # A call smaller than two sub-batches is split evenly, so both workers get work (one
    # sub-batch of 30 would leave a core idle); a large one keeps CT2_SUB_BATCH.
    assert [two._sub_batch(n) for n in (1, 2, 3, 30, 128, 1000)] == [1, 1, 2, 15, 64, 64]
    assert one._sub_batch(30) == 0  # one worker: the whole call at once
    assert [h[0].tokens for h in two.translate_ids(src[:30], greedy)] == reference[:30]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_beam_nbest_and_scores_agree(exported, variant):
    dirs = exported[variant]
    beam = SearchOptions(method="beam", beam_size=4, nbest=3, len_penalty=0.8)
    reference = _search(dirs["torch"], "torch", beam)
    onnx = _search(dirs["onnx"], "onnx", beam)
    for ref, got in zip(reference, onnx):  # same search code: the same n-best lists
        assert [h.tokens for h in got] == [h.tokens for h in ref]
        assert [h.score for h in got] == pytest.approx([h.score for h in ref], abs=1e-4)
    ct2 = CTranslate2Engine(dirs["ctranslate2"], exact_scores=True)
    translator = Translator.load(dirs["ctranslate2"], engine="ctranslate2")
    hyps = ct2.translate_ids(translator.encode(SENTENCES), beam)
    same_top = [ref[0].tokens == got[0].tokens for ref, got in zip(reference, hyps)]
    assert sum(same_top) >= 0.9 * len(same_top)
    for ref, got in zip(reference, hyps):
        assert len(got) == 3
        if ref[0].tokens == got[0].tokens:  # rescored: fairseq's score, per-token log-probs
            assert got[0].score == pytest.approx(ref[0].score, abs=1e-4)
            assert got[0].token_scores == pytest.approx(ref[0].token_scores, abs=1e-4)


def test_cli_translate_same_lines_with_each_engine(exported, tmp_path):
    dirs = exported["prenorm-shared-sinusoidal"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(SENTENCES[:8]) + "\n", encoding="utf-8")
    outputs = {}
    for engine in ("torch", "ctranslate2", "onnx"):
        out = tmp_path / f"{engine}.txt"
        argv = ["translate", "--engine", engine, str(dirs[engine]), "-i", str(src), "-o", str(out)]
        assert main([*argv, "--greedy"]) == 0
        outputs[engine] = out.read_text(encoding="utf-8")
    assert len(outputs["torch"].splitlines()) == 8
    assert outputs["ctranslate2"] == outputs["torch"] == outputs["onnx"]


def test_int8_export_stores_int8_weights_that_translate_alike(exported, tmp_path):
    import sacrebleu

    model_dir = exported["prenorm-shared-sinusoidal"]["torch"]
    int8 = export_model(model_dir, tmp_path / "int8", fmt="ctranslate2", quantization="int8")
    f32 = exported["prenorm-shared-sinusoidal"]["ctranslate2"]
    assert (int8 / "model.bin").stat().st_size < 0.6 * (f32 / "model.bin").stat().st_size
    greedy = SearchOptions(method="greedy")
    torch_tr = Translator.load(model_dir)
    src = torch_tr.encode(SENTENCES)
    ref = [h[0].tokens for h in torch_tr.engine.translate_ids(src, greedy)]
    # The int8 weights, dequantized, are close enough to give the same greedy output ...
    dequantized = CTranslate2Engine(int8, compute_type="float32").translate_ids(src, greedy)
    assert sum(h[0].tokens == r for h, r in zip(dequantized, ref)) >= 0.75 * len(ref)
    # ... while int8 arithmetic (activations quantized too) is coarse for a 32-wide model.
    int8_text = Translator.load(int8, engine="ctranslate2").translate(SENTENCES, method="greedy")
    torch_text = torch_tr.translate(SENTENCES, method="greedy")
    assert sacrebleu.corpus_chrf(int8_text, [torch_text]).score > 30


@pytest.mark.parametrize("mask", ["causal", "window", "block"])
def test_onnx_decoder_step_matches_decode_step_with_reorder(tmp_path, mask):
    overrides = (
        f"model.decoder_mask={mask}",
        "model.window=3",
        "model.block_size=2",
        "model.prev_blocks=1",
        "model.n_decoder_layers=2",
    )
    model_dir = make_model_dir(tmp_path / "model", cfg_overrides=overrides, seed=3)
    engine = OnnxEngine(export_onnx(model_dir, tmp_path / "onnx"))
    model = load_model_dir(model_dir).model
    src = [[5, 9, 12, 7, 3], [11, 3]]
    src_ids = torch.tensor([[5, 9, 12, 7, 3], [11, 3, 0, 0, 0]])
    state = model.start_state(src_ids)
    ostate = engine.start_state(src)
    np.testing.assert_array_equal(ostate.src_pad, state.src_pad.numpy())
    for (k, v), ok, ov in zip(state.cross_kv, ostate.cross[::2], ostate.cross[1::2]):
        np.testing.assert_allclose(ok, k.detach().numpy(), atol=1e-5)
        np.testing.assert_allclose(ov, v.detach().numpy(), atol=1e-5)
    prefix = torch.tensor([[2], [2]])
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for step in range(7):
            expected, state = model.decode_step(prefix, state)
            got, ostate = engine.step(prefix, ostate)
            torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
            for (k, _), ok in zip(state.self_kv, ostate.self_kv[::2]):
                assert ok.shape == tuple(k.shape)  # the window trims the cache alike
            if step == 2:  # beam-style reorder: rows duplicated and swapped
                index = torch.tensor([1, 0, 1])
                state, ostate, prefix = state.reorder(index), ostate.reorder(index), prefix[index]
            new = torch.randint(4, model.tgt_vocab_size, (prefix.size(0), 1), generator=gen)
            prefix = torch.cat([prefix, new], dim=1)


def test_export_folders_are_self_contained(exported):
    for name in VARIANTS:
        dirs = exported[name]
        spm = {p.name for p in dirs["torch"].glob("spm*.model")}
        for fmt in ("ctranslate2", "onnx"):
            files = {p.name for p in dirs[fmt].iterdir()}
            assert {"config.yaml", "export.json", "README.md"} | spm <= files
            assert not any(f.startswith(".") for f in files)
        assert "ctranslate2.Translator" in (dirs["ctranslate2"] / "README.md").read_text()
        assert "onnxruntime" in (dirs["onnx"] / "README.md").read_text()


def test_ctranslate2_readme_snippet_runs_as_written(exported):
    # The export's README shows how to translate without seq2seq; run that code as it stands,
    # from the folder that holds the export (its paths are relative to there).
    folder = exported["prenorm-shared-sinusoidal"]["ctranslate2"]
    readme = (folder / "README.md").read_text()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=folder.parent, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip()


def test_altered_export_is_refused(exported, tmp_path):
    folder = shutil.copytree(exported["prenorm-shared-sinusoidal"]["onnx"], tmp_path / "onnx")
    data = bytearray((folder / "decoder_step.onnx").read_bytes())
    data[-10] ^= 0xFF
    (folder / "decoder_step.onnx").write_bytes(bytes(data))
    with pytest.raises(ExportError, match="decoder_step.onnx is corrupt"):
        OnnxEngine(folder)
    with pytest.raises(ExportError, match="exported for onnx, not ctranslate2"):
        CTranslate2Engine(exported["prenorm-shared-sinusoidal"]["onnx"])


# ---- failures: no half-written folders, clear errors ----------------------------------------


def _leftovers(parent, model_dir) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p != model_dir)


def test_interrupted_ctranslate2_export_leaves_nothing(tmp_path, monkeypatch):
    from ctranslate2.specs import transformer_spec

    model_dir = make_model_dir(tmp_path / "model")

    written = []

    def save_then_fail(self, output_dir):  # the spec API fails after writing part of the model
        partial = Path(output_dir) / "model.bin"
        partial.write_bytes(b"partial")
        written.append(partial)
        raise OSError("disk full")

    monkeypatch.setattr(transformer_spec.TransformerSpec, "save", save_then_fail)
    with pytest.raises(OSError, match="disk full"):
        export_ctranslate2(model_dir, tmp_path / "out")
    assert written and not written[0].exists()
    assert _leftovers(tmp_path, model_dir) == []


def test_interrupted_onnx_export_leaves_nothing_and_keeps_the_old_one(tmp_path, monkeypatch):
    model_dir = make_model_dir(tmp_path / "model")
    old = export_onnx(model_dir, tmp_path / "out")
    before = (old / "export.json").read_text()
    calls = []
    real_export = torch.onnx.export

    def export_then_fail(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the encoder is written, the decoder step fails
            raise RuntimeError("exporter crashed")
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", export_then_fail)
    with pytest.raises(RuntimeError, match="exporter crashed"):
        export_onnx(model_dir, tmp_path / "out", force=True)
    assert _leftovers(tmp_path, model_dir) == ["out"]
    assert (old / "export.json").read_text() == before
    with pytest.raises(ExportError, match="already holds a model .*; pass --force"):
        export_onnx(model_dir, tmp_path / "out")


@pytest.mark.parametrize(
    ("mask", "feature"), [("block", "block-causal"), ("window", "sliding-window")]
)
def test_unsupported_decoder_mask_for_ctranslate2_is_a_user_error(tmp_path, capsys, mask, feature):
    model_dir = make_model_dir(tmp_path / "model", cfg_overrides=(f"model.decoder_mask={mask}",))
    with pytest.raises(UserError, match=feature):
        export_ctranslate2(model_dir, tmp_path / "out")
    argv = ["export", str(model_dir), "--format", "ctranslate2", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and feature in err and "--format onnx" in err
    assert _leftovers(tmp_path, model_dir) == []


def test_cli_export_missing_model_dir_is_one_line_exit_2(tmp_path, capsys):
    argv = ["export", str(tmp_path / "nope"), "--format", "onnx", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not found" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_cli_export_writes_the_folder(tmp_path, capsys):
    model_dir = make_model_dir(tmp_path / "model")
    out = tmp_path / "ct2"
    assert main(["export", str(model_dir), "--out", str(out)]) == 0  # config: ctranslate2
    assert (out / "model.bin").is_file() and "wrote" in capsys.readouterr().err
    assert main(["export", str(model_dir), "--out", str(out), "--format", "onnx"]) == 2
    assert main(["export", str(model_dir), "--out", str(out), "--format", "onnx", "--force"]) == 0
    assert (out / "decoder_step.onnx").is_file() and not (out / "model.bin").exists()


def test_ctranslate2_engine_rejects_a_finite_unk_penalty(exported):
    engine = CTranslate2Engine(exported["prenorm-shared-sinusoidal"]["ctranslate2"])
    with pytest.raises(UserError, match="unk_penalty"):
        engine.translate_ids([[5, 3]], SearchOptions(unk_penalty=2.0))
    hyps = engine.translate_ids([[5, 3]], SearchOptions(unk_penalty=math.inf, method="greedy"))
    assert 1 not in hyps[0][0].tokens


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda info: info.pop("files"), "does not match its own sha256"),
        (lambda info: info["special_ids"].update(eos=5), "does not match its own sha256"),
        (lambda info: info["model"].update(max_positions=8), "does not match its own sha256"),
        (lambda info: info.pop("sha256"), "has no checksum of its own"),
    ],
)
def test_export_json_checks_itself(exported, tmp_path, edit, expected):
    for engine, cls in (("ctranslate2", CTranslate2Engine), ("onnx", OnnxEngine)):
        folder = shutil.copytree(exported["prenorm-shared-sinusoidal"][engine], tmp_path / engine)
        info = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        edit(info)
        (folder / "export.json").write_text(json.dumps(info), encoding="utf-8")
        with pytest.raises(ExportError, match=expected):
            cls(folder)


def test_export_without_a_files_list_is_refused_even_with_a_fresh_checksum(exported, tmp_path):
    from seq2seq.export.format import _content_sha256

    folder = shutil.copytree(exported["prenorm-shared-sinusoidal"]["ctranslate2"], tmp_path / "c")
    info = json.loads((folder / "export.json").read_text(encoding="utf-8"))
    del info["files"]
    info["sha256"] = _content_sha256(info)  # a deliberate rewrite, not an accident
    (folder / "export.json").write_text(json.dumps(info), encoding="utf-8")
    with pytest.raises(ExportError, match="does not list the folder's files"):
        CTranslate2Engine(folder)


def test_a_killed_exports_hidden_folder_is_removed_by_the_next_export(tmp_path):
    import socket

    from seq2seq.core.files import atomic_dir

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())
    stale = tmp_path / f".out.tmp-{host}-{int(dead.stdout)}-abc123"
    stale.mkdir()
    (stale / "model.bin").write_bytes(b"half")
    mine = tmp_path / f".out.tmp-{host}-{os.getpid()}-live"  # a live process's: kept
    mine.mkdir()
    with atomic_dir(tmp_path / "out") as tmp:
        (tmp / "x").write_text("done")
    assert not stale.exists() and mine.exists()
    assert (tmp_path / "out" / "x").read_text() == "done"


def test_an_opset_newer_than_torch_exports_is_refused_first(tmp_path):
    model_dir = make_model_dir(tmp_path / "model")
    with pytest.raises(ExportError, match="ONNX opset 99 is newer than this torch exports"):
        export_onnx(model_dir, tmp_path / "out", opset=99)
    assert not (tmp_path / "out").exists()
