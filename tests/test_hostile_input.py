"""Hostile text: control characters, zero-width and bidi marks, Unicode line separators, NUL,
100,000-character lines, CRLF, no final newline, invalid UTF-8, lone surrogates.

Whatever the text, `seq2seq translate`, `seq2seq evaluate` and data reading either handle it or
reject it with a line number, and input and output line counts stay aligned. Also: an
interrupted `seq2seq translate -o FILE` never leaves a complete-looking FILE, and the config
loader, the tokenizer and the Translator survive arbitrary text (hypothesis).
"""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from factories import make_model_dir, synthetic_pairs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq.cli import main
from seq2seq.config.errors import ConfigError
from seq2seq.config.loading import load_config
from seq2seq.config.schema import ExperimentConfig
from seq2seq.core.errors import UserError
from seq2seq.data.parallel import iter_parallel, read_parallel
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from seq2seq.decode.lines import LineReader, open_lines
from seq2seq.decode.options import SearchOptions
from seq2seq.decode.search_base import Hypothesis
from seq2seq.decode.stream import translate_stream
from seq2seq.decode.translator import Translator

REPO = Path(__file__).resolve().parents[1]

LONG_LINE = ("big red dog runs in the park " * 3500)[:100_000]
HOSTILE_LINES = [
    "A man walks",
    "NUL\x00inside and at the end\x00",
    "tab\tvertical\x0btab form\x0cfeed",
    "fs\x1cgs\x1drs\x1eus\x1f end",
    "next\x85line inside",
    "line\u2028separator and paragraph\u2029separator",
    "zero\u200bwidth\u200c joiners\u200d and a\ufeffbom",
    "bidi \u202eevil\u202c \u2066isolate\u2069 \u200fmark",
    "del\x7f and C1 \x80\x9f controls",
    "carriage\rreturn inside",
    "",
    "   ",
    LONG_LINE,
    "x" * 100_000,
    "astral 🙂 𝔘 and combining e\u0301\u0301\u0301",
    "two dogs play",
]
"""One sentence each; none contains \\n. Written with \\r\\n line ends and no final newline."""

HOSTILE_CHARS = "\x00\x0b\x0c\x1c\x1d\x1e\x1f\x7f\x85\u2028\u2029\u200b\u200d\u202e\u2066\ufeff\r\t"


def hostile_bytes(lines: list[str] = HOSTILE_LINES) -> bytes:
    return "\r\n".join(lines).encode("utf-8")  # Windows line ends, no trailing newline


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """An untrained tiny model decoding greedily, at most 8 tokens: fast and deterministic."""
    return make_model_dir(
        tmp_path_factory.mktemp("hostile") / "model",
        cfg_overrides=("decoding.method=greedy", "decoding.max_len_a=0", "decoding.max_len_b=8"),
    )


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator.load(model_dir)


class EchoEngine:
    """Returns each source as its own translation: exact, instant line-alignment checks."""

    def translate_ids(self, src: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        return [
            [Hypothesis(tokens=list(s), score=0.0, token_scores=[0.0] * len(s))] * opts.nbest
            for s in src
        ]


def echo_translator(tokenizer: Tokenizer) -> Translator:
    return Translator(
        EchoEngine(), tokenizer, max_src_positions=64, opts=SearchOptions(method="greedy")
    )


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "seq2seq.cli", *args]


def _env() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.pop("SEQ2SEQ_DEBUG", None)
    return env


# ---- reading lines ---------------------------------------------------------------------------


def test_line_reader_splits_on_newline_only() -> None:
    reader = LineReader(io.BytesIO(hostile_bytes()), name="in.txt")
    assert list(reader) == HOSTILE_LINES
    assert reader.line_no == len(HOSTILE_LINES)


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_data_reading_keeps_lines_aligned(tmp_path: Path, compress: bool) -> None:
    src_path, tgt_path = tmp_path / "c.src", tmp_path / "c.tgt"
    tgt_lines = [f"target {i}" if line.strip() else "" for i, line in enumerate(HOSTILE_LINES)]
    for path, lines in ((src_path, HOSTILE_LINES), (tgt_path, tgt_lines)):
        data = hostile_bytes(lines)
        path.write_bytes(gzip.compress(data) if compress else data)
    text = read_parallel(src_path, tgt_path)
    kept = [i for i, line in enumerate(HOSTILE_LINES) if line.strip()]
    assert text.lines == kept  # no line split on \x0b, \x1c, \x85, \u2028, \r ...
    assert text.src == [HOSTILE_LINES[i].strip() for i in kept]
    assert text.tgt == [f"target {i}" for i in kept]
    assert text.stats.lines == len(HOSTILE_LINES) and text.stats.empty == 2


def test_data_reading_names_the_line_of_invalid_utf8(tmp_path: Path) -> None:
    src_path, tgt_path = tmp_path / "c.src", tmp_path / "c.tgt"
    src_path.write_bytes(b"fine\nalso fine\nsurrogate \xed\xa0\x80 here\n")
    tgt_path.write_bytes(b"a\nb\nc\n")
    with pytest.raises(UserError, match=rf"{src_path}:3: invalid UTF-8"):
        list(iter_parallel(src_path, tgt_path))
    # a \u2028 on one side does not make the counts differ
    src_path.write_bytes("one\u2028still one\ntwo\n".encode())
    tgt_path.write_bytes(b"a\nb")
    assert [line for line, _, _ in iter_parallel(src_path, tgt_path)] == [0, 1]


def test_prepare_copies_hostile_corpus_files_line_for_line(tmp_path: Path) -> None:
    """`seq2seq prepare`: lines are counted and parts joined on \\n only, bytes kept as they are."""
    import hashlib

    from seq2seq.data.corpus import Corpus, Part, RemoteFile
    from seq2seq.data.prepare import prepare_corpus

    n = len(HOSTILE_LINES)
    blobs = {
        "a.en": hostile_bytes(),  # CRLF, no final newline: must not glue onto the next part
        "a.de": hostile_bytes([f"ziel {i}" for i in range(n)]),
        "b.en.gz": gzip.compress(hostile_bytes() + b"\n"),
        "b.de.gz": gzip.compress(hostile_bytes([f"zwei {i}" for i in range(n)]) + b"\n"),
    }
    files = {}
    for name, data in blobs.items():
        (tmp_path / "mirror" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mirror" / name).write_bytes(data)
        files[name] = RemoteFile(name, hashlib.sha256(data).hexdigest())
    layout = {
        ("raw", "train", lang): (Part(files[f"a.{lang}"]), Part(files[f"b.{lang}.gz"]))
        for lang in ("en", "de")
    }
    corpus = Corpus(
        name="hostile",
        description="hostile lines",
        base_url="http://127.0.0.1:9/",
        languages=("en", "de"),
        variants=("raw",),
        splits=("train",),
        layout=layout,
    )
    out = tmp_path / "out"
    got = prepare_corpus(
        corpus, "en-de", out, mirror=tmp_path / "mirror", cache_dir=tmp_path / "cache", log=None
    )
    src, tgt = got["train"]
    assert src.read_bytes() == blobs["a.en"] + b"\n" + hostile_bytes() + b"\n"
    text = read_parallel(src, tgt)
    assert text.stats.lines == 2 * n
    assert text.src == [line.strip() for line in HOSTILE_LINES * 2 if line.strip()]


# ---- seq2seq translate / evaluate ------------------------------------------------------------


def test_cli_translate_hostile_file_keeps_line_counts(model_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "hostile.txt"
    src.write_bytes(hostile_bytes())
    out = tmp_path / "out.txt"
    r = subprocess.run(
        _cli("translate", str(model_dir), "-i", str(src), "-o", str(out), "--greedy"),
        capture_output=True,
        env=_env(),
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode()
    data = out.read_bytes()
    assert data.count(b"\n") == len(HOSTILE_LINES) and data.endswith(b"\n")
    assert b"\r" not in data
    for i, line in enumerate(data.decode("utf-8").split("\n")[:-1]):
        if not HOSTILE_LINES[i].strip():
            assert line == "", i  # an empty input line gives an empty output line
    warnings = [w for w in r.stderr.decode().splitlines() if "truncated" in w]
    long_no = HOSTILE_LINES.index(LONG_LINE) + 1
    assert any(f"{src}:{long_no}:" in w for w in warnings), warnings


def test_cli_translate_invalid_utf8_is_exit_2_naming_the_line(
    model_dir: Path, tmp_path: Path
) -> None:
    src = tmp_path / "bad.txt"
    src.write_bytes(hostile_bytes()[:40] + b"\r\nok\nencoded surrogate \xed\xa0\x80\nafter\n")
    bad_line = hostile_bytes()[:40].count(b"\n") + 3
    out = tmp_path / "out.txt"
    r = subprocess.run(
        _cli("translate", str(model_dir), "-i", str(src), "-o", str(out), "--greedy"),
        capture_output=True,
        env=_env(),
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 2
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("seq2seq translate: error: ")
    assert f"{src}:{bad_line}: invalid UTF-8" in err[0]
    assert not out.exists()


def test_translate_to_stdout_keeps_line_counts(model_dir: Path, tmp_path: Path, capfd) -> None:
    src = tmp_path / "hostile.txt"
    src.write_bytes(hostile_bytes())
    assert main(["translate", str(model_dir), "-i", str(src), "--buffer-lines", "3"]) == 0
    out = capfd.readouterr().out
    assert out.count("\n") == len(HOSTILE_LINES) and "\r" not in out


def test_evaluate_hostile_files(model_dir: Path, tmp_path: Path, capfd) -> None:
    src, ref = tmp_path / "test.src", tmp_path / "test.ref"
    src.write_bytes(hostile_bytes())
    ref.write_bytes(hostile_bytes(list(reversed(HOSTILE_LINES))) + b"\n")
    out_dir = tmp_path / "eval"
    args = ["evaluate", str(model_dir), "--src", str(src), "--ref", str(ref)]
    assert main([*args, "--out-dir", str(out_dir), "--greedy"]) == 0
    hyp = (out_dir / "test.src.hyp").read_bytes()
    assert hyp.count(b"\n") == len(HOSTILE_LINES)
    capfd.readouterr()
    # invalid UTF-8 in the reference: exit 2, one line, naming file and line; nothing written
    ref.write_bytes(b"one\r\ntwo\r\nthr\xffee\r\n" + b"x\n" * (len(HOSTILE_LINES) - 3))
    assert main([*args, "--out-dir", str(tmp_path / "eval2")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{ref}:3: invalid UTF-8" in err[0], err
    assert not (tmp_path / "eval2").exists()


# ---- long jobs lose nothing ------------------------------------------------------------------


def test_an_error_midway_leaves_only_a_resumable_partial(translator: Translator, tmp_path) -> None:
    echo = echo_translator(translator.tokenizer)
    lines = [s for s, _ in synthetic_pairs(40)]
    raw = [line.encode() for line in lines]
    raw[24] = b"bad \xc3\x28 byte"
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(raw))
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    warnings: list[str] = []
    with pytest.raises(UserError, match=rf"{src}:25: invalid UTF-8"):
        translate_stream(
            echo,
            open_lines(src),  # a file: chunks of buffer_lines
            stdout=io.BytesIO(),
            output=out,
            buffer_lines=10,
            warn=warnings.append,
        )
    assert not out.exists()
    assert partial.read_bytes().count(b"\n") == 20  # the two finished chunks, nothing else
    # fixed input: --resume keeps the 20 lines and translates the rest
    src.write_text("\n".join(lines), encoding="utf-8")
    n = translate_stream(
        echo,
        open_lines(src),
        stdout=io.BytesIO(),
        output=out,
        resume=True,
        buffer_lines=10,
        warn=warnings.append,
    )
    assert n == 40 and not partial.exists()
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == echo.translate(lines)
    assert any("20 lines already translated" in w for w in warnings)


def test_resume_counts_lines_by_newline_only(translator: Translator, tmp_path: Path) -> None:
    """A partial line with \\r, \\x0b or \\u2028 in it is still one line (bytes.splitlines is not)."""
    echo = echo_translator(translator.tokenizer)
    lines = ["a man", "the dog", "two cats", "a car"]
    out = tmp_path / "out.txt"
    partial = tmp_path / "out.txt.partial"
    partial.write_bytes("first\rstill first\x0b\u2028\nsecond\nhalf of the thi".encode())
    translate_stream(
        echo,
        LineReader(io.BytesIO("\n".join(lines).encode()), name="in"),
        stdout=io.BytesIO(),
        output=out,
        resume=True,
        warn=lambda m: None,
    )
    got = out.read_bytes().decode().split("\n")
    assert got[:2] == ["first\rstill first\x0b\u2028", "second"]
    assert got[2:] == [*echo.translate(lines[2:]), ""]


def test_resume_of_a_non_nbest_partial_with_nbest_is_a_user_error(
    translator: Translator, tmp_path: Path
) -> None:
    echo = echo_translator(translator.tokenizer)
    echo.opts = SearchOptions(method="beam", beam_size=2, nbest=2)
    (tmp_path / "out.txt.partial").write_bytes(b"plain line\n")
    with pytest.raises(UserError, match="does not hold n-best lines"):
        translate_stream(
            echo,
            LineReader(io.BytesIO(b"a\nb\n"), name="in"),
            stdout=io.BytesIO(),
            output=tmp_path / "out.txt",
            resume=True,
            warn=lambda m: None,
        )


def test_sigkill_midway_leaves_no_complete_looking_output(model_dir: Path, tmp_path: Path) -> None:
    lines = [s for s, _ in synthetic_pairs(1500, seed=3)]
    src = tmp_path / "big.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "big.out"
    partial = tmp_path / "big.out.partial"
    args = ["translate", str(model_dir), "-i", str(src), "-o", str(out), "--greedy"]
    args += ["--max-len-b", "8", "--buffer-lines", "20"]  # --resume refuses other options
    proc = subprocess.Popen(
        _cli(*args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 180
        while not (partial.exists() and partial.read_bytes().count(b"\n") >= 5):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no output within 180 s"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()  # never a file that looks finished
    done = partial.read_bytes()
    kept = done[: done.rfind(b"\n") + 1].decode("utf-8").split("\n")[:-1]
    assert 5 <= len(kept) < len(lines)
    # --resume finishes the job: every input line, the kept ones untouched
    assert main([*args, "--resume"]) == 0
    assert not (tmp_path / "big.out.partial.json").exists()
    assert not partial.exists()
    final = out.read_text(encoding="utf-8").split("\n")
    assert final[-1] == "" and len(final) - 1 == len(lines)
    assert final[: len(kept)] == kept


# ---- lone surrogates and SentencePiece's own newlines ----------------------------------------


def test_lone_surrogates_are_a_user_error_naming_the_sentence(translator: Translator) -> None:
    with pytest.raises(UserError, match=r"sentence 2: unpaired surrogate U\+D800 at character 5"):
        translator.translate(["fine", "bad \ud800 text", "fine"])
    with pytest.raises(UserError, match=r"unpaired surrogate U\+DCFF"):
        translator.tokenizer.encode_tgt(["\udcff"])
    with pytest.raises(UserError, match="unpaired surrogate"):
        translator.tokenizer.src_pieces("x\udfff")
    with pytest.raises(TypeError):  # not text at all: a programming error, not a UserError
        translator.tokenizer.encode_src([None])


def test_translations_never_contain_a_newline_even_with_byte_pieces(tmp_path: Path) -> None:
    """A byte-fallback SentencePiece model decodes <0x0A> to "\\n": the Translator keeps one line."""
    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([s for s, _ in synthetic_pairs(200)]),
        model_writer=proto,
        vocab_size=400,
        byte_fallback=True,
        hard_vocab_limit=False,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        minloglevel=2,
    )
    (tmp_path / "spm.model").write_bytes(proto.getvalue())
    tok = Tokenizer.load(tmp_path)
    nl, cr = (tok._tgt.piece_to_id(p) for p in ("<0x0A>", "<0x0D>"))
    assert tok.decode_tgt([[nl], [cr]]) == ["\n", "\r"]  # the hazard is real

    class NewlineEngine:
        def translate_ids(self, src, opts):
            return [[Hypothesis(tokens=[nl, 5, cr, 6, EOS_ID], score=0.0, token_scores=[0.0] * 5)]]

    t = Translator(NewlineEngine(), tok, max_src_positions=64, opts=SearchOptions(method="greedy"))
    (text,) = t.translate(["a man"])
    assert "\n" not in text and "\r" not in text and text.strip()


# ---- properties over arbitrary text ----------------------------------------------------------

# Lone surrogates are not text (str can hold them, UTF-8 cannot): they get their own test below,
# which expects the documented clear error; here every other code point, hostile ones included.
hostile_text = st.text(
    alphabet=st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(HOSTILE_CHARS)),
    max_size=300,
)
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(texts=st.lists(hostile_text, max_size=6))
def test_tokenizer_encode_decode_never_crash(translator: Translator, texts: list[str]) -> None:
    tok = translator.tokenizer
    for ids in tok.encode_src(texts) + tok.encode_tgt(texts):
        assert all(isinstance(i, int) and 0 <= i < tok.src_vocab_size for i in ids)
        assert not {PAD_ID, BOS_ID, EOS_ID} & set(ids)  # pieces only (UNK allowed)
    decoded = tok.decode_src(tok.encode_src(texts))
    assert len(decoded) == len(texts) and all("\n" not in d for d in decoded)


@SETTINGS
@given(ids=st.lists(st.lists(st.integers(0, 99), max_size=40), max_size=4))
def test_tokenizer_decodes_any_in_range_ids(translator: Translator, ids: list[list[int]]) -> None:
    out = translator.tokenizer.decode_tgt(ids)
    assert len(out) == len(ids) and all(isinstance(s, str) and "\n" not in s for s in out)


@SETTINGS
@given(
    texts=st.lists(hostile_text, max_size=5),
    surrogate=st.one_of(st.none(), st.integers(0xD800, 0xDFFF).map(chr)),
    where=st.integers(0, 10),
)
def test_translator_output_is_aligned_or_a_clear_error(
    translator: Translator, texts: list[str], surrogate: str | None, where: int
) -> None:
    if surrogate is not None and texts:
        i, k = where % len(texts), where * 7
        texts = list(texts)
        texts[i] = texts[i][:k] + surrogate + texts[i][k:]
    try:
        out = translator.translate(texts, on_truncated=lambda i, n: None)
    except UserError as e:
        assert surrogate is not None and "unpaired surrogate" in str(e)
        return
    assert surrogate is None or not texts
    assert len(out) == len(texts)
    assert all(isinstance(o, str) and "\n" not in o and "\r" not in o for o in out)
    assert all(o == "" for o, t in zip(out, texts) if not translator.tokenizer.encode_src([t])[0])


def _config_outcome(call) -> ExperimentConfig | None:
    """The loaded config, or None for a ConfigError; anything else propagates (a bug)."""
    try:
        cfg = call()
    except ConfigError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), str(e)  # one line
        return None
    assert isinstance(cfg, ExperimentConfig)
    return cfg


VALID_KEYS = ["data", "model", "training", "decoding", "export", "d_model", "dropout", "corpus"]
TRICKY_VALUES = [
    "2001-13-01",
    "2001-02-30",
    "!!float x",
    "!!int x",
    "!!binary ~~",
    "!!python/object/apply:os.system ['true']",
    "!!set {a: 1}",
    "&a [*a]",
    "*undefined",
    ".inf",
    "-.nan",
    "1e999",
    "'unterminated",
    "~",
    "[1, 2",
    "a: b: c",
]


@SETTINGS
@given(text=st.text(max_size=400))
def test_config_file_of_arbitrary_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))  # surrogates: bad UTF-8
    _config_outcome(lambda: load_config(path))


@SETTINGS
@given(data=st.binary(max_size=300))
def test_config_file_of_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    _config_outcome(lambda: load_config(path))


yaml_line = st.tuples(
    st.integers(0, 4).map(lambda n: " " * n),
    st.one_of(st.sampled_from(VALID_KEYS), st.text(max_size=10)),
    st.one_of(st.sampled_from(TRICKY_VALUES), st.text(max_size=20), st.just("")),
).map(lambda t: f"{t[0]}{t[1]}: {t[2]}")


@SETTINGS
@given(lines=st.lists(yaml_line, max_size=8))
def test_config_file_of_yaml_ish_text(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes("\n".join(lines).encode("utf-8", errors="surrogatepass"))
    _config_outcome(lambda: load_config(path))


override = st.one_of(
    st.text(max_size=40),
    st.tuples(
        st.sampled_from(
            [
                "model.d_model",
                "model.dropout",
                "data.test_splits",
                "training.betas",
                "training.max_time",
                "model",
                "nope.x",
                "model.d_model.x",
                "",
            ]
        ),
        st.one_of(st.sampled_from(TRICKY_VALUES), st.text(max_size=20)),
    ).map(lambda kv: f"{kv[0]}={kv[1]}"),
)


@SETTINGS
@given(overrides=st.lists(override, max_size=4))
def test_config_overrides_of_arbitrary_text(overrides: list[str]) -> None:
    _config_outcome(lambda: load_config(None, overrides))


def test_config_errors_are_one_line_whatever_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'a\\nb' in the command line"):
        load_config(None, ["a\nb=1"])
    path = tmp_path / "c.yaml"
    path.write_text('model:\n  "drop\\nout": 0.1\n', encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert "\n" not in str(e.value) and "model.drop" in str(e.value)


@pytest.mark.parametrize("value", [*TRICKY_VALUES, "[" * 1100, "{a: " * 1100])
def test_tricky_yaml_values_are_config_errors_or_configs(tmp_path: Path, value: str) -> None:
    """The PyYAML surprises (ValueError from dates and !!float, RecursionError) included."""
    path = tmp_path / "c.yaml"
    path.write_text(f"model:\n  d_model: {value}\n", encoding="utf-8")
    assert _config_outcome(lambda: load_config(path)) is None  # never a valid d_model
    path.write_text(value + "\n", encoding="utf-8")
    _config_outcome(lambda: load_config(path))
    assert _config_outcome(lambda: load_config(None, [f"model.d_model={value}"])) is None
    assert _config_outcome(lambda: load_config(None, [f"data.test_splits={value}"])) is None
