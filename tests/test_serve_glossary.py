"""Glossaries on the server: per request in /translate, /v1/translate and /translate_file,
named glossaries per API key (``seq2seq glossary``), a key seeing only its own, and the 400s
of bad glossaries; on a tiny trained model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import make_model_dir, run_app

from seq2seq.decode.glossary import Glossary
from seq2seq.decode.translator import Translator
from seq2seq.serve.app import create_app
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.glossaries import SqliteGlossaries
from seq2seq.serve.keys import KeyStore
from seq2seq.serve.served_model import model_info

TERMS = [{"source": "dog", "target": "cat bench"}, {"source": "red ball", "target": "green car"}]
KEEP = ["ACME-9000™", "x_y.z"]
TEXT = "A dog sits near ACME-9000™. The Red ball is x_y.z in the park!\n\nTwo dogs walk."


@pytest.fixture(scope="module")
def translator(tmp_path_factory) -> Translator:
    model = make_model_dir(tmp_path_factory.mktemp("serve_glossary") / "model", train_steps=150)
    translator = Translator.load(model)
    translator.model_dir = model  # (for model_info)
    return translator


def serve(translator, body, **config):
    info = model_info(translator, translator.model_dir, "torch")
    app = create_app(translator, info=info, config=ServeConfig(**config))
    return run_app(app, body)


def check(text: str) -> None:
    """Every term's target and every kept span of TEXT is in ``text``, and the layout holds."""
    first, blank, last = text.split("\n")
    assert "cat bench" in first and "green car" in first and blank == ""
    assert "ACME-9000™" in first and "x_y.z" in first
    assert "cat bench" not in last  # "dogs" is not the term "dog"


def test_per_request_glossary_in_every_route(translator):
    async def body(client):
        native = await client.post(
            "/v1/translate", json={"text": TEXT, "glossary": TERMS, "do_not_translate": KEEP}
        )
        libre = await client.post(
            "/translate",
            json={"q": [TEXT], "source": "en", "target": "de", "glossary": TERMS,
                  "do_not_translate": KEEP},
        )  # fmt: skip
        form = await client.post(
            "/translate",
            data={"q": TEXT, "source": "en", "target": "de", "glossary": json.dumps(TERMS),
                  "do_not_translate": "\n".join(KEEP)},
        )  # fmt: skip
        upload = await client.post(
            "/translate_file",
            files={"file": ("a.txt", TEXT.encode())},
            data={"source": "en", "target": "de", "glossary": json.dumps(TERMS),
                  "do_not_translate": json.dumps(KEEP)},
        )  # fmt: skip
        file = await client.get(upload.json()["translatedFileUrl"])
        settings = await client.get("/frontend/settings")
        return native, libre, form, file, settings

    native, libre, form, file, settings = serve(translator, body)
    assert native.status_code == 200, native.text
    check(native.json()["translations"][0]["text"])
    assert libre.status_code == 200, libre.text
    check(libre.json()["translatedText"][0])
    assert form.status_code == 200, form.text
    check(form.json()["translatedText"])
    check(file.text)
    assert settings.json()["glossaries"] is True
    assert settings.json()["namedGlossaries"] is False
    # the same as the Translator with the same glossary, sentence by sentence
    glossary = Glossary([(t["source"], t["target"]) for t in TERMS], KEEP)
    want = translator.translate(
        ["A dog sits near ACME-9000™.", "The Red ball is x_y.z in the park!"], glossary=glossary
    )
    assert native.json()["translations"][0]["text"].split("\n")[0] == " ".join(want)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"glossary": [{"source": "dog"}]}, "field 'glossary': entry 0: target: missing"),
        ({"glossary": [{"source": " ", "target": "x"}]},
         "field 'glossary': entry 0: source: an empty term"),
        ({"glossary": [{"source": "a", "target": "b", "x": 1}]},
         "field 'glossary': entry 0: x: unknown field"),
        ({"glossary": ["dog"]}, "field 'glossary': entry 0: expected an object {source, target}, got a string"),
        ({"glossary": [{"source": "dog", "target": "a"}, {"source": "dog", "target": "b"}]},
         "glossary: entry 2: the source term 'dog' has the target 'b'"),
        ({"glossary": "legal"}, "glossary: named glossaries need a server with --api-keys"),
        ({"glossary": 3}, "field 'glossary': expected a glossary's name or a list"),
        ({"do_not_translate": "ACME"}, "field 'do_not_translate'"),
        ({"do_not_translate": ["a", ""]}, "do_not_translate': entry 1: an empty term"),
        ({"glossary": [{"source": "dog", "target": "Hund€€"}]},
         "glossary: sentence 'A dog sits.': 'Hund€€' (glossary entry 1) has characters"),
        ({"glossary": TERMS, "method": "sample"}, "glossary needs beam search or greedy"),
    ],
)  # fmt: skip
def test_bad_glossaries_are_400s_naming_the_field(translator, extra, message):
    async def body(client):
        return await client.post("/v1/translate", json={"text": "A dog sits.", **extra})

    r = serve(translator, body)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"], r.json()["error"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SEQ2SEQ_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "seq2seq.cli", "glossary", *args],
        capture_output=True,
        env=env,
        timeout=120,
    )


def test_named_glossaries_belong_to_their_key(translator, tmp_path: Path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    mine, other = store.add(), store.add()
    store.close()
    glossaries = SqliteGlossaries(db)
    glossaries.put(mine, "pets", [("dog", "cat bench")])
    glossaries.close()

    async def body(client):
        def ask(key, name="pets"):
            return client.post(
                "/v1/translate", json={"text": "A dog sits.", "glossary": name, "api_key": key}
            )

        own, foreign, unknown, keyless = (
            await ask(mine),
            await ask(other),
            await ask(mine, "x"),
            (await ask(None)),
        )
        settings = await client.get("/frontend/settings")
        return own, foreign, unknown, keyless, settings

    own, foreign, unknown, keyless, settings = serve(translator, body, api_keys=str(db))
    assert own.status_code == 200 and "cat bench" in own.json()["translations"][0]["text"]
    assert foreign.status_code == 400
    assert foreign.json()["error"] == "glossary: no glossary named 'pets' for this API key"
    assert unknown.json()["error"] == "glossary: no glossary named 'x' for this API key"
    assert keyless.status_code == 400 and "send api_key" in keyless.json()["error"]
    assert settings.json()["namedGlossaries"] is True


@pytest.mark.slow
def test_the_glossary_command(tmp_path: Path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    mine, other = store.add(), store.add()
    store.close()
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tcat bench\n", encoding="utf-8")
    r = _cli("add", "--db", str(db), "--key", mine, "--name", "pets", "--file", str(terms))
    assert r.returncode == 0, r.stderr.decode()
    assert SqliteGlossaries(db).get(mine, "pets") == [("dog", "cat bench")]
    r = _cli("list", "--db", str(db), "--key", mine)
    assert r.stdout.decode().split() == [mine, "pets", "1"]
    assert _cli("list", "--db", str(db), "--key", other).stdout == b""
    bad = tmp_path / "bad.tsv"
    bad.write_text("dog\tcat\nball\n", encoding="utf-8")
    r = _cli("add", "--db", str(db), "--key", mine, "--name", "x", "--file", str(bad))
    assert r.returncode == 2 and r.stderr.decode().strip().endswith(
        f"{bad}:2: expected SOURCE<TAB>TARGET, got 1 field(s)"
    )
    r = _cli("add", "--db", str(db), "--key", "nope", "--name", "x", "--file", str(terms))
    assert r.returncode == 2 and b"no such API key" in r.stderr
    r = _cli("remove", "--db", str(db), "--key", other, "--name", "pets")
    assert r.returncode == 2 and b"no glossary named 'pets'" in r.stderr
    r = _cli("remove", "--db", str(db), "--key", mine, "--name", "pets")
    assert r.returncode == 0 and _cli("list", "--db", str(db)).stdout == b""


def test_html_keeps_its_markup_under_a_glossary(translator):
    html = "<p>A <b>dog</b> sits near ACME-9000™.</p>"

    async def body(client):
        return await client.post(
            "/translate",
            json={"q": html, "source": "en", "target": "de", "format": "html",
                  "glossary": TERMS, "do_not_translate": KEEP},
        )  # fmt: skip

    r = serve(translator, body)
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    assert out.startswith("<p>") and out.endswith("</p>") and "<b>" in out
    assert "cat" in out and "bench" in out and "ACME-9000™" in out


class NoConstraints:
    """An engine like CTranslate2's: no positive constraints."""

    positive_constraints = False

    def __init__(self, engine) -> None:
        self.engine = engine

    def translate_ids(self, src, opts, constraints=None, **kwargs):
        return self.engine.translate_ids(src, opts, constraints=constraints, **kwargs)


def test_an_engine_without_positive_constraints_refuses_glossaries(translator):
    t = Translator(
        NoConstraints(translator.engine),
        translator.tokenizer,
        max_src_positions=translator.max_src_positions,
        opts=translator.opts,
        cfg=translator.cfg,
    )
    t.model_dir = translator.model_dir

    async def body(client):
        hit = await client.post("/v1/translate", json={"text": "A dog.", "glossary": TERMS})
        miss = await client.post("/v1/translate", json={"text": "Two cats.", "glossary": TERMS})
        return hit, miss, await client.get("/frontend/settings")

    hit, miss, settings = serve(t, body)
    assert hit.status_code == 400 and "cannot apply glossaries" in hit.json()["error"]
    assert miss.status_code == 200  # no term in it: nothing to constrain
    assert settings.json()["glossaries"] is False
