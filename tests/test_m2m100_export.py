"""Exports of a converted M2M100 / NLLB-200 model (the fixtures are tests/test_m2m100.py's).

Hugging Face: ``--format hf`` writes an ``M2M100ForConditionalGeneration`` folder that
``AutoModelForSeq2SeqLM`` and ``AutoTokenizer`` load; ``generate`` with
``forced_bos_token_id`` gives our greedy and beam-4 outputs, and ``convert m2m100`` reads it
back into identical weights.

CTranslate2: the position table the export writes is the model's own (already offset by
``padding_idx + 1``), the decoder starts from the ``</s>`` row (``model.start_is_eos``, as
the torch engine's), and the CTranslate2 engine passes the target language token as
``target_prefix``; its float32 outputs equal the torch engine's.

Fine-tuned: a converted model fine-tuned with ``seq2seq train --init-from`` exports to all
three, and each translates as ``seq2seq translate`` does.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml
from test_m2m100 import (  # noqa: F401 (m2m100, nllb: the fixtures)
    LANG,
    MAX_NEW,
    TEXTS,
    _hf_generate,
    _lines,
    _ours,
    _run,
    _token,
    fine_tune,
    m2m100,
    nllb,
)

pytest.importorskip("ctranslate2")

BOTH = pytest.mark.parametrize("family", ["m2m100", "nllb"])


def _translate(path, family, sentences, *, engine: str, beams: int, tgt_lang: str):
    from seq2seq.decode import Translator

    translator = Translator.load(path, engine=engine)
    method = {"method": "greedy"} if beams == 1 else {"method": "beam", "beam_size": beams}
    out = translator.translate_nbest(
        sentences,
        source_lang=LANG[family][0],
        target_lang=tgt_lang,
        max_len_a=0.0,
        max_len_b=MAX_NEW - 1,
        len_penalty=1.0,
        nbest=1,
        **method,
    )
    return [(r[0].text, r[0].tokens) for r in out]  # (CTranslate2 normalizes scores its way)


def _assert_ended_rows_equal(ours, theirs, ended, what):
    """``ours`` and ``theirs`` agree on the rows ``ended`` (those that stopped before the length
    limit), and at least half of the rows ended: a fixture model trained in the test loops to
    the limit on a few rows, more on some CPUs (4 of 24 on a Xeon, fine-tuned)."""
    assert len(ended) >= len(ours) // 2, what
    assert [theirs[i] for i in ended] == [ours[i] for i in ended], what


@BOTH
def test_ctranslate2_float32_equals_torch(family, request, tmp_path):
    from seq2seq.export import export_model

    _, model_dir, src, _ = request.getfixturevalue(family)
    src = src[:12]
    ct2 = export_model(model_dir, tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    other = "fr" if family == "m2m100" else "fra_Latn"
    for tgt_lang in (LANG[family][1], other):  # the target language decides the output
        for beams in (1, 4):
            ours = _translate(
                model_dir, family, src, engine="torch", beams=beams, tgt_lang=tgt_lang
            )
            theirs = _translate(
                ct2, family, src, engine="ctranslate2", beams=beams, tgt_lang=tgt_lang
            )
            # texts and token ids, where neither output reached the length limit: the two
            # searches end a hypothesis there differently (as test_outputs_equal_generate).
            # The model learnt en->de only; into French it loops on a few sentences.
            ended = [
                i
                for i, (a, b) in enumerate(zip(ours, theirs))
                if max(len(a[1]), len(b[1])) < MAX_NEW
            ]
            _assert_ended_rows_equal(ours, theirs, ended, (tgt_lang, beams))
    de = _translate(ct2, family, src, engine="ctranslate2", beams=1, tgt_lang=LANG[family][1])
    fr = _translate(ct2, family, src, engine="ctranslate2", beams=1, tgt_lang=other)
    assert [t[1][0] for t in de] != [t[1][0] for t in fr]  # the forced language token differs


_EXPORTS: dict = {}


def _hf_export(family, request, tmp_path_factory):
    """The fixture's model exported with ``seq2seq export --format hf`` (once per family)."""
    if family not in _EXPORTS:
        _, model_dir, _, _ = request.getfixturevalue(family)
        out = tmp_path_factory.mktemp(f"{family}_hf") / "hf"
        _run("export", str(model_dir), "--format", "hf", "--out", str(out))
        _EXPORTS[family] = out
    return _EXPORTS[family]


@BOTH
def test_hf_export_generates_as_ours(family, request, tmp_path_factory):
    """transformers' Auto classes load the export; ``generate`` with the target language as
    ``forced_bos_token_id`` gives the torch engine's greedy and beam-4 outputs, and the
    exported tokenizer gives the original folder's ids."""
    from transformers import AutoTokenizer

    hf_dir, model_dir, src, _ = request.getfixturevalue(family)
    out = _hf_export(family, request, tmp_path_factory)
    config = json.loads((out / "config.json").read_text("utf-8"))
    assert config["model_type"] == "m2m_100" and config["decoder_start_token_id"] == 2
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes  # (not save_file's 0600)
    tok, original = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(hf_dir)
    for code in LANG[family]:
        tok.src_lang = original.src_lang = code
        assert tok(TEXTS).input_ids == original(TEXTS).input_ids, code
    _assert_generates_as_ours(out, model_dir, family, src)


def _assert_generates_as_ours(out, model_dir, family, src):
    """transformers' ``generate`` on the export ``out`` (the target language forced first)
    gives the torch engine's greedy and beam-4 outputs of ``model_dir``."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(model).__name__ == "M2M100ForConditionalGeneration"
    tok = AutoTokenizer.from_pretrained(out)
    t_lang = LANG[family][1]
    forced = tok.convert_tokens_to_ids(_token(family, t_lang))
    assert forced != tok.unk_token_id
    for beams in (1, 4):
        generated, ended = _hf_generate(model, tok, family, src, beams, t_lang)
        ours, _ = _ours(family, model_dir, src, beams=beams, tgt_lang=t_lang)
        _assert_ended_rows_equal(ours, generated, ended, (len(ended), beams))
        assert all(generated[i][0] == forced for i in ended)


@BOTH
def test_hf_export_converts_back_to_identical_weights(family, request, tmp_path_factory):
    """``convert m2m100`` of the export gives the converted model's tensors, bit for bit,
    and its languages."""
    from safetensors.torch import load_file

    from seq2seq.model import convert_m2m100

    _, model_dir, _, _ = request.getfixturevalue(family)
    out = _hf_export(family, request, tmp_path_factory)
    back = convert_m2m100(out, tmp_path_factory.mktemp(f"{family}_back") / "model")
    ours, again = load_file(model_dir / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(ours) == sorted(again)
    for name, tensor in ours.items():
        assert torch.equal(tensor, again[name]), name
    for name in ("languages.json", "config.yaml"):
        assert (back / name).read_text("utf-8") == (model_dir / name).read_text("utf-8")


def test_hf_export_failing_write_leaves_nothing(request, tmp_path, monkeypatch):
    """A write that fails half-way (the disk fills while the weights are written) leaves
    nothing at the output, not even a temporary folder."""
    import seq2seq.export.hf_m2m100 as hf_m2m100
    from seq2seq.export import export_model

    def fail(f, layout, make, metadata=None):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf_m2m100, "write_safetensors", fail)
    with pytest.raises(OSError, match="No space"):
        export_model(request.getfixturevalue("m2m100")[1], tmp_path / "out", fmt="hf")
    assert list(tmp_path.iterdir()) == []


def test_hf_export_of_a_start_row_that_moved(request, tmp_path, tmp_path_factory):
    """Our ``<s>`` row moved away from ``</s>``. With ``model.start_is_eos`` (what conversion
    writes) the row is unused: the export is the unchanged model's, tensor for tensor. A
    directory converted before the option existed (its config.yaml lacks the key) starts from
    that row, which M2M100 cannot hold: refused in one line, exit 2, nothing written."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from seq2seq.model import load_model_dir, save_model_dir, write_manifest

    _, model_dir, _, _ = request.getfixturevalue("m2m100")
    for start_is_eos in (True, False):
        changed = tmp_path / f"changed_{start_is_eos}"
        shutil.copytree(model_dir, changed)
        loaded = load_model_dir(changed)
        assert loaded.cfg.model.start_is_eos  # conversion sets it
        weights = load_file(changed / "model.safetensors")
        weights["encoder.embedding.weight"][2] += 0.01
        cfg = replace(loaded.cfg, model=replace(loaded.cfg.model, start_is_eos=start_is_eos))
        save_model_dir(changed, loaded.model, cfg, weights=weights)
        if not start_is_eos:  # as an older seq2seq wrote it
            raw = yaml.safe_load((changed / "config.yaml").read_text("utf-8"))
            del raw["model"]["start_is_eos"]
            (changed / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), "utf-8")
            write_manifest(changed)
            assert not load_model_dir(changed).cfg.model.start_is_eos
        out = tmp_path / f"out_{start_is_eos}"
        result = _run("export", str(changed), "--format", "hf", "--out", str(out), check=False)
        if start_is_eos:
            assert result.returncode == 0, result.stderr
            same = load_file(_hf_export("m2m100", request, tmp_path_factory) / "model.safetensors")
            got = load_file(out / "model.safetensors")
            assert sorted(got) == sorted(same)
            assert all(torch.equal(got[k], same[k]) for k in same)
            continue
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert "decoder's start row" in line and "--format ctranslate2" in line
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "changed_False",
        "changed_True",
        "out_True",
    ]


@BOTH
def test_onnx_equals_torch(family, request, tmp_path):
    """``--format onnx`` of a converted model: greedy and beam-4 outputs (the target language
    forced first) equal the torch engine's, scores within 1e-4; its README names the
    languages instead of a SentencePiece example."""
    from seq2seq.decode import Translator
    from seq2seq.export import export_model

    _, model_dir, src, _ = request.getfixturevalue(family)
    src = src[:12]
    onnx = export_model(model_dir, tmp_path / "onnx", fmt="onnx")
    assert "--target-lang" in (onnx / "README.md").read_text("utf-8")
    engines = {"torch": Translator.load(model_dir), "onnx": Translator.load(onnx, engine="onnx")}
    for beams in (1, 4):
        method = {"method": "greedy"} if beams == 1 else {"method": "beam", "beam_size": beams}
        ours, theirs = (
            engines[e].translate_nbest(
                src,
                source_lang=LANG[family][0],
                target_lang=LANG[family][1],
                max_len_a=0.0,
                max_len_b=MAX_NEW - 1,
                len_penalty=1.0,
                nbest=1,
                **method,
            )
            for e in ("torch", "onnx")
        )
        assert [(r[0].text, r[0].tokens) for r in theirs] == [
            (r[0].text, r[0].tokens) for r in ours
        ]
        assert [r[0].score for r in theirs] == pytest.approx([r[0].score for r in ours], abs=1e-4)
    lang = engines["onnx"].tokenizer.language_id(LANG[family][1])
    assert all(r[0].tokens[0] == lang for r in theirs)


def test_hf_export_keeps_nllb_legacy_behaviour(request, tmp_path):
    """An NLLB model converted with ``legacy_behaviour: true`` exports a tokenizer that writes
    the source as ``pieces </s> [src_lang]``, as the original folder's does."""
    from transformers import AutoTokenizer

    from seq2seq.export import export_model
    from seq2seq.model import convert_m2m100

    hf_dir = shutil.copytree(request.getfixturevalue("nllb")[0], tmp_path / "legacy")
    config = json.loads((hf_dir / "tokenizer_config.json").read_text("utf-8"))
    (hf_dir / "tokenizer_config.json").write_text(
        json.dumps(config | {"legacy_behaviour": True}), "utf-8"
    )
    model_dir = convert_m2m100(hf_dir, tmp_path / "converted")
    out = export_model(model_dir, tmp_path / "hf", fmt="hf")
    theirs, ours = AutoTokenizer.from_pretrained(hf_dir), AutoTokenizer.from_pretrained(out)
    for code in ("eng_Latn", "fra_Latn"):
        theirs.src_lang = ours.src_lang = code
        assert ours(TEXTS).input_ids == theirs(TEXTS).input_ids, code
    assert ours("a").input_ids[-1] == ours.convert_tokens_to_ids("fra_Latn")


def test_hf_export_checks_itself(request, tmp_path, monkeypatch):
    """The export loads its folder with transformers and compares log-probabilities on a
    probe: a folder that says gelu where the model uses ReLU is refused, nothing written."""
    import seq2seq.export.format as export_format
    from seq2seq.export import ExportError, export_model

    monkeypatch.setitem(export_format.HF_ACTIVATIONS, "relu", "gelu")
    with pytest.raises(ExportError, match="does not reproduce the model"):
        export_model(request.getfixturevalue("nllb")[1], tmp_path / "out", fmt="hf")
    assert list(tmp_path.iterdir()) == []


def test_hf_export_refuses_what_m2m100_cannot_express():
    """Each option M2M100ForConditionalGeneration has no equal for is named; languages that
    M2M100Tokenizer cannot number (not fairseq's list after vocab.json) are refused."""
    from seq2seq.config import ModelConfig
    from seq2seq.core import UserError
    from seq2seq.export.hf import check_hf_support
    from seq2seq.export.hf_m2m100 import _tokenizer_config, check_m2m100_support

    m2m = {"positions": "sinusoidal", "position_offset": 2}
    check_m2m100_support(ModelConfig(**m2m), "c")
    for cfg, option in [
        (ModelConfig(**m2m, norm_first=False), "model.norm_first: false"),
        (ModelConfig(positions="sinusoidal"), "model.positions: sinusoidal from row 0"),
        (ModelConfig(**m2m, share_embeddings=False, tie_output=False), "separate or untied"),
        (ModelConfig(**m2m, decoder_mask="window"), "model.decoder_mask: window"),
    ]:
        with pytest.raises(UserError, match=option):
            check_m2m100_support(cfg, "config.yaml")
    meta = {"family": "m2m100", "rows": 20, "languages": {"en": 10, "de": 11}}
    with pytest.raises(UserError, match="neither"):
        _tokenizer_config(meta, 10, "en-de", 128, "languages.json")
    # MarianMT's decoder starts from its own <pad> row, not from </s>
    marian = {"norm_first": False, "positions": "sinusoidal_marian"}
    check_hf_support(ModelConfig(**marian), "c")
    with pytest.raises(UserError, match="model.start_is_eos: true"):
        check_hf_support(ModelConfig(**marian, start_is_eos=True), "config.yaml")


_FINETUNED: dict = {}


def _finetuned(family, request, tmp_path_factory, mirror):
    """The fixture's converted model fine-tuned for a few updates with ``seq2seq train
    --init-from`` on a small en-de text (once per family)."""
    if family not in _FINETUNED:
        _, model_dir, _, _ = request.getfixturevalue(family)
        root = tmp_path_factory.mktemp(f"{family}_ft")
        _FINETUNED[family] = fine_tune(
            model_dir, root, mirror, sizes=(48, 4), steps=5, max_tokens=400,
            extra=("training.lr=0.002",),
        )  # fmt: skip
    return _FINETUNED[family]


@pytest.mark.slow
@BOTH
def test_fine_tuned_model_exports_and_translates_as_ours(
    family, request, tmp_path_factory, tmp_path, mirror
):
    """A converted model fine-tuned with ``train --init-from`` keeps ``model.start_is_eos``:
    fine-tuning moved its ``</s>`` row, which the decoder starts from, and left its unused
    ``<s>`` row as converted (reading that row instead would change the log-probabilities past
    the exports' self-check tolerance). ``--format hf`` exports it: transformers' greedy and
    beam-4 ``generate`` give ``seq2seq translate``'s outputs; CTranslate2 float32 and ONNX give
    the torch engine's."""
    from safetensors.torch import load_file

    from seq2seq.data import BOS_ID, EOS_ID
    from seq2seq.export import export_model
    from seq2seq.export.probe import PROBE_TOLERANCE, probe_ids
    from seq2seq.model import load_model_dir

    _, model_dir, src, _ = request.getfixturevalue(family)
    run = _finetuned(family, request, tmp_path_factory, mirror)
    loaded = load_model_dir(run)
    assert loaded.cfg.model.start_is_eos and loaded.cfg.training.init_from
    before, after = (
        load_file(d / "model.safetensors")["encoder.embedding.weight"] for d in (model_dir, run)
    )
    assert torch.equal(after[BOS_ID], before[BOS_ID])  # no gradient reached it
    assert float((after[EOS_ID] - before[EOS_ID]).abs().max()) > 1e-3  # fine-tuned
    model = loaded.model.eval()
    probe_src, probe_tgt = probe_ids(model)
    s, t = torch.tensor([[*probe_src, EOS_ID]]), torch.tensor([[BOS_ID, *probe_tgt]])
    with torch.no_grad():
        right = model(s, t).log_softmax(-1)
        model.decoder.start_is_eos = False  # the start read from the <s> row instead
        wrong = model(s, t).log_softmax(-1)
        model.decoder.start_is_eos = True
    assert float((right - wrong)[..., EOS_ID:].abs().max()) > PROBE_TOLERANCE

    hf = tmp_path / "hf"
    _run("export", str(run), "--format", "hf", "--out", str(hf))
    _assert_generates_as_ours(hf, run, family, src)

    src = src[:12]
    ct2 = export_model(run, tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    onnx = export_model(run, tmp_path / "onnx", fmt="onnx")
    tgt_lang = LANG[family][1]
    for beams in (1, 4):
        ours = _translate(run, family, src, engine="torch", beams=beams, tgt_lang=tgt_lang)
        for engine, folder in (("ctranslate2", ct2), ("onnx", onnx)):
            theirs = _translate(folder, family, src, engine=engine, beams=beams, tgt_lang=tgt_lang)
            assert theirs == ours, (engine, beams)
