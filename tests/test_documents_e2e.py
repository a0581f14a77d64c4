"""Every format end to end with a trained tiny model whose words differ from its input's (the
factories' ``shift`` task): through POST /translate_file and its download, and through
``seq2seq translate -i FILE -o FILE``; bad files are JSON 400s and CLI exits 2."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from document_fixtures import BUILDERS, make_docx, make_srt
from factories import make_model_dir, run_app

from seq2seq.cli.command import main as cli_main
from seq2seq.decode.translator import Translator
from seq2seq.documents import FORMATS, open_document
from seq2seq.serve.app import create_app
from seq2seq.serve.config import ServeConfig
from seq2seq.serve.served_model import model_info

GOOD = {"source": "en", "target": "de"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("docs") / "model", train_steps=150, task="shift")


def _texts(name: str, data: bytes) -> list[str]:
    return open_document(name, data, inline=False).texts


def _translations(name: str, out: bytes) -> list[str]:
    """The translated texts of a file, as the format's library reads them."""
    if name.endswith(".po"):
        import polib

        po = polib.pofile(out.decode())
        return [s for e in po for s in ([e.msgstr] if e.msgstr else e.msgstr_plural.values())]
    if name.endswith(".xlf"):
        from translate.storage import xliff

        return [u.target for u in xliff.xlifffile.parsestring(out).units if u.target]
    return _texts(name, out)


def _assert_translated(name: str, src: bytes, out: bytes) -> None:
    """The output reads back as its format, every translated text changed."""
    before, after = _texts(name, src), _translations(name, out)
    assert before, name
    words_before = {w.strip(".,!").lower() for t in before for w in t.split()}
    for t in after:
        assert t not in before, (name, t)
    assert after, name
    assert any(w.strip(".,!").lower() not in words_before for t in after for w in t.split()), name


@pytest.mark.slow
def test_every_format_through_the_server(model_dir):
    translator = Translator.load(model_dir)
    app = create_app(
        translator, info=model_info(translator, model_dir, "torch"), config=ServeConfig()
    )
    sources = {f"park{suffix}": build() for suffix, build in BUILDERS.items()}

    async def body(client):
        settings = (await client.get("/frontend/settings")).json()
        got = {}
        for name, data in sources.items():
            r = await client.post("/translate_file", data=GOOD, files={"file": (name, data)})
            assert r.status_code == 200, (name, r.text)
            url = r.json()["translatedFileUrl"]
            got[name] = (url, await client.get(url))
        bad = {
            "bomb": await client.post(
                "/translate_file", data=GOOD, files={"file": ("x.docx", b"PK\x03\x04junk")}
            ),
            "suffix": await client.post(
                "/translate_file", data=GOOD, files={"file": ("x.pdf", b"%PDF-1.4")}
            ),
            "timing": await client.post(
                "/translate_file",
                data=GOOD,
                files={"file": ("x.srt", b"1\n00:00:09,000 --> 00:00:01,000\nA man.\n")},
            ),
        }
        return settings, got, bad

    settings, got, bad = run_app(app, body)
    assert settings["supportedFilesFormat"] == sorted(FORMATS)
    for name, (url, answer) in got.items():
        suffix = name[name.rfind(".") :]
        assert re.search(rf"/park\.de\{suffix}$", url), url
        assert answer.status_code == 200
        assert answer.headers["content-type"].split(";")[0] == FORMATS[suffix][1].split(";")[0]
        _assert_translated(name, sources[name], answer.content)
    for case, r in bad.items():
        assert r.status_code == 400, case
        assert r.headers["content-type"] == "application/json" and r.json()["error"], case
    assert "not a Word document" in bad["bomb"].json()["error"]
    assert "ends before it starts" in bad["timing"].json()["error"]


@pytest.mark.slow
def test_documents_through_the_cli(model_dir, tmp_path, capsys):
    import docx
    import pysrt

    for suffix in (".docx", ".srt", ".po", ".md", ".epub"):
        src = tmp_path / f"in{suffix}"
        src.write_bytes(BUILDERS[suffix]())
        out = tmp_path / f"out.de{suffix}"
        assert cli_main(["translate", str(model_dir), "-i", str(src), "-o", str(out)]) == 0
        _assert_translated(src.name, src.read_bytes(), out.read_bytes())
    a = docx.Document(io.BytesIO(make_docx()))
    b = docx.Document(str(tmp_path / "out.de.docx"))
    assert [len(p.runs) for p in a.paragraphs] == [len(p.runs) for p in b.paragraphs]
    subs = pysrt.open(str(tmp_path / "out.de.srt"))
    assert [(c.start, c.end) for c in subs] == [
        (c.start, c.end) for c in pysrt.from_string(make_srt().decode())
    ]


def test_cli_bad_documents_exit_2_with_one_line_and_no_file(tmp_path, capsys):
    model_dir = make_model_dir(tmp_path / "model")  # never loaded: the file fails first
    cases = {
        "bad.docx": b"PK\x03\x04 not a zip",
        "bad.srt": b"1\n00:00:01,000 --> 00:00:00,500\nA man.\n",
    }
    for name, data in cases.items():
        src = tmp_path / name
        src.write_bytes(data)
        out = tmp_path / "out" / f"x{src.suffix}"
        assert cli_main(["translate", str(model_dir), "-i", str(src), "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and name in err, err
        assert not out.exists()
        assert not out.parent.exists() or not any(out.parent.iterdir())  # no temporary file
    src = tmp_path / "in.docx"
    src.write_bytes(make_docx())
    for extra, word in (([], "-o FILE"), (["-o", str(tmp_path / "x.pptx")], ".docx")):
        assert cli_main(["translate", str(model_dir), "-i", str(src), *extra]) == 2
        assert word in capsys.readouterr().err
