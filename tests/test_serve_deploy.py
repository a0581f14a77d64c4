"""seq2seq serve for real deployments, through the real HTTP stack (httpx -> ASGI app with its
lifespan, batcher and worker thread): API keys added and removed live, LibreTranslate's 403 and
429 shapes, per-key limits, /detect, /frontend/settings, source auto, HTML, files and their
expiry, /metrics, backpressure, and the engine a model directory is served with.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import threading
import time
from pathlib import Path

import lxml.html
import pytest
from factories import make_model_dir, run_app
from prometheus_client.parser import text_string_to_metric_families

from seq2seq.core.errors import UserError
from seq2seq.decode.translator import Translator
from seq2seq.documents import HtmlDocument, RunTranslation
from seq2seq.serve.access import MovingWindow
from seq2seq.serve.app import create_app
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.files import FileStore
from seq2seq.serve.keys import KEY_ALPHABET, KeyStore, KeysUnavailable, KeyTable
from seq2seq.serve.metrics import key_label
from seq2seq.serve.served_model import choose_engine, held_export, model_info

GOOD = {"source": "en", "target": "de"}
SENTENCES = ["A man runs in the park.", "Two dogs play with a red ball.", "The old car is black."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("deploy") / "model", train_steps=150)


@pytest.fixture(scope="module")
def reference(model_dir) -> Translator:
    return Translator.load(model_dir)


def serve_and(model_dir, body, *, translator=None, **config):
    """Run ``await body(client)`` against a fresh app with ``ServeConfig(**config)``."""
    translator = translator or Translator.load(model_dir)
    info = model_info(translator, model_dir, "torch")
    app = create_app(translator, info=info, config=ServeConfig(**config))

    async def main(client):
        return await body(client)

    return run_app(app, main)


def libre(client, q="A man runs.", **fields):
    return client.post("/translate", json={"q": q, **GOOD, **fields})


# ---- keys and limits --------------------------------------------------------------------------


async def until(request, status: int, within: float = 5.0):
    """Send ``request()`` every 0.2 s until it answers ``status``; (that answer, seconds)."""
    started = time.monotonic()
    while True:
        answer = await request()
        if answer.status_code == status or time.monotonic() - started > within:
            return answer, time.monotonic() - started
        await asyncio.sleep(0.2)


def test_a_running_server_checks_the_key_file_at_most_once_a_max_age(tmp_path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    table = KeyTable(db, max_age_s=0.5)
    key = store.add(7)
    assert table.lookup(key) == (False, None)  # checked at start, trusted for 0.5 s
    time.sleep(0.6)
    assert table.lookup(key) == (True, 7)
    store.remove(key)
    assert table.lookup(key) == (True, 7)
    time.sleep(0.6)
    assert table.lookup(key) == (False, None)
    # a file replaced under the same name is read anew (its inode changed)
    db.unlink()
    other = KeyStore(db, create=True).add(3)
    time.sleep(0.6)
    assert table.lookup(other) == (True, 3)


def test_a_new_key_never_starts_with_a_dash(tmp_path, monkeypatch):
    """A key that starts with "-" (1 in 64 of token_urlsafe's) reads as an option on the
    command line: `seq2seq keys remove -abc` would fail."""
    import secrets

    drawn = iter(["-" + "a" * 31, "-" + "b" * 31, "c" * 32])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert KeyStore(tmp_path / "keys.db", create=True).add() == "c" * 32


def test_key_store_makes_private_files_and_fresh_keys(tmp_path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    keys = {store.add(5) for _ in range(20)}
    assert len(keys) == 20 and all(len(k) >= 8 and set(k) <= KEY_ALPHABET for k in keys)
    assert db.stat().st_mode & 0o777 == 0o600
    assert dict(store.list())[min(keys)] == 5
    with pytest.raises(UserError, match="no such API key"):
        store.remove("nope")
    with pytest.raises(UserError, match="not found"):
        KeyStore(tmp_path / "missing.db")


def test_a_key_file_is_private_from_its_first_byte_even_through_a_symlink(tmp_path):
    link = tmp_path / "keys.db"
    target = tmp_path / "elsewhere" / "real.db"
    target.parent.mkdir()
    link.symlink_to(target)  # dangling: keys add creates the target
    KeyStore(link, create=True).add()
    assert target.is_file() and target.stat().st_mode & 0o777 == 0o600
    target.chmod(0o644)  # made readable by others afterwards: refused, with the fix
    for opener in (lambda: KeyStore(link), lambda: KeyTable(link)):
        with pytest.raises(UserError, match=r"other users \(mode 0644\).*chmod 600") as e:
            opener()
        assert "\n" not in str(e.value)


def test_a_non_string_key_in_the_body_is_a_400_not_a_keyless_request(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    key = KeyStore(db, create=True).add()

    async def body(client):
        url = "/translate?api_key=" + key
        return [
            await client.post(url, json={"q": "A dog.", "api_key": value, **GOOD})
            for value in (123, ["x"], {"k": key}, None)
        ] + [
            await client.post("/v1/translate?api_key=" + key, json={"text": "A dog.", "api_key": 1})
        ]

    *bad, null, native = serve_and(model_dir, body, api_keys=str(db), require_api_key=True)
    for answer in (*bad, native):
        assert answer.status_code == 400, answer.text
        assert answer.json() == {"error": "invalid request: field 'api_key' must be a string"}
    assert null.status_code == 200  # null is no key: the query string's is used


def test_a_broken_key_file_is_a_503_while_keyless_requests_go_on(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    key = KeyStore(db, create=True).add()
    table = KeyTable(db, max_age_s=0)
    assert table.lookup(key) == (True, None)

    async def breaks(client):
        first = await libre(client, api_key=key)
        db.write_bytes(b"not a database" * 200)  # broken in place while the server runs
        await asyncio.sleep(1.1)  # the server looks at the file again at most once a second
        return first, await libre(client, api_key=key), await libre(client)

    first, keyed, keyless = serve_and(model_dir, breaks, api_keys=str(db))
    assert first.status_code == 200 and keyless.status_code == 200
    assert keyed.status_code == 503 and int(keyed.headers["Retry-After"]) >= 1
    assert keyed.json() == {"error": "API keys cannot be checked right now; retry later"}
    with pytest.raises(KeysUnavailable):  # the table itself, as the server's lookup sees it
        table.lookup(key)


def test_keys_are_checked_and_limited_per_key_and_changes_apply_live(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    slow, default = store.add(2), store.add()

    async def body(client):
        out = {}
        out["bad"] = await libre(client, api_key="not-a-key")
        out["slow"] = [(await libre(client, api_key=slow)).status_code for _ in range(3)]
        out["slow_429"] = await libre(client, api_key=slow)
        # another key from the same address keeps working; its limit is the server's (3)
        out["default"] = [
            (await client.post("/translate?api_key=" + default, data={"q": "A dog.", **GOOD}))
            .status_code for _ in range(4)
        ]  # fmt: skip
        out["keyless"] = [(await libre(client)).status_code for _ in range(4)]
        new = store.add(10)  # added while the server runs: in use within a second
        out["new"], out["new_after"] = await until(lambda: libre(client, api_key=new), 200)
        store.remove(new)
        out["removed"], out["removed_after"] = await until(lambda: libre(client, api_key=new), 403)
        out["native"] = (
            await client.post("/v1/translate", json={"text": "A dog.", "api_key": default})
        ).status_code
        free = [
            await client.request("GET", "/languages", json={"api_key": "not-a-key"}),
            await client.get("/health"),
            await client.get("/frontend/settings"),
            await client.get("/metrics"),
        ]
        out["free"] = [r.status_code for r in free for _ in range(3)]
        return out

    out = serve_and(model_dir, body, api_keys=str(db), req_limit=3, slowdown_delay_s=0)
    assert out["bad"].status_code == 403 and out["bad"].json() == {"error": "Invalid API key"}
    assert out["slow"] == [200, 200, 429]
    assert out["slow_429"].json() == {"error": "Slowdown: 2 per 1 minute"}
    assert out["default"] == [200, 200, 200, 429]
    assert out["keyless"] == [200, 200, 200, 429]  # per address, --req-limit
    assert out["new"].status_code == 200 and out["new_after"] <= 1.5
    assert out["removed"].json() == {"error": "Invalid API key"} and out["removed_after"] <= 1.5
    assert out["native"] == 429  # the default key's minute is used up: the same count
    assert set(out["free"]) == {200}


def test_a_429_waits_out_the_slowdown_delay_and_says_when_to_retry(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    store = KeyStore(db, create=True)
    slow, other = store.add(1), store.add(100)

    async def timed(request):
        started = time.perf_counter()
        answer = await request
        return answer, time.perf_counter() - started

    async def body(client):
        first = await libre(client, api_key=slow)
        # the refused request and another key's, sent together: only the refusal is held
        (limited, held), (fine, _) = await asyncio.gather(
            timed(libre(client, api_key=slow)), timed(libre(client, api_key=other))
        )
        return first, limited, held, fine

    first, limited, held, fine = serve_and(model_dir, body, api_keys=str(db), slowdown_delay_s=0.5)
    assert first.status_code == 200 and fine.status_code == 200
    assert limited.status_code == 429
    assert limited.json() == {"error": "Slowdown: 1 per 1 minute"}
    assert held >= 0.5
    # the one request of its minute was just let through: about 60 s until the next
    assert 55 <= int(limited.headers["Retry-After"]) <= 60
    with pytest.raises(UserError, match="--slowdown-delay must be between 0 and 60"):
        ServeConfig(slowdown_delay_s=-1)


def test_a_required_key_refuses_keyless_requests(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    key = KeyStore(db, create=True).add()

    async def body(client):
        return (
            await libre(client),
            await libre(client, api_key=key),
            (await client.get("/frontend/settings")).json(),
        )

    none, good, settings = serve_and(model_dir, body, api_keys=str(db), require_api_key=True)
    assert none.status_code == 403 and "API key" in none.json()["error"]
    assert good.status_code == 200
    assert settings["apiKeys"] is True and settings["keyRequired"] is True


def test_a_full_queue_is_a_503_with_retry_after(model_dir, reference):
    translator = Translator.load(model_dir)
    gate, entered = threading.Event(), threading.Event()
    real = translator.translate_nbest

    def held(*args, **kwargs):  # the first batch holds the engine until the test lets it go
        entered.set()
        gate.wait(30)
        return real(*args, **kwargs)

    translator.translate_nbest = held

    async def body(client):
        first = asyncio.create_task(libre(client, SENTENCES[0]))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
        queued = asyncio.create_task(libre(client, SENTENCES[1:3]))  # 2 sentences wait
        for _ in range(3000):  # until the two sentences are queued behind the held batch
            if (await client.get("/health")).json()["queued_sentences"] == 2:
                break
            await asyncio.sleep(0.01)
        refused = await libre(client, SENTENCES[0])
        gate.set()
        return await first, await queued, refused

    first, queued, refused = serve_and(
        model_dir, body, translator=translator, max_queue=2, max_wait_ms=0
    )
    assert first.status_code == 200 and queued.status_code == 200
    assert queued.json()["translatedText"] == reference.translate(SENTENCES[1:3])
    assert refused.status_code == 503 and "busy" in refused.json()["error"]
    assert int(refused.headers["Retry-After"]) >= 1


def test_a_file_is_queued_in_parts_within_the_queue_bound(model_dir, reference):
    """A file is admitted by the limits of a request: queued a part at a time (at most half of
    --max-queue), so that another client's request still finds room."""
    translator = Translator.load(model_dir)
    gate, entered = threading.Event(), threading.Event()
    real = translator.translate_nbest

    def held(*args, **kwargs):  # the first batch holds the engine until the test lets it go
        entered.set()
        gate.wait(30)
        return real(*args, **kwargs)

    translator.translate_nbest = held
    lines = [SENTENCES[k % 3] for k in range(24)]  # 24 sentences, one a line
    upload = {"file": ("many.txt", "\n".join(lines).encode())}
    most = 0

    async def body(client):
        nonlocal most
        sent = asyncio.create_task(client.post("/translate_file", data=GOOD, files=upload))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 30)
        for _ in range(20):  # while the engine is held: what the file left queued
            most = max(most, (await client.get("/health")).json()["queued_sentences"])
            await asyncio.sleep(0.01)
        other = asyncio.create_task(libre(client, SENTENCES[0]))
        for _ in range(20):  # the other request is answered (a 503) or waits for the engine
            most = max(most, (await client.get("/health")).json()["queued_sentences"])
            await asyncio.sleep(0.01)
        gate.set()
        answer = await sent
        got = await client.get(answer.json()["translatedFileUrl"]) if answer.is_success else None
        return answer, got, await other

    answer, got, other = serve_and(
        model_dir, body, translator=translator, max_queue=8, max_wait_ms=0, max_batch_tokens=24
    )
    assert answer.status_code == 200, answer.text
    assert other.status_code == 200, other.text  # another client is served meanwhile
    assert most <= 8  # the file never held more than the bound
    assert got.text == "\n".join(reference.translate(lines))


# ---- detection, settings, languages -----------------------------------------------------------


def test_detect_settings_and_auto_source(model_dir, reference):
    async def body(client):
        return (
            (await client.post("/detect", json={"q": "Der Hund und die Katze sind hier."})).json(),
            (await client.post("/detect", data={"q": "The dog and the cat are here."})).json(),
            (await client.get("/frontend/settings")).json(),
            (await libre(client, [SENTENCES[0], SENTENCES[1]], source="auto")).json(),
            await client.post("/detect", json={"q": ""}),
        )

    de, en, settings, auto, empty = serve_and(model_dir, body, max_chars=5000)
    assert de[0]["language"] == "de" and en[0]["language"] == "en"
    assert {d["language"] for d in de} == {"en", "de"}
    assert all(0 <= d["confidence"] <= 100 for d in de + en) and de[0]["confidence"] > 50
    assert settings["charLimit"] == 5000 and settings["apiKeys"] is False
    assert settings["filesTranslation"] is True and ".txt" in settings["supportedFilesFormat"]
    assert settings["language"]["source"]["code"] == "en"
    assert auto["translatedText"] == reference.translate(SENTENCES[:2])
    assert auto["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 2
    assert empty.status_code == 400 and "error" in empty.json()


# ---- HTML ---------------------------------------------------------------------------------------


def _upper(markup: str, reverse: bool = False) -> str:
    """Translate every run by upper-casing its words (reversed: in reverse word order), with
    the matching word alignment: what the HTML module does with any model's output."""
    doc = HtmlDocument(markup)
    out = []
    for text in doc.texts:
        words = text.split()
        n = len(words)
        tgt = [w.upper() for w in (words[::-1] if reverse else words)]
        pairs = [(i, n - 1 - i if reverse else i) for i in range(n)]
        out.append(RunTranslation([(text, " ".join(tgt), pairs)]))
    return doc.apply(out)


def test_html_keeps_tags_attributes_entities_script_and_style():
    markup = (
        '<p class="c" id="x">one <b>two <i title="a &amp; b">three</i></b> four &amp; five '
        '<a href="/p?a=1&amp;b=2">six</a><br>seven &lt;8&gt;</p>'
        '<script>if (a < b) { s = "one"; }</script><style>p > b { color: red }</style>'
        "<!-- note --><ul><li>nine <code>x = 1</code> ten</li></ul>tail"
    )
    assert _upper(markup) == (
        '<p class="c" id="x">ONE <b>TWO <i title="a &amp; b">THREE</i></b> FOUR &amp; FIVE '
        '<a href="/p?a=1&amp;b=2">SIX</a><br> SEVEN &lt;8&gt;</p>'
        '<script>if (a < b) { s = "one"; }</script><style>p > b { color: red }</style>'
        "<!-- note --><ul><li>NINE <code>x = 1</code> TEN</li></ul>TAIL"
    )


def test_html_inline_markup_follows_the_alignment():
    assert _upper("<p>one <b>two <i>three</i></b> four</p>", reverse=True) == (
        "<p>FOUR <b><i>THREE</i> TWO</b> ONE</p>"
    )
    doc = HtmlDocument("<!DOCTYPE html><html><body><h1>Hi <em>there</em></h1></body></html>")
    assert doc.texts == ["Hi there"]
    page = doc.apply([RunTranslation([("Hi there", "Hallo du", [(0, 0), (1, 1)])])])
    assert page.startswith("<!DOCTYPE html>") and "<h1>Hallo <em>du</em></h1>" in page
    # no doctype in, none out (libxml2 would add an HTML 4 one)
    assert _upper("<html><body><p>x</p></body></html>") == "<html><body><p>X</p></body></html>"


def test_html_over_http_translates_runs_with_the_model(model_dir, reference):
    markup = (
        '<div class="a"><p id="p1">A man runs in <b>the park</b>.</p>'
        "<script>var s = 'A man runs.';</script><p>Two dogs play with a red ball.</p></div>"
    )

    async def body(client):
        bad = [await libre(client, q, format="html") for q in ("<!DOCTYPE html>", "  ")]
        return await libre(client, markup, format="html"), bad

    r, bad = serve_and(model_dir, body)
    assert [b.status_code for b in bad] == [400, 400]
    assert "not HTML" in bad[0].json()["error"] and "empty text" in bad[1].json()["error"]
    assert r.status_code == 200, r.text
    out = lxml.html.fragment_fromstring(r.json()["translatedText"])
    assert out.tag == "div" and out.get("class") == "a"
    p1, script, p2 = out
    assert p1.get("id") == "p1" and [c.tag for c in p1] == ["b"]
    assert script.text == "var s = 'A man runs.';"
    t = reference.translate(["A man runs in the park.", "Two dogs play with a red ball."])
    assert " ".join(p1.text_content().split()) == t[0]
    assert p2.text_content() == t[1]


# ---- files --------------------------------------------------------------------------------------


def test_translate_file_round_trip_limits_and_expiry(model_dir, reference):
    text = f"{SENTENCES[0]}\n\n  {SENTENCES[1]} {SENTENCES[2]}\n"

    async def body(client):
        def upload(name, data, **fields):
            return client.post(
                "/translate_file", data={**GOOD, **fields}, files={"file": (name, data)}
            )

        r = await upload("notes.txt", text.encode())
        url = r.json()["translatedFileUrl"]
        got = await client.get(url)
        html = await upload("page.html", b"<p>The old car is <b>black</b>.</p>")
        html_got = await client.get(html.json()["translatedFileUrl"])
        bad = [
            await upload("x.pdf", b"%PDF"),
            await upload("big.txt", b"a" * 5000),
            await upload("latin1.txt", "caf\xe9".encode("latin-1")),
        ]
        guessed = await client.get(url.rsplit("/", 2)[0] + "/AAAA/notes.de.txt")
        await asyncio.sleep(1.2)  # past the expiry
        expired = await client.get(url)
        return url, got, html_got, bad, guessed, expired

    url, got, html_got, bad, guessed, expired = serve_and(
        model_dir, body, max_file_bytes=4000, file_expiry_s=1.0
    )
    assert re.fullmatch(r"http://serve/download_file/[A-Za-z0-9_-]{43}/notes\.de\.txt", url)
    t = reference.translate(SENTENCES)
    assert got.status_code == 200 and got.text == f"{t[0]}\n\n  {t[1]} {t[2]}\n"
    assert got.headers["content-type"].startswith("text/plain")
    assert html_got.headers["content-type"].startswith("text/html")
    assert "<b>" in html_got.text and html_got.text.startswith("<p>")
    assert [r.status_code for r in bad] == [400, 413, 400]
    assert guessed.status_code == 404 and expired.status_code == 404


def test_file_store_expires_and_bounds_its_bytes():
    now = [0.0]
    store = FileStore(10, max_bytes=10, clock=lambda: now[0])
    a = store.put("a.txt", "aaaa")
    b = store.put("b.txt", "bbbb")
    assert store.get(a).data == b"aaaa"
    c = store.put("c.txt", "cccc")  # 12 bytes held: the oldest goes
    assert store.get(a) is None and store.get(b) is not None and store.get(c) is not None
    now[0] = 11
    assert store.get(b) is None and store.get(c) is None


# ---- metrics ------------------------------------------------------------------------------------


def _samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_move_with_traffic(model_dir, tmp_path):
    db = tmp_path / "keys.db"
    key = KeyStore(db, create=True).add()

    async def body(client):
        before = (await client.get("/metrics")).text
        for _ in range(3):
            await libre(client, SENTENCES[:2], api_key=key)
        await libre(client, api_key="wrong")
        return before, await client.get("/metrics")

    before, after = serve_and(model_dir, body, api_keys=str(db))
    assert after.headers["content-type"].startswith("text/plain")
    a, b = _samples(before), _samples(after.text)
    ok = ("seq2seq_requests_total", (("route", "/translate"), ("status", "200")))
    bad = ("seq2seq_requests_total", (("route", "/translate"), ("status", "403")))
    assert b[ok] - a.get(ok, 0) == 3 and b[bad] == 1
    model = (("model", "model"),)  # each model's engine metrics carry its name
    assert b[("seq2seq_translated_sentences_total", model)] == 6
    chars = sum(len(s) for s in SENTENCES[:2]) * 3
    assert b[("seq2seq_translated_characters_total", model)] == chars
    assert b[("seq2seq_batch_sentences_count", model)] >= 3
    assert b[("seq2seq_request_seconds_count", (("route", "/translate"),))] == 4
    assert b[("seq2seq_key_requests_total", (("key", key_label(key)),))] == 3
    assert key not in after.text and ("seq2seq_queued_sentences", model) in b
    assert b[("seq2seq_model_loaded", model)] == 1


def test_metrics_can_be_switched_off(model_dir):
    async def body(client):
        return await client.get("/metrics"), await libre(client)

    off, ok = serve_and(model_dir, body, metrics=False)
    assert off.status_code == 404 and ok.status_code == 200


# ---- the engine a model directory is served with ----------------------------------------------


def test_a_model_directory_is_served_with_the_ctranslate2_export_it_holds(model_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from seq2seq.export import export_model

    model = tmp_path / "model"
    make_model_dir(model, train_steps=150)
    assert choose_engine([model], None) == ("torch", [model])
    with pytest.raises(UserError, match="holds no ctranslate2 export"):
        choose_engine([model], "ctranslate2")
    other = make_model_dir(tmp_path / "other", train_steps=0, seed=3)
    export_model(other, model / "export" / "stale", fmt="ctranslate2", quantization="int8")
    assert held_export(model) is None  # made from other weights
    export_model(model, model / "export" / "f32", fmt="ctranslate2", quantization="none")
    export_model(model, model / "export" / "int8", fmt="ctranslate2", quantization="int8")
    assert choose_engine([model], None) == ("ctranslate2", [model / "export" / "int8"])
    assert choose_engine([model], "torch") == ("torch", [model])
    assert choose_engine([model / "export" / "f32"], None)[0] == "ctranslate2"
    assert choose_engine([model, other], None) == ("torch", [model, other])
    with pytest.raises(UserError, match="ensemble"):
        choose_engine([model, other], "ctranslate2")


def test_an_ensemble_is_served(model_dir, tmp_path, reference):
    second = Path(shutil.copytree(model_dir, tmp_path / "second"))  # same vocabulary
    translator = Translator.load([model_dir, second])
    info = model_info(translator, [model_dir, second], "torch")
    app = create_app(translator, info=info)

    async def main(client):
        return (await libre(client, SENTENCES[0])).json(), (await client.get("/v1/models")).json()

    answer, models = run_app(app, main)
    assert answer["translatedText"] == translator.translate(SENTENCES[:1])[0]
    assert answer["translatedText"] == reference.translate(SENTENCES[:1])[0]  # twice one model
    (m,) = models["models"]
    assert m["members"] == [str(model_dir.resolve()), str(second.resolve())]
    assert m["id"] == f"{model_dir.name}+{second.name}"


# ---- the moving window -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_moving_window_admits_n_a_minute_and_says_when_the_next_one_may_come():
    clock = Clock()
    window = MovingWindow(clock=clock)
    admitted = []
    for t in (0, 10, 20):
        clock.now = 1000.0 + t
        admitted.append(window.hit("a", 3))
    assert admitted == [None, None, None]
    clock.now = 1030.0
    assert window.hit("a", 3) == pytest.approx(30.0)  # the first admission leaves at 1060
    assert window.hit("b", 3) is None  # another client has its own count
    clock.now = 1060.0  # exactly a minute after the first: it no longer counts
    assert window.hit("a", 3) is None
    assert window.hit("a", 3) == pytest.approx(10.0)  # refusals are not counted: 1010 leaves next
    # a lowered limit counts the admissions already in the window
    assert window.hit("a", 1) == pytest.approx(60.0)  # all three must leave: 1060 last


def test_the_moving_window_forgets_clients_gone_for_a_minute(monkeypatch):
    import seq2seq.serve.access as access

    monkeypatch.setattr(access, "SWEEP_EVERY", 5)
    clock = Clock()
    window = MovingWindow(clock=clock)
    for i in range(4):
        window.hit(f"old{i}", 10)
    clock.now += 61
    assert len(window) == 4
    window.hit("new", 10)  # the fifth admission sweeps: the four old clients are gone
    assert len(window) == 1
