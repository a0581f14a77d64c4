"""Search and batching options, and request fields, are checked in one place and never
coerced silently (issue 34, root causes 3 and 4).

- Every field of the native ``/v1/translate`` and LibreTranslate ``/translate`` bodies refuses a
  value of the wrong shape or type with a 400 that says what was expected (a list of phrases
  for two texts is not read one character per phrase; ``"beam_size": true`` is not a beam of 1).
- The same bad search or batching value gets the same message from the command line (exit 2,
  one line), the Python API (a UserError) and the server (a JSON 400): they all go through
  :meth:`seq2seq.config.DecodingConfig.check_value`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from factories import make_model_dir
from test_serve import SENTENCES, serve_and

from seq2seq.cli import main
from seq2seq.config.schema import DecodingConfig
from seq2seq.core.errors import UserError
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.scoring import Scorer
from seq2seq.decode.translator import Translator

TWO = [SENTENCES[0], SENTENCES[1]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("options") / "model", train_steps=150)


def _post_all(model_dir, requests: list[tuple[str, object]]) -> list:
    """Each (path, body) posted to one app; ``body`` bytes are sent as they are (JSON)."""

    async def body(client, _):
        out = []
        for path, data in requests:
            if isinstance(data, bytes):
                r = await client.post(
                    path, content=data, headers={"content-type": "application/json"}
                )
            elif isinstance(data, dict) and data.pop("_form", False):
                r = await client.post(path, data=data)
            else:
                r = await client.post(path, json=data)
            out.append(r)
        return out

    return serve_and(model_dir, body)


# ---- root cause 3: every field of both APIs -----------------------------------------------------

NATIVE_BAD = [
    # (extra fields, what the 400's message must hold)
    ({"text": 5}, "field 'text': must be a string or a list of strings, got a number"),
    ({"text": [1, 2]}, "field 'text': must be a string or a list of strings"),
    ({"text": [["nested"]]}, "got a list of 1 list"),
    ({"text": None}, "field 'text': must be a string or a list of strings, got null"),
    ({"source": 5}, "field 'source'"),
    ({"target": ["de"]}, "field 'target'"),
    ({"split_sentences": 1}, "field 'split_sentences'"),
    ({"scores": "yes"}, "field 'scores'"),
    ({"alignments": 0}, "field 'alignments'"),
    ({"ordered": "true"}, "field 'ordered'"),
    ({"method": "beam_search"}, "field 'method'"),
    ({"method": 1}, "field 'method'"),
    ({"beam_size": True}, "field 'beam_size': Input should be a valid integer"),
    ({"beam_size": 4.7}, "field 'beam_size': Input should be a valid integer"),
    ({"beam_size": "4"}, "field 'beam_size': Input should be a valid integer"),
    ({"beam_size": [4]}, "field 'beam_size'"),
    ({"beam_size": 0}, "beam_size must be >= 1, got 0"),
    ({"beam_size": 2**31}, "beam_size must be <= 256, got 2147483648"),
    ({"beam_size": 10**9}, "beam_size must be <= 256, got 1000000000"),
    ({"nbest": False}, "field 'nbest'"),
    ({"nbest": 0}, "nbest must be >= 1, got 0"),
    ({"nbest": 10**9}, "nbest must be <= 256, got 1000000000"),
    ({"len_penalty": True}, "field 'len_penalty': Input should be a valid number"),
    ({"len_penalty": "1.0"}, "field 'len_penalty': Input should be a valid number"),
    ({"min_len": -1}, "min_len must be >= 0, got -1"),
    ({"min_len": 1.5}, "field 'min_len'"),
    ({"min_len": 10**30}, "min_len must be <= 2147483647"),
    ({"max_len_a": -1}, "max_len_a must be >= 0, got -1"),
    ({"max_len_a": 1e300}, "max_len_a must be <= 2147483647, got 1e+300"),
    ({"max_len_b": "10"}, "field 'max_len_b'"),
    ({"max_len_b": -1}, "max_len_b must be >= 0, got -1"),
    ({"no_repeat_ngram": False}, "field 'no_repeat_ngram'"),
    ({"no_repeat_ngram": 10**30}, "no_repeat_ngram must be <= 2147483647"),
    ({"unk_penalty": "0"}, "field 'unk_penalty'"),
    ({"temperature": 0}, "temperature must be > 0, got 0"),
    ({"temperature": True}, "field 'temperature'"),
    ({"top_k": 1.0}, "field 'top_k'"),
    ({"top_k": -1}, "top_k must be >= 0, got -1"),
    ({"top_p": 0}, "top_p must be in (0, 1], got 0"),
    ({"top_p": 1.5}, "top_p must be in (0, 1], got 1.5"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"seed": 2**64}, "seed must be <= 18446744073709551615, got 18446744073709551616"),
    ({"seed": "1"}, "field 'seed'"),
    ({"seed": True}, "field 'seed'"),
    # per-text fields for one text
    ({"prefix": ["two dogs"]}, "field 'prefix': for one text, expected a string or null"),
    ({"prefix": 5}, "field 'prefix': for one text, expected a string or null, got a number"),
    ({"constraints": "dog"}, "field 'constraints': for one text, expected a list of strings"),
    ({"constraints": [["dog"]]}, "got a list of 1 list"),
    ({"constraints": [1]}, "expected a list of strings or null, got a list of 1 number"),
    ({"avoid": "dog"}, "field 'avoid': for one text, expected a list of strings or null"),
    ({"avoid": {"dog": 1}}, "got an object"),
    # per-text fields for a list of two texts
    ({"text": TWO, "constraints": ["zeta", "kappa"]}, "one entry per text (2), each a list"),
    ({"text": TWO, "avoid": ["zeta", "kappa"]}, "one entry per text (2), each a list"),
    ({"text": TWO, "constraints": [["dog"]]}, "got a list of 1 list"),
    ({"text": TWO, "constraints": [["dog"], "car"]}, "got a list of 2 mixed items"),
    ({"text": TWO, "constraints": [["dog"], [5]]}, "one entry per text (2)"),
    ({"text": TWO, "avoid": [None, None, None]}, "got a list of 3 nulls"),
    ({"text": TWO, "prefix": "two dogs"}, "field 'prefix': for a list of 2 texts"),
    ({"text": TWO, "prefix": ["two dogs"]}, "one entry per text (2), each a string or null"),
    ({"text": TWO, "prefix": [["two"], None]}, "got a list of 2 mixed items"),
    ({"beam": 4}, "unknown field 'beam'"),
]


def test_every_native_field_refuses_a_wrong_shape_or_type(model_dir):
    bodies = [{"text": SENTENCES[0], **extra} for extra, _ in NATIVE_BAD]
    responses = _post_all(model_dir, [("/v1/translate", b) for b in bodies])
    for (extra, expected), r in zip(NATIVE_BAD, responses):
        assert r.status_code == 400, (extra, r.text)
        message = r.json()["error"]
        assert expected in message, (extra, message)
        assert "\n" not in message


def test_json_has_no_nan_or_infinity(model_dir):
    raw = [
        b'{"text": "a dog", "len_penalty": NaN}',
        b'{"text": "a dog", "max_len_a": Infinity}',
        b'{"text": "a dog", "unk_penalty": -Infinity}',
        b'{"text": "a dog", "unk_penalty": -1e400}',  # a number JSON allows, that is -inf here
        b'{"text": "a dog", "len_penalty": 1e400}',
    ]
    r = _post_all(model_dir, [("/v1/translate", b) for b in raw])
    assert [x.status_code for x in r] == [400] * 5
    assert "malformed JSON: NaN is not a JSON value" in r[0].json()["error"]
    assert "malformed JSON: Infinity is not a JSON value" in r[1].json()["error"]
    assert "malformed JSON: -Infinity" in r[2].json()["error"]
    assert (
        r[3].json()["error"]
        == "invalid search options: unk_penalty must be a number or inf, got -inf"
    )
    assert (
        r[4].json()["error"]
        == "invalid search options: len_penalty must be a finite number, got inf"
    )


def test_per_text_fields_of_the_right_shape_are_translated(model_dir):
    """The shapes the errors ask for work: a list of lists (null / [] for a text without)."""
    texts = [SENTENCES[0], SENTENCES[1]]
    good = {
        "text": texts,
        "prefix": ["two dogs", None],
        "constraints": [None, ["green car"]],
        "avoid": [[], None],
    }
    (r,) = _post_all(model_dir, [("/v1/translate", good)])
    assert r.status_code == 200, r.text
    reference = Translator.load(model_dir)
    want = reference.translate(
        texts, prefix=["two dogs", ""], constraints=[[], ["green car"]], avoid=[[], []]
    )
    assert [t["text"] for t in r.json()["translations"]] == want
    assert want[0].startswith("two dogs") and "green car" in want[1]


LIBRE_BAD = [
    ({"q": 5}, "field 'q': must be a string or a list of strings, got a number"),
    ({"q": [["a dog"]]}, "field 'q': must be a string or a list of strings, got a list of 1 list"),
    ({"q": None}, "field 'q'"),
    ({"source": 5}, "field 'source': Input should be a valid string"),
    ({"target": None}, "field 'target'"),
    ({"format": ["text"]}, "field 'format'"),
    ({"format": "markdown"}, "field 'format'"),
    ({"alternatives": True}, "field 'alternatives': Input should be a valid integer"),
    ({"alternatives": 2.5}, "field 'alternatives': Input should be a valid integer"),
    ({"alternatives": "2"}, "field 'alternatives': Input should be a valid integer"),
    ({"alternatives": -1}, "field 'alternatives'"),
    ({"api_key": 5}, "field 'api_key'"),
    ({"_form": True, "alternatives": "two"}, "field 'alternatives': Input should be a valid"),
    ({"_form": True, "alternatives": "2.0"}, "field 'alternatives': Input should be a valid"),
]


def test_every_libretranslate_field_refuses_a_wrong_shape_or_type(model_dir):
    base = {"q": SENTENCES[0], "source": "en", "target": "de"}
    responses = _post_all(model_dir, [("/translate", {**base, **extra}) for extra, _ in LIBRE_BAD])
    for (extra, expected), r in zip(LIBRE_BAD, responses):
        assert r.status_code == 400, (extra, r.text)
        assert expected in r.json()["error"], (extra, r.json())
    # A form's alternatives is its digits; JSON's an integer: both work.
    form, as_json = _post_all(
        model_dir,
        [
            ("/translate", {**base, "_form": True, "alternatives": "2"}),
            ("/translate", {**base, "alternatives": 2}),
        ],
    )
    assert form.status_code == 200 and as_json.status_code == 200
    assert form.json() == as_json.json() and len(form.json()["alternatives"]) <= 2


# ---- root cause 4: one check, the same message everywhere ---------------------------------------


def test_the_python_api_checks_types_and_ranges():
    for kwargs, message in [
        (dict(beam_size=True), "beam_size must be an integer, got True"),
        (dict(beam_size=4.7), "beam_size must be an integer, got 4.7"),
        (dict(len_penalty="1"), "len_penalty must be a number, got '1'"),
        (dict(len_penalty=math.nan), "len_penalty must be a finite number, got nan"),
        (dict(max_len_a=math.inf), "max_len_a must be a finite number, got inf"),
        (dict(temperature=math.inf), "temperature must be a finite number, got inf"),
        (dict(unk_penalty=-math.inf), "unk_penalty must be a number or inf, got -inf"),
        (dict(seed=2**64), "seed must be <= 18446744073709551615"),
        (dict(seed=-1), "seed must be >= 0, got -1"),
        (dict(max_tokens=0), "max_tokens must be >= 1, got 0"),
    ]:
        with pytest.raises(UserError) as e:
            SearchOptions(**kwargs)
        assert str(e.value) == message or str(e.value).startswith(message), (kwargs, e.value)
    SearchOptions(unk_penalty=math.inf, seed=2**64 - 1, len_penalty=0)  # the edges are fine
    with pytest.raises(UserError, match=r"decoding\.seed must be >= 0, got -1"):
        DecodingConfig(seed=-1).validate()


SAME_EVERYWHERE = [
    # (CLI flags, Python keyword arguments, the message)
    (["--sample", "--seed", str(2**64)], dict(method="sample", seed=2**64),
     f"seed must be <= {2**64 - 1}, got {2**64}"),
    (["--beam", "4", "--len-penalty", "nan"], dict(beam_size=4, len_penalty=math.nan),
     "len_penalty must be a finite number, got nan"),
    (["--max-len-a", "inf"], dict(max_len_a=math.inf),
     "max_len_a must be a finite number, got inf"),
    (["--top-k", str(2**31)], dict(top_k=2**31), f"top_k must be <= {2**31 - 1}, got {2**31}"),
    # a beam the search would allocate rows for: refused before it does, for every model
    (["--beam", str(10**9)], dict(beam_size=10**9), "beam_size must be <= 256, got 1000000000"),
]  # fmt: skip


@pytest.mark.parametrize("flags, kwargs, message", SAME_EVERYWHERE)
def test_a_bad_search_value_reads_the_same_in_the_cli_python_and_server(
    model_dir, tmp_path, capsys, flags, kwargs, message
):
    src = tmp_path / "in.txt"
    src.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    translate = ["translate", str(model_dir), "-i", str(src)]
    evaluate = ["evaluate", str(model_dir), "--src", str(src), "--ref", str(src)]
    for command in (translate, evaluate):
        assert main([*command, *flags]) == 2
        err = capsys.readouterr().err
        assert err == f"seq2seq {command[0]}: error: {message}\n"
    with pytest.raises(UserError) as e:
        Translator.load(model_dir, **kwargs)
    assert str(e.value) == message
    translator = Translator.load(model_dir)
    with pytest.raises(UserError) as e:
        translator.translate([SENTENCES[0]], **kwargs)
    assert str(e.value) == message
    if not math.isfinite(kwargs.get("len_penalty", 0)) or not math.isfinite(
        kwargs.get("max_len_a", 0)
    ):
        return  # JSON cannot carry them (test_json_has_no_nan_or_infinity)
    (r,) = _post_all(model_dir, [("/v1/translate", {"text": SENTENCES[0], **kwargs})])
    assert r.status_code == 400 and r.json() == {"error": f"invalid search options: {message}"}


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--len-penalty", "nan"], "len_penalty must be a finite number, got nan"),
        (["--len-penalty", "inf"], "len_penalty must be a finite number, got inf"),
        (["--max-tokens", "0"], "max_tokens must be >= 1, got 0"),
    ],
)
def test_score_checks_its_options_as_translate_does(model_dir, tmp_path, capsys, flags, message):
    src = tmp_path / "in.txt"
    src.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    out = tmp_path / "scores.txt"
    code = main(
        ["score", str(model_dir), "--src", str(src), "--tgt", str(src), "-o", str(out), *flags]
    )
    assert code == 2
    assert capsys.readouterr().err == f"seq2seq score: error: {message}\n"
    assert not out.exists()
    # translate says the same of the same value
    assert main(["translate", str(model_dir), "-i", str(src), *flags]) == 2
    assert capsys.readouterr().err == f"seq2seq translate: error: {message}\n"
    # and so does the Python API
    with pytest.raises(UserError) as e:
        if flags[0] == "--max-tokens":
            Scorer.load(model_dir, max_tokens=0)
        else:
            Scorer.load(model_dir).score(
                [SENTENCES[0]], [SENTENCES[0]], len_penalty=float(flags[1])
            )
    assert str(e.value) == message


def test_score_takes_max_tokens_it_is_given(model_dir):
    """The ``max_tokens`` given is the one used (0 was once silently replaced by the model's)."""
    assert Scorer.load(model_dir, max_tokens=1).max_tokens == 1


@pytest.mark.slow
def test_serve_refuses_a_bad_option_before_loading(model_dir):
    """The real command, in a process: one line, exit 2, no traceback."""
    for flags, message in [
        (["--sample", "--seed", str(2**64)], f"seed must be <= {2**64 - 1}, got {2**64}"),
        (["--max-tokens", "0"], "max_tokens must be >= 1, got 0"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "seq2seq.cli", "serve", str(model_dir), "--port", "0", *flags],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "SEQ2SEQ_DEBUG": "0"},
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"seq2seq serve: error: {message}\n"


def test_the_ctranslate2_engine_refuses_seeds_it_cannot_take(model_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    export = tmp_path / "ct2"
    assert main(["export", str(model_dir), "--format", "ctranslate2", "--out", str(export)]) == 0
    translator = Translator.load(export, engine="ctranslate2")
    with pytest.raises(UserError, match=r"the ctranslate2 engine takes seeds below 2\*\*32"):
        translator.translate([SENTENCES[0]], method="sample", seed=2**32)
    assert translator.translate([SENTENCES[0]], method="sample", seed=2**32 - 1)
