"""Exports of a converted M2M100 / NLLB-200 model (the fixtures are tests/test_m2m100.py's).

CTranslate2: the position table the export writes is the model's own (already offset by
``padding_idx + 1``), the decoder starts from our ``<s>`` row (a copy of the folder's
``</s>``), and the CTranslate2 engine passes the target language token as ``target_prefix``;
its float32 outputs equal the torch engine's.
"""

from __future__ import annotations

import pytest
from test_m2m100 import LANG, MAX_NEW, m2m100, nllb  # noqa: F401 (the fixtures)

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
            assert theirs == ours, (tgt_lang, beams)  # texts and token ids
    de = _translate(ct2, family, src, engine="ctranslate2", beams=1, tgt_lang=LANG[family][1])
    fr = _translate(ct2, family, src, engine="ctranslate2", beams=1, tgt_lang=other)
    assert [t[1][0] for t in de] != [t[1][0] for t in fr]  # the forced language token differs
