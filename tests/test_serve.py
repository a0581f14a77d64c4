"""seq2seq.serve: the HTTP API (LibreTranslate-compatible and native) on a tiny real model.

Requests go through httpx to the ASGI app (inside its lifespan, so the real batcher and its
worker thread run); every translation is checked against the same model translating the same
sentences offline. tests/test_serve_process.py runs the server as a process (SIGTERM, the
browser).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from pathlib import Path

import pytest
from factories import make_model_dir, run_app

from seq2seq.core.errors import UserError
from seq2seq.decode.alignments import format_alignment
from seq2seq.decode.paragraphs import split_text
from seq2seq.decode.translator import Translator
from seq2seq.serve.app import create_app
from seq2seq.serve.batcher import engine_thread
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.served_model import load_translator, model_info

SENTENCES = [
    "A man runs in the park.",
    "Two dogs play with a red ball.",
    "A young woman sits on a bench near the water.",
    "The old car is black.",
    "Three children walk under the big tree.",
    "A small cat jumps on the house.",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("serve") / "model", train_steps=150)


@pytest.fixture(scope="module")
def reference(model_dir) -> Translator:
    """The same model, translating offline: what every served result must equal."""
    return Translator.load(model_dir)


_LOADED: dict[Path, Translator] = {}


def serve_and(
    model_dir, body, *, config: ServeConfig | None = None, translator=None, executor=None
):
    """Run ``await body(client, translator)`` against a fresh app (lifespan included).

    Without ``translator``, the apps share one loaded Translator per model (loading is the
    slow part; each app still has its own batcher and worker thread, or ``executor``).
    """
    if translator is None:
        translator = _LOADED.setdefault(model_dir, Translator.load(model_dir))
    info = model_info(translator, model_dir, "torch")
    app = create_app(translator, info=info, config=config, executor=executor)

    async def main(client):
        return await body(client, translator)

    return run_app(app, main)


def libre(client, q, **fields):
    return client.post("/translate", json={"q": q, "source": "en", "target": "de", **fields})


# ---- LibreTranslate API ---------------------------------------------------------------------


def test_libretranslate_string_and_list(model_dir, reference):
    async def body(client, _):
        one = await libre(client, SENTENCES[0])
        many = await libre(client, SENTENCES)
        return one, many

    one, many = serve_and(model_dir, body)
    assert one.status_code == 200 and many.status_code == 200
    assert one.headers["content-type"] == "application/json"
    assert one.json() == {"translatedText": reference.translate(SENTENCES[:1])[0]}
    assert many.json() == {"translatedText": reference.translate(SENTENCES)}


def test_libretranslate_alternatives(model_dir, reference):
    async def body(client, _):
        return (await libre(client, SENTENCES[1], alternatives=3)).json(), (
            await libre(client, SENTENCES[:2], alternatives=2)
        ).json()

    one, many = serve_and(model_dir, body)
    nbest = reference.translate_nbest(SENTENCES[1:2], nbest=4, beam_size=5)[0]
    assert one["translatedText"] == nbest[0].text
    want = []
    for t in nbest[1:]:
        if t.text not in want and t.text != nbest[0].text:
            want.append(t.text)
    assert one["alternatives"] == want[:3]
    assert isinstance(many["translatedText"], list) and len(many["alternatives"]) == 2
    for best, alts in zip(many["translatedText"], many["alternatives"]):
        assert best not in alts and len(alts) <= 2 and len(set(alts)) == len(alts)


def test_libretranslate_form_bodies_and_auto_source(model_dir, reference):
    text = SENTENCES[2]
    multipart = (
        b'--XyZ\r\nContent-Disposition: form-data; name="q"\r\n\r\n'
        + text.encode()
        + b'\r\n--XyZ\r\nContent-Disposition: form-data; name="source"\r\n\r\nen\r\n'
        b'--XyZ\r\nContent-Disposition: form-data; name="target"\r\n\r\nde\r\n--XyZ--\r\n'
    )

    async def body(client, _):
        form = await client.post("/translate", data={"q": text, "source": "en", "target": "de"})
        mp = await client.post(
            "/translate",
            content=multipart,
            headers={"content-type": "multipart/form-data; boundary=XyZ"},
        )
        auto = await client.post(
            "/translate", data={"q": text, "source": "auto", "target": "de", "api_key": "k"}
        )
        return form, mp, auto

    form, mp, auto = serve_and(model_dir, body)
    want = reference.translate([text])[0]
    assert form.json() == {"translatedText": want}
    assert mp.json() == {"translatedText": want}
    assert auto.json() == {
        "translatedText": want,
        "detectedLanguage": {"confidence": 100.0, "language": "en"},
    }


def test_languages_in_libretranslates_shape(model_dir):
    async def body(client, _):
        return (await client.get("/languages")).json()

    langs = serve_and(model_dir, body)
    assert langs == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    # What LibreTranslate's JavaScript client checks before it translates: both codes listed.
    codes = {lang["code"] for lang in langs}
    assert {"en", "de"} <= codes


# ---- native API -----------------------------------------------------------------------------


def test_native_translate_with_options_nbest_and_scores(model_dir, reference):
    async def body(client, _):
        plain = await client.post("/v1/translate", json={"text": SENTENCES[:3]})
        greedy = await client.post("/v1/translate", json={"text": SENTENCES[3], "method": "greedy"})
        nbest = await client.post(
            "/v1/translate",
            json={"text": [SENTENCES[4]], "beam_size": 4, "nbest": 3, "scores": True},
        )
        return plain.json(), greedy.json(), nbest.json()

    plain, greedy, nbest = serve_and(model_dir, body)
    assert [t["text"] for t in plain["translations"]] == reference.translate(SENTENCES[:3])
    assert "sentences" not in plain["translations"][0]
    assert (
        greedy["translations"][0]["text"] == reference.translate(SENTENCES[3:4], method="greedy")[0]
    )
    assert greedy["options"]["method"] == "greedy"
    want = reference.translate_nbest(SENTENCES[4:5], beam_size=4, nbest=3)[0]
    entry = nbest["translations"][0]
    assert entry["nbest"] == [t.text for t in want]
    (sentence,) = entry["sentences"]
    assert sentence["source"] == SENTENCES[4]
    for hyp, t in zip(sentence["hypotheses"], want, strict=True):
        assert hyp["text"] == t.text
        assert hyp["score"] == pytest.approx(t.score, abs=1e-5)
        assert hyp["token_scores"] == pytest.approx(t.token_scores, abs=1e-5)


def _pairs(t) -> str:
    return format_alignment(t.alignment)


def test_native_alignments_are_the_translators(model_dir, reference):
    text = f"{SENTENCES[0]} {SENTENCES[1]}"

    async def body(client, _):
        one = await client.post("/v1/translate", json={"text": text, "alignments": True})
        nbest = await client.post(
            "/v1/translate",
            json={"text": [SENTENCES[2]], "alignments": True, "beam_size": 4, "nbest": 3},
        )
        cons = await client.post(
            "/v1/translate",
            json={"text": SENTENCES[3], "alignments": True, "constraints": ["red"]},
        )
        plain = await client.post("/v1/translate", json={"text": text, "nbest": 2})
        return one.json(), nbest.json(), cons.json(), plain.json()

    one, nbest, cons, plain = serve_and(model_dir, body)
    want = reference.translate_nbest(SENTENCES[:2], alignments=True)
    (entry,) = one["translations"]
    assert entry["text"] == " ".join(w[0].text for w in want)
    assert [s["source"] for s in entry["sentences"]] == SENTENCES[:2]
    for sentence, w in zip(entry["sentences"], want, strict=True):
        (hyp,) = sentence["hypotheses"]
        assert hyp == {"text": w[0].text, "alignment": _pairs(w[0])}
        assert hyp["alignment"]  # a real sentence aligns some words
    want = reference.translate_nbest(SENTENCES[2:3], alignments=True, beam_size=4, nbest=3)[0]
    (sentence,) = nbest["translations"][0]["sentences"]
    assert [h["text"] for h in sentence["hypotheses"]] == [t.text for t in want]
    assert [h["alignment"] for h in sentence["hypotheses"]] == [_pairs(t) for t in want]
    want = reference.translate_nbest(SENTENCES[3:4], alignments=True, constraints=[["red"]])[0]
    (sentence,) = cons["translations"][0]["sentences"]
    assert sentence["hypotheses"] == [{"text": want[0].text, "alignment": _pairs(want[0])}]
    for sentence in plain["translations"][0]["sentences"]:  # not asked: not there
        assert all("alignment" not in h for h in sentence["hypotheses"])


@pytest.mark.parametrize("continuous", [False, True])
def test_concurrent_requests_with_and_without_alignments_keep_their_results(
    model_dir, reference, continuous
):
    translator = Translator.load(model_dir)
    real = translator.translate_nbest
    calls = []

    def translate_nbest(sentences, **kwargs):
        calls.append((kwargs.get("alignments", False), list(sentences)))
        return real(sentences, **kwargs)

    translator.translate_nbest = translate_nbest
    requests = [(SENTENCES[i % 6 : i % 6 + 1 + i % 2], i % 3 == 0) for i in range(18)]

    async def body(client, _):
        out = await asyncio.gather(
            *(
                client.post("/v1/translate", json={"text": texts, "alignments": align})
                for texts, align in requests
            )
        )
        return [r.json() for r in out]

    config = ServeConfig(max_wait_ms=50, continuous=continuous)
    answers = serve_and(model_dir, body, config=config, translator=translator)
    want = dict(zip(SENTENCES, reference.translate_nbest(SENTENCES, alignments=True)))
    for (texts, align), answer in zip(requests, answers, strict=True):
        got = answer["translations"]
        assert [t["text"] for t in got] == [want[s][0].text for s in texts]
        if align:
            for t, s in zip(got, texts, strict=True):
                (sentence,) = t["sentences"]
                assert sentence["source"] == s
                assert sentence["hypotheses"][0]["alignment"] == _pairs(want[s][0])
        else:
            assert all("sentences" not in t for t in got)
    # Each engine call was all-aligned or all-plain, and together they are the requests'
    # (with continuous batching, the plain ones ran in the continuous search instead).
    for flag in (True, False):
        sent = sorted(s for a, batch in calls if a == flag for s in batch)
        asked = sorted(s for texts, a in requests if a == flag for s in texts)
        assert sent == ([] if continuous and not flag else asked)
    assert len(calls) < len([a for _, a in requests if a or not continuous])  # shared calls


def test_paragraphs_are_split_translated_and_rejoined(model_dir, reference):
    text = f"{SENTENCES[0]} {SENTENCES[1]}\n\n{SENTENCES[2]}\n  {SENTENCES[3]} {SENTENCES[4]}"

    async def body(client, _):
        a = await libre(client, text)
        b = await client.post("/v1/translate", json={"text": text, "scores": True})
        c = await client.post("/v1/translate", json={"text": text, "split_sentences": False})
        return a.json(), b.json(), c.json()

    lt, native, whole = serve_and(model_dir, body)
    t = reference.translate(SENTENCES[:5])
    want = f"{t[0]} {t[1]}\n\n{t[2]}\n  {t[3]} {t[4]}"
    assert lt["translatedText"] == want
    assert native["translations"][0]["text"] == want
    assert [s["source"] for s in native["translations"][0]["sentences"]] == SENTENCES[:5]
    lines = reference.translate([f"{SENTENCES[0]} {SENTENCES[1]}", SENTENCES[2]])
    assert whole["translations"][0]["text"].split("\n")[:3] == [lines[0], "", lines[1]]


def test_concurrent_requests_are_batched_and_never_mixed_up(model_dir, reference):
    requests = [SENTENCES[i % 6 : i % 6 + 1 + i % 3] for i in range(40)]
    config = ServeConfig(max_wait_ms=50)

    async def body(client, _):
        responses = await asyncio.gather(*(libre(client, r) for r in requests))
        health = (await client.get("/health")).json()
        return [r.json() for r in responses], health

    answers, health = serve_and(model_dir, body, config=config)
    want = dict(zip(SENTENCES, reference.translate(SENTENCES)))
    for req, answer in zip(requests, answers):
        assert answer["translatedText"] == [want[s] for s in req]
    assert health["requests"] == 40
    assert health["batches"] < 20 and health["largest_batch"] > 5  # shared batches
    assert health["queued_sentences"] == 0 and health["in_flight_requests"] == 0


def test_health_and_models(model_dir):
    async def body(client, translator):
        return (await client.get("/health")).json(), (await client.get("/v1/models")).json()

    health, models = serve_and(model_dir, body)
    assert health["status"] == "ok" and health["engine"] == "torch"
    (m,) = models["models"]
    manifest = json.loads((model_dir / "manifest.json").read_text())
    assert m["manifest_sha256"] == manifest["sha256"]
    assert (m["source"], m["target"], m["engine"], m["attention"]) == ("en", "de", "torch", True)
    assert m["size_bytes"] == (model_dir / "model.safetensors").stat().st_size
    translator = Translator.load(model_dir)
    model = translator.engine.model
    assert m["parameters"] == sum(
        p.numel() for p in {id(p): p for p in model.parameters()}.values()
    )
    assert m["decoding"]["beam_size"] == translator.opts.beam_size
    assert m["limits"]["max_chars"] == ServeConfig().max_chars
    assert m["batching"]["continuous"] is False  # static batches by default (faster here)
    assert m["capabilities"] == {
        "alignments": True, "prefix_and_avoid": True, "positive_constraints": True,
        "glossaries": True, "named_glossaries": False,
    }  # fmt: skip


def test_attention_matches_the_plot_command(model_dir, reference):
    from seq2seq.evaluate.plots import attention_maps
    from seq2seq.model.directory import load_model_dir

    text = f"{SENTENCES[0]} {SENTENCES[1]}"

    async def body(client, _):
        return (await client.post("/v1/attention", json={"text": text})).json()

    out = serve_and(model_dir, body)
    translations = reference.translate(SENTENCES[:2])
    assert out["translation"] == " ".join(translations)
    loaded = load_model_dir(model_dir)
    for got, sentence, target in zip(out["sentences"], SENTENCES[:2], translations, strict=True):
        maps = attention_maps(loaded, sentence, target=target)
        assert got["translation"] == target
        assert got["source_tokens"] == maps.src_labels
        assert got["target_tokens"] == maps.tgt_out_labels
        assert len(got["cross"]) == len(maps.tgt_out_labels)
        for row, want in zip(got["cross"], maps.cross.tolist(), strict=True):
            assert row == pytest.approx(want, abs=1e-3)
            assert sum(row) == pytest.approx(1.0, abs=1e-2)


def test_page_and_openapi(model_dir):
    async def body(client, _):
        return await client.get("/"), (await client.get("/openapi.json")).json()

    page, spec = serve_and(model_dir, body)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<textarea id="source"' in page.text and "v1/attention" in page.text
    for path in ("/translate", "/languages", "/v1/translate", "/v1/attention", "/health"):
        assert path in spec["paths"]
    libre_body = spec["paths"]["/translate"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/x-www-form-urlencoded"} <= set(libre_body)
    native = spec["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
    assert "beam_size" in native["application/json"]["schema"]["properties"]


# ---- bad input ------------------------------------------------------------------------------

JSON = {"content-type": "application/json"}
GOOD = {"source": "en", "target": "de"}


def _post(path, content, headers=JSON):
    return ("POST", path, content, headers)


BAD_REQUESTS = {
    "malformed JSON": (_post("/translate", b'{"q": "a man", '), 400, "malformed JSON"),
    "JSON that is not an object": (_post("/translate", b'["a man"]'), 400, "must be an object"),
    "q of the wrong type": (
        _post("/translate", json.dumps({"q": 5, **GOOD}).encode()),
        400,
        "'q': must be a string or a list of strings",
    ),
    "q list with a number": (
        _post("/translate", json.dumps({"q": ["a", 1], **GOOD}).encode()),
        400,
        "'q': must be a string or a list of strings",
    ),
    "missing q": (_post("/translate", json.dumps(GOOD).encode()), 400, "missing field 'q'"),
    "alternatives not a number": (
        _post("/translate", json.dumps({"q": "a", "alternatives": "x", **GOOD}).encode()),
        400,
        "'alternatives'",
    ),
    "unsupported pair": (
        _post("/translate", json.dumps({"q": "a man", "source": "en", "target": "fr"}).encode()),
        400,
        "language pair en->fr is not supported (served languages: en, de; supported pairs: en->de)",
    ),
    "empty text": (
        _post("/translate", json.dumps({"q": "  \n ", **GOOD}).encode()),
        400,
        "empty text",
    ),
    "empty list": (_post("/translate", json.dumps({"q": [], **GOOD}).encode()), 400, "empty"),
    "invalid UTF-8 in JSON": (
        _post("/translate", b'{"q": "caf\xe9", "source": "en", "target": "de"}'),
        400,
        "not valid UTF-8 (byte 11: 0xe9)",
    ),
    "invalid UTF-8 in a form": (
        _post(
            "/translate",
            b"q=caf%E9&source=en&target=de",
            {"content-type": "application/x-www-form-urlencoded"},
        ),
        400,
        "not valid UTF-8",
    ),
    "unpaired surrogate": (
        _post("/translate", b'{"q": ["ok", "x\\ud800"], "source": "en", "target": "de"}'),
        400,
        "q[1] is not valid Unicode: unpaired surrogate U+D800",
    ),
    "html with alternatives": (
        _post(
            "/translate",
            json.dumps({"q": "<b>a</b>", "format": "html", "alternatives": 2, **GOOD}).encode(),
        ),
        400,
        "alternatives are for format 'text' only",
    ),
    "unknown format": (
        _post("/translate", json.dumps({"q": "a", "format": "pdf", **GOOD}).encode()),
        400,
        "field 'format'",
    ),
    "too many alternatives": (
        _post("/translate", json.dumps({"q": "a", "alternatives": 9, **GOOD}).encode()),
        400,
        "alternatives may be at most 8",
    ),
    "too many characters": (
        _post("/translate", json.dumps({"q": ["a man. " * 30] * 10, **GOOD}).encode()),
        400,
        "request has 2,100 characters; the limit is 2,000",
    ),
    "a body far over the limit": (
        _post("/translate", b'{"q": "' + b"a" * 200_000 + b'"}'),
        413,
        "the limit is",
    ),
    "a sentence too long": (
        _post("/translate", json.dumps({"q": "word " * 60, **GOOD}).encode()),
        400,
        "a sentence has 299 characters; the limit is 200",
    ),
    "too many sentences": (
        _post("/translate", json.dumps({"q": ["One. Two. Three."] * 5, **GOOD}).encode()),
        400,
        "more than 12 sentences",
    ),
    "native: unknown field": (
        _post("/v1/translate", json.dumps({"text": "a", "beem_size": 4}).encode()),
        400,
        "unknown field 'beem_size'",
    ),
    "native: wrong type": (
        _post("/v1/translate", json.dumps({"text": "a", "beam_size": "4"}).encode()),
        400,
        "'beam_size': Input should be a valid integer",
    ),
    "native: alignments not a boolean": (
        _post("/v1/translate", json.dumps({"text": "a", "alignments": "yes"}).encode()),
        400,
        "'alignments': Input should be a valid boolean",
    ),
    "native: alignments as a number": (
        _post("/v1/translate", json.dumps({"text": "a", "alignments": 1}).encode()),
        400,
        "'alignments': Input should be a valid boolean",
    ),
    "native: impossible options": (
        _post("/v1/translate", json.dumps({"text": "a", "beam_size": 2, "nbest": 3}).encode()),
        400,
        "nbest (3) must be between 1 and the beam size (2)",
    ),
    "native: beam over the server's limit": (
        _post("/v1/translate", json.dumps({"text": "a", "beam_size": 17}).encode()),
        400,
        "at most 16",
    ),
    "native: wrong pair": (
        _post("/v1/translate", json.dumps({"text": "a", "target": "cs"}).encode()),
        400,
        "en->cs is not supported",
    ),
    "native: empty body": (_post("/v1/translate", b""), 400, "empty request body"),
    "unknown path": (("GET", "/v2/nothing", None, {}), 404, "Not Found"),
    "wrong method": (("GET", "/translate", None, {}), 405, "Method Not Allowed"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_a_json_error_saying_what_is_wrong(model_dir, case):
    (method, path, content, headers), status, message = BAD_REQUESTS[case]
    config = ServeConfig(max_chars=2000, max_sentence_chars=200, max_sentences=12)

    async def body(client, _):
        bad = await client.request(method, path, content=content, headers=headers)
        good = await libre(client, "A man runs.")  # and the server still works
        return bad, good

    bad, good = serve_and(model_dir, body, config=config)
    assert bad.status_code == status, bad.text
    assert bad.headers["content-type"] == "application/json"
    assert message in bad.json()["error"]
    assert good.status_code == 200


@pytest.mark.parametrize("continuous", [False, True])
def test_an_engine_exception_is_a_500_for_its_request_only(model_dir, reference, continuous):
    translator = Translator.load(model_dir)
    poison = translator.encode(["kaboom"])[0]
    model = translator.engine.model
    real = model.encode

    def encode(src_ids):  # static batches and the continuous search both encode
        if any(row[: len(poison)].tolist() == poison for row in src_ids):
            raise RuntimeError("the engine broke")
        return real(src_ids)

    model.encode = encode

    async def body(client, _):
        first = await asyncio.gather(
            libre(client, SENTENCES[0]), libre(client, ["x", "kaboom"]), libre(client, SENTENCES[1])
        )
        after = await libre(client, SENTENCES[2])
        return first, after

    config = ServeConfig(max_wait_ms=50, continuous=continuous)
    (ok1, bad, ok2), after = serve_and(model_dir, body, config=config, translator=translator)
    assert bad.status_code == 500
    assert bad.json() == {"error": "translation failed: RuntimeError: the engine broke"}
    want = reference.translate(SENTENCES[:3])
    assert ok1.json()["translatedText"] == want[0]
    assert ok2.json()["translatedText"] == want[1]
    assert after.json()["translatedText"] == want[2]


def test_unbatched_server_gives_the_same_results(model_dir, reference):
    requests = [SENTENCES[i % 6 : i % 6 + 2] for i in range(10)]

    async def body(client, _):
        out = await asyncio.gather(*(libre(client, r) for r in requests))
        return [r.json()["translatedText"] for r in out], (await client.get("/health")).json()

    out, health = serve_and(model_dir, body, config=ServeConfig(batching=False))
    want = dict(zip(SENTENCES, reference.translate(SENTENCES)))
    assert out == [[want[s] for s in r] for r in requests]
    assert health["batches"] == 10  # one per request


def test_split_text_is_what_the_server_translates():
    # The server translates exactly split_text's sentences (a guard for the paragraph tests).
    seg = split_text(f"{SENTENCES[0]} {SENTENCES[1]}", language="en")
    assert seg.sentences == SENTENCES[:2]


def test_a_long_request_is_split_across_batches(model_dir, reference):
    config = ServeConfig(max_batch_tokens=40, max_wait_ms=20)
    long = SENTENCES * 3  # 18 sentences of ~8-13 tokens: about 4 per batch

    async def body(client, _):
        out = await asyncio.gather(libre(client, long), libre(client, SENTENCES[0]))
        return [r.json() for r in out], (await client.get("/health")).json()

    (many, one), health = serve_and(model_dir, body, config=config)
    assert many["translatedText"] == reference.translate(long)
    assert one["translatedText"] == reference.translate(SENTENCES[:1])[0]
    assert health["batches"] >= 5 and health["sentences"] == 19


def test_requests_with_different_options_at_once(model_dir, reference):
    async def body(client, _):
        return await asyncio.gather(
            *(
                client.post("/v1/translate", json={"text": s, "beam_size": 1 + i % 3})
                for i, s in enumerate(SENTENCES * 2)
            ),
            libre(client, SENTENCES),
        )

    *native, lt = serve_and(model_dir, body, config=ServeConfig(max_wait_ms=30))
    for i, (s, r) in enumerate(zip(SENTENCES * 2, native)):
        assert (
            r.json()["translations"][0]["text"] == reference.translate([s], beam_size=1 + i % 3)[0]
        )
    assert lt.json()["translatedText"] == reference.translate(SENTENCES)


def test_an_exported_model_is_served_too(model_dir, reference, tmp_path):
    from seq2seq.export.exporter import export_model

    folder = export_model(model_dir, tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    translator = Translator.load(folder, engine="ctranslate2", method="greedy")
    app = create_app(translator, info=model_info(translator, folder, "ctranslate2"))

    async def main(client):
        return (
            await libre(client, SENTENCES),
            (await client.get("/v1/models")).json(),
            await client.post("/v1/attention", json={"text": SENTENCES[0]}),
            await client.post("/v1/translate", json={"text": "a", "unk_penalty": 0.5}),
            await client.post("/v1/translate", json={"text": SENTENCES[1], "alignments": True}),
        )

    lt, models, attention, unsupported, aligned = run_app(app, main)
    # Greedy CTranslate2 float32 output equals the torch engine's, token for token.
    assert lt.json()["translatedText"] == reference.translate(SENTENCES, method="greedy")
    (m,) = models["models"]
    assert m["engine"] == "ctranslate2" and m["attention"] is False and m["parameters"] is None
    assert m["capabilities"]["positive_constraints"] is False and m["capabilities"]["alignments"]
    assert m["batching"]["continuous"] is False  # static batches: not the torch engine
    assert m["manifest_sha256"] == hashlib.sha256((folder / "export.json").read_bytes()).hexdigest()
    assert m["size_bytes"] == (folder / "model.bin").stat().st_size
    assert attention.status_code == 501
    assert "--engine torch" in attention.json()["error"]
    # An option this engine cannot honour is the client's mistake (400), not a server error.
    assert unsupported.status_code == 400
    assert "supports unk_penalty 0 or inf only" in unsupported.json()["error"]
    # CTranslate2 gives attention: the same pairs as the Translator gives offline.
    want = translator.translate_nbest(SENTENCES[1:2], alignments=True)[0][0]
    (sentence,) = aligned.json()["translations"][0]["sentences"]
    assert sentence["hypotheses"] == [{"text": want.text, "alignment": _pairs(want)}]


def test_a_ctranslate2_engine_with_two_workers_runs_two_batch_lanes(model_dir, reference, tmp_path):
    import torch

    from seq2seq.export.exporter import export_model

    folder = export_model(model_dir, tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # two CTranslate2 workers, so two calls may run at once
    try:
        translator = Translator.load(folder, engine="ctranslate2", method="greedy")
    finally:
        torch.set_num_threads(before)
    info = model_info(translator, folder, "ctranslate2")
    assert translator.engine.concurrent_calls == 2
    with pytest.raises(UserError, match="--lanes 3: this engine runs at most 2"):
        create_app(translator, info=info, config=ServeConfig(lanes=3))
    one = create_app(translator, info=info, config=ServeConfig(lanes=1))
    app = create_app(translator, info=info, config=ServeConfig(max_wait_ms=1))
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(24)]

    async def main(client):
        models = (await client.get("/v1/models")).json()
        answers = await asyncio.gather(*(libre(client, t) for t in texts))
        return models, answers

    models, answers = run_app(app, main)
    assert models["models"][0]["batching"]["lanes"] == 2
    assert run_app(one, lambda c: c.get("/v1/models")).json()["models"][0]["batching"]["lanes"] == 1
    want = reference.translate(texts, method="greedy")
    assert [a.json()["translatedText"] for a in answers] == want
    (service,) = app.state.pool.loaded().values()
    assert service.batcher.stats.batches > 1


def test_an_onnx_engine_refuses_alignments_before_queueing(model_dir, tmp_path):
    from seq2seq.export.exporter import export_model

    folder = export_model(model_dir, tmp_path / "onnx", fmt="onnx")
    translator = Translator.load(folder, engine="onnx", method="greedy")
    app = create_app(translator, info=model_info(translator, folder, "onnx"))

    async def main(client):
        bad = await client.post("/v1/translate", json={"text": SENTENCES[0], "alignments": True})
        health = (await client.get("/health")).json()
        good = await client.post("/v1/translate", json={"text": SENTENCES[0]})
        return bad, health, good

    bad, health, good = run_app(app, main)
    assert bad.status_code == 400
    message = bad.json()["error"]
    assert "onnx engine has no attention weights" in message and "\n" not in message
    with pytest.raises(UserError, match="no attention") as offline:
        translator.translate_nbest(SENTENCES[:1], alignments=True)
    assert message == str(offline.value)  # the engine's own message
    assert health["requests"] == 0  # refused before it reached the queue
    assert good.status_code == 200
    assert good.json()["translations"][0]["text"] == translator.translate(SENTENCES[:1])[0]


# ---- constrained decoding (seq2seq/decode/constraints.py) --------------------------------------------


def test_native_translate_takes_prefix_constraints_and_avoid_per_text(model_dir, reference):
    texts = [SENTENCES[0], SENTENCES[1], SENTENCES[2]]
    prefix = ["two dogs", None, None]
    constraints = [[], ["green car"], []]
    avoid = [[], [], ["bench"]]

    async def body(client, _):
        many = await client.post(
            "/v1/translate",
            json={"text": texts, "prefix": prefix, "constraints": constraints, "avoid": avoid},
        )
        one = await client.post(
            "/v1/translate",
            json={"text": SENTENCES[3], "constraints": ["cat", "red"], "ordered": True},
        )
        bad = [
            await client.post("/v1/translate", json={"text": texts, "prefix": ["a"]}),
            await client.post("/v1/translate", json={"text": "a\nb", "constraints": ["dog"]}),
            await client.post(
                "/v1/translate", json={"text": "a", "constraints": ["dog"], "method": "sample"}
            ),
            await client.post(
                "/v1/translate", json={"text": "a", "constraints": ["red ball"], "avoid": ["ball"]}
            ),
        ]
        return many, one, bad

    many, one, bad = serve_and(model_dir, body)
    assert many.status_code == 200, many.text
    got = [t["text"] for t in many.json()["translations"]]
    want = reference.translate(texts, prefix=prefix, constraints=constraints, avoid=avoid)
    assert got == want
    assert got[0].startswith("two dogs") and "green car" in got[1]
    (entry,) = one.json()["translations"]
    assert (
        entry["text"]
        == reference.translate(SENTENCES[3:4], constraints=[["cat", "red"]], ordered=True)[0]
    )
    assert [r.status_code for r in bad] == [400, 400, 400, 400]
    assert "one entry per text" in bad[0].json()["error"]
    assert "line breaks" in bad[1].json()["error"]
    assert "sampling" in bad[2].json()["error"]
    assert "avoided phrase" in bad[3].json()["error"]


def test_the_model_loads_warms_up_and_translates_on_the_engine_thread(model_dir, monkeypatch):
    """All torch work of a server on one thread (batcher.engine_thread: a model loaded on
    another thread decodes slower; docs/benchmarks.md): loading, warm-up and every request."""
    seen: list[tuple[str, str]] = []
    real_load, real_nbest = Translator.load, Translator.translate_nbest

    def load(cls, *args, **kwargs):
        seen.append(("load", threading.current_thread().name))
        return real_load(*args, **kwargs)

    def nbest(self, *args, **kwargs):
        seen.append(("translate", threading.current_thread().name))
        return real_nbest(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "load", classmethod(load))
    monkeypatch.setattr(Translator, "translate_nbest", nbest)
    executor = engine_thread()
    try:
        engine = executor.submit(lambda: threading.current_thread().name).result()
        translator, _ = load_translator(
            model_dir, engine="torch", device="cpu", search={}, executor=executor
        )

        async def body(client, _translator):
            return await libre(client, SENTENCES[0])

        r = serve_and(model_dir, body, translator=translator, executor=executor)
        assert r.status_code == 200, r.text
        assert executor.submit(lambda: 1).result() == 1  # the app left the thread running
    finally:
        executor.shutdown()
    assert engine != threading.current_thread().name
    assert [name for _, name in seen] == [engine] * len(seen)
    assert [what for what, _ in seen] == ["load", "translate", "translate"]  # + warm-up
