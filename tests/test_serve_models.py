"""Several models in one server: routing by language pair, pivoting, the memory budget
(``--max-loaded``), ``/ready``, and the mistakes refused before the port opens.

Three tiny untrained models (fr-en, en-de, en-es; different seeds, so each writes its own
deterministic output and a request answered by the wrong model is caught) are served through
FastAPI's in-process transport; every answer is checked against the right model translating
offline. ``test_a_real_server_routes_pivots_and_keeps_its_budget`` runs ``seq2seq serve`` as a
process.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest
from factories import make_model_dir, perturbed_copy, run_app
from prometheus_client.parser import text_string_to_metric_families

from seq2seq.cli.command import main
from seq2seq.core.errors import UserError
from seq2seq.decode.translator import Translator
from seq2seq.serve.app import create_app
from seq2seq.serve.batcher import engine_thread
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.model_specs import ModelSpec, plan_model, read_models_file
from seq2seq.serve.routing import Router
from seq2seq.serve.served_model import load_here

TEXTS = ["A man runs in the park.", "Two dogs play with a red ball."]
PAIRS = {"fr-en": 1, "en-de": 2, "en-es": 3}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        pair: make_model_dir(root / pair, cfg_overrides=(f"data.pair={pair}",), seed=seed)
        for pair, seed in PAIRS.items()
    }


@pytest.fixture(scope="module")
def offline(dirs) -> dict[str, Translator]:
    return {pair: Translator.load(d) for pair, d in dirs.items()}


def planned(dirs, *pairs):
    return [plan_model(ModelSpec(folders=(dirs[p],))) for p in pairs or PAIRS]


def serve_models(dirs, body, *, pairs=(), loads=None, gate=None, **config):
    """``await body(client, app)`` against an app serving ``pairs`` (all three by default).

    ``loads`` collects the names loaded, in order; ``gate`` (a threading.Event) holds every
    load until it is set."""
    executor = engine_thread()

    def load(model):
        if gate is not None:
            gate.wait(30)
        if loads is not None:
            loads.append(model.name)
        return load_here(model.load_target, engine=model.engine, device="cpu", search={})

    app = create_app(
        # the models are untrained and loop: compared with offline translation, unguarded
        config=ServeConfig(**{"repetition_guard": False, **config}),
        executor=executor,
        models=planned(dirs, *pairs),
        load=load,
    )

    async def main_(client):
        return await body(client, app)

    try:
        return run_app(app, main_)
    finally:
        executor.shutdown()


def libre(client, q, source, target, **fields):
    return client.post("/translate", json={"q": q, "source": source, "target": target, **fields})


def samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


# ---- routing ---------------------------------------------------------------------------------


def test_each_pair_goes_to_its_model_and_languages_are_the_union(dirs, offline):
    async def body(client, _app):
        answers = {p: await libre(client, TEXTS, *p.split("-")) for p in PAIRS}
        native = await client.post("/v1/translate", json={"text": TEXTS[0], "target": "es"})
        return answers, native, await client.get("/languages"), await client.get("/v1/models")

    answers, native, languages, models = serve_models(dirs, body)
    for pair, r in answers.items():
        assert r.status_code == 200, r.text
        assert r.json()["translatedText"] == offline[pair].translate(TEXTS), pair
    assert native.json()["route"] == [{"model": "en-es", "source": "en", "target": "es"}]
    assert native.json()["translations"][0]["text"] == offline["en-es"].translate(TEXTS[:1])[0]
    targets = {x["code"]: x["targets"] for x in languages.json()}
    # direct targets, then those reached through English
    assert targets == {"fr": ["en", "de", "es"], "en": ["de", "es"], "de": [], "es": []}
    listed = models.json()
    assert [m["id"] for m in listed["models"]] == ["fr-en", "en-de", "en-es"]
    assert [m["serves"] for m in listed["models"]] == [
        [["fr", "en"]],
        [["en", "de"]],
        [["en", "es"]],
    ]
    assert all(m["memory"]["loaded"] for m in listed["models"]) and listed["pivot"] == "en"


def test_a_pair_through_the_pivot_is_leg2_of_leg1(dirs, offline):
    async def body(client, _app):
        return (
            await libre(client, TEXTS, "fr", "de"),
            await client.post(
                "/v1/translate", json={"text": TEXTS, "source": "fr", "target": "es", "nbest": 2}
            ),
            await libre(client, "<p>A man <b>runs</b>.</p>", "fr", "de", format="html"),
        )

    text, native, html = serve_models(dirs, body)
    leg1 = offline["fr-en"].translate(TEXTS)
    assert leg1 != TEXTS
    assert text.json()["translatedText"] == offline["en-de"].translate(leg1)
    assert text.json()["translatedText"] != offline["en-de"].translate(TEXTS)  # leg 1 mattered
    body = native.json()
    assert [leg["model"] for leg in body["route"]] == ["fr-en", "en-es"]
    assert [t["text"] for t in body["translations"]] == offline["en-es"].translate(leg1)
    assert len(body["translations"][0]["nbest"]) == 2 and body["model"] == "en-es"
    assert html.status_code == 200 and html.json()["translatedText"].startswith("<p>")


def test_a_pair_nobody_serves_is_a_400_naming_the_languages(dirs):
    async def body(client, _app):
        return (
            await libre(client, TEXTS[0], "de", "es"),
            await client.post("/v1/translate", json={"text": "x", "source": "en", "target": "fr"}),
            await libre(client, TEXTS[0], "auto", "xx"),
        )

    for r in serve_models(dirs, body):
        assert r.status_code == 400, r.text
        assert "served languages: fr, en, de, es" in r.json()["error"]


def test_without_pivoting_only_direct_pairs_are_served(dirs):
    async def body(client, _app):
        return await libre(client, TEXTS[0], "fr", "de"), await client.get("/languages")

    r, languages = serve_models(dirs, body, pivot=None)
    assert r.status_code == 400
    assert {x["code"]: x["targets"] for x in languages.json()}["fr"] == ["en"]


def test_the_routing_rule():
    # a bilingual model wins over a multilingual one
    router = Router(
        [("multi", [("en", "de"), ("en", "fr")], True), ("ende", [("en", "de")], False)]
    )
    assert router.route("en", "de").legs[0].model == "ende"
    assert router.route("en", "fr").legs[0].model == "multi"
    assert router.route(None, None).direction == ("en", "de")  # the first model's first pair
    for clash in (
        [("a", [("en", "de")], False), ("b", [("en", "de")], False)],
        [("a", [("en", "de")], True), ("b", [("en", "de"), ("de", "en")], True)],
    ):
        with pytest.raises(UserError, match="en->de is served by the .* models a and b"):
            Router(clash)
    pivot = Router([("a", [("fr", "de")], False), ("b", [("de", "es")], False)], pivot="de")
    assert [g.model for g in pivot.route("fr", "es").legs] == ["a", "b"]
    assert pivot.targets("fr") == ["de", "es"] and pivot.sources("es") == ["de", "fr"]


# ---- the memory budget -----------------------------------------------------------------------


def test_max_loaded_unloads_the_least_recently_used_and_requests_wait(dirs, offline):
    loads: list[str] = []

    async def body(client, app):
        ready = await client.get("/ready")  # no model is marked preload: ready at once
        first = await libre(client, TEXTS, "en", "de")
        # four requests at once for a model that is not loaded: one load, four answers
        burst = await asyncio.gather(*(libre(client, TEXTS, "en", "es") for _ in range(4)))
        # a pivot needs two models: each leg loads its model in turn within the budget of 1
        pivot = await libre(client, TEXTS, "fr", "de")
        # two models wanted at once with room for one: the second waits for the first
        both = await asyncio.gather(
            libre(client, TEXTS, "en", "es"), libre(client, TEXTS, "fr", "en")
        )
        return ready, first, burst, pivot, both, await client.get("/metrics"), app

    ready, first, burst, pivot, both, metrics, app = serve_models(
        dirs, body, loads=loads, max_loaded=1
    )
    assert ready.status_code == 200
    assert first.json()["translatedText"] == offline["en-de"].translate(TEXTS)
    assert all(r.json()["translatedText"] == offline["en-es"].translate(TEXTS) for r in burst)
    assert pivot.json()["translatedText"] == offline["en-de"].translate(
        offline["fr-en"].translate(TEXTS)
    )
    assert [r.json()["translatedText"] for r in both] == [
        offline["en-es"].translate(TEXTS), offline["fr-en"].translate(TEXTS)
    ]  # fmt: skip
    assert loads == ["en-de", "en-es", "fr-en", "en-de", "en-es", "fr-en"]
    m = samples(metrics.text)
    for name in PAIRS:
        label = (("model", name),)
        assert m[("seq2seq_model_loads_total", label)] == loads.count(name)
    assert sum(m[("seq2seq_model_unloads_total", (("model", n),))] for n in PAIRS) == len(loads) - 1
    assert sum(m[("seq2seq_model_loaded", (("model", n),))] for n in PAIRS) == 1
    assert list(app.state.pool.loaded()) == ["fr-en"]  # the last one loaded


def test_a_failed_load_is_a_503_and_the_next_request_tries_again(dirs, offline):
    calls = []

    def flaky(model):
        calls.append(model.name)
        if len(calls) == 1:
            raise UserError(f"{model.folders[0]}/model.safetensors cannot be read")
        return load_here(model.load_target, engine=model.engine, device="cpu", search={})

    executor = engine_thread()
    app = create_app(
        config=ServeConfig(max_loaded=1, repetition_guard=False),
        executor=executor,
        models=planned(dirs, "en-de"),
        load=flaky,
    )

    async def body(client):
        return await libre(client, TEXTS, "en", "de"), await libre(client, TEXTS, "en", "de")

    try:
        bad, good = run_app(app, body)
    finally:
        executor.shutdown()
    assert bad.status_code == 503
    assert bad.json()["error"].startswith("model en-de could not be loaded: ")
    assert good.json()["translatedText"] == offline["en-de"].translate(TEXTS)


# ---- probes ---------------------------------------------------------------------------------


def test_ready_is_503_until_the_models_load_and_while_a_check_fails(dirs, offline):
    gate = threading.Event()

    async def body(client, app):
        health = await client.get("/health")
        loading = await client.get("/ready")
        waiting = asyncio.ensure_future(libre(client, TEXTS, "en", "de"))  # waits for the load
        await asyncio.sleep(0.05)
        gate.set()
        answer = await waiting
        for _ in range(200):
            ready = await client.get("/ready")
            if ready.status_code == 200:
                break
            await asyncio.sleep(0.05)

        async def redis_down():
            return "redis://localhost:6379 does not answer"

        app.state.readiness.append(redis_down)
        failing = await client.get("/ready")
        return health, loading, answer, ready, failing

    health, loading, answer, ready, failing = serve_models(dirs, body, gate=gate)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert (
        loading.status_code == 503 and "models loading: fr-en" in loading.json()["waiting_for"][0]
    )
    assert answer.json()["translatedText"] == offline["en-de"].translate(TEXTS)
    assert ready.status_code == 200 and ready.json() == {"ready": True}
    assert failing.status_code == 503
    assert failing.json()["waiting_for"] == ["redis://localhost:6379 does not answer"]


# ---- bad input -------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_models_file_gives_per_model_options(dirs, offline, tmp_path):
    both = perturbed_copy(dirs["en-de"], tmp_path / "en-de-2", seed=5)
    models = write(
        tmp_path / "models.yaml",
        f"models:\n  - path: {dirs['en-de']}\n    name: first\n    directions: [en-de]\n"
        f"  - path: {both}\n    name: second\n    decoding: {{beam_size: 2}}\n    preload: true\n"
        f"    directions: [en-de]\n",
    )
    with pytest.raises(
        UserError, match="en->de is served by the bilingual models first and second"
    ):
        Router(
            [
                (p.name, p.directions, p.multilingual)
                for p in map(plan_model, read_models_file(models))
            ]
        )
    specs = read_models_file(models)
    assert specs[1].search == {"beam_size": 2} and specs[1].preload is True
    assert plan_model(specs[1]).search == {"beam_size": 2}
    ensemble = plan_model(ModelSpec(folders=(dirs["en-de"], both)))  # DIR1 DIR2: an ensemble
    assert ensemble.engine == "torch" and len(ensemble.folders) == 2
    assert ensemble.name == "en-de+en-de-2"


@pytest.mark.parametrize(
    "case",
    ["unknown folder", "not a model", "same direction", "malformed yaml", "unknown key",
     "bad direction", "bad option", "direction it lacks", "preload over budget"],
)  # fmt: skip
def test_bad_models_are_one_line_exit_2_before_the_port_opens(
    dirs, tmp_path, case, capsys, monkeypatch
):
    import seq2seq.serve.launcher as launcher

    def never(*_args):
        raise AssertionError("the port was opened")

    monkeypatch.setattr(launcher, "_listen", never)
    ende = str(dirs["en-de"])
    copy = perturbed_copy(dirs["en-de"], tmp_path / "copy", seed=5)
    files = iter(range(100))

    def yaml(text: str) -> str:
        return str(write(tmp_path / f"models{next(files)}.yaml", text))

    args, expected = {
        "unknown folder": (["--model", str(tmp_path / "nope")], f"model folder {tmp_path / 'nope'} does not exist"),
        "not a model": (["--model", str(tmp_path)], "is not a model directory or an export folder"),
        "same direction": (["--model", ende, "--model", str(copy)], "en->de is served by the bilingual models en-de and copy"),
        "malformed yaml": (["--models", yaml("models:\n  - path: [a\n")], "models0.yaml:3: expected ',' or ']'"),
        "unknown key": (["--models", yaml(f"models:\n  - path: {ende}\n    beam: 4\n")], "model 1: unknown key 'beam'"),
        "bad direction": (["--models", yaml(f"models:\n  - path: {ende}\n    directions: [ende]\n")], "a direction is written src-tgt"),
        "bad option": (["--models", yaml(f"models:\n  - path: {ende}\n    decoding: {{beam_size: 0}}\n")], "beam_size"),
        "direction it lacks": (["--models", yaml(f"models:\n  - path: {ende}\n    directions: [en-fr]\n")], "does not translate en-fr (it translates en-de)"),
        "preload over budget": (["--models", yaml(f"models:\n  - {{path: {ende}, preload: true}}\n  - {{path: {dirs['en-es']}, preload: true}}\n"), "--max-loaded", "1"], "2 models are marked preload, more than --max-loaded 1"),
    }[case]  # fmt: skip
    assert main(["serve", *args, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


# ---- a real server -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_server_routes_pivots_and_keeps_its_budget(dirs, offline):
    from test_serve_process import ServerProcess

    srv = ServerProcess(
        [],
        "--model",
        str(dirs["fr-en"]),
        "--model",
        str(dirs["en-de"]),
        "--max-loaded",
        "1",
        "--no-repetition-guard",
    )
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            assert client.get("/ready").status_code == 200
            pivot = client.post("/translate", json={"q": TEXTS, "source": "fr", "target": "de"})
            direct = client.post(
                "/v1/translate", json={"text": TEXTS, "source": "fr", "target": "en"}
            )
            metrics = samples(client.get("/metrics").text)
    finally:
        assert srv.stop() == 0
    leg1 = offline["fr-en"].translate(TEXTS)
    assert pivot.json()["translatedText"] == offline["en-de"].translate(leg1)
    assert [t["text"] for t in direct.json()["translations"]] == leg1
    assert metrics[("seq2seq_model_loads_total", (("model", "fr-en"),))] == 2
    assert metrics[("seq2seq_model_unloads_total", (("model", "en-de"),))] == 1
    assert any("model en-de (en->de, torch engine" in line for line in srv.lines)


def test_an_export_folder_is_a_model_with_its_own_engine(dirs, offline, tmp_path):
    pytest.importorskip("ctranslate2")
    from seq2seq.export import export_model

    folder = export_model(dirs["en-es"], tmp_path / "ct2", fmt="ctranslate2", quantization="none")
    models = [
        plan_model(ModelSpec(folders=(dirs["en-de"],))),
        plan_model(ModelSpec(folders=(folder,))),
    ]
    assert [m.engine for m in models] == ["torch", "ctranslate2"]
    executor = engine_thread()
    app = create_app(
        executor=executor,
        config=ServeConfig(repetition_guard=False),  # untrained models loop
        models=models,
        load=lambda m: load_here(m.load_target, engine=m.engine, device="cpu", search={}),
    )

    async def body(client):
        listed = await client.get("/v1/models")
        return (
            listed,
            await libre(client, TEXTS, "en", "es"),
            await libre(client, TEXTS, "en", "de"),
        )

    try:
        listed, es, de = run_app(app, body)
    finally:
        executor.shutdown()
    assert [(m["id"], m["engine"]) for m in listed.json()["models"]] == [
        ("en-de", "torch"), ("ct2", "ctranslate2")
    ]  # fmt: skip
    reference = Translator.load(folder, engine="ctranslate2")
    assert es.json()["translatedText"] == reference.translate(TEXTS)
    assert de.json()["translatedText"] == offline["en-de"].translate(TEXTS)
