#!/usr/bin/env python
"""What document handling costs: a generated 100-page ``.docx`` (about 2,500 sentences, some
paragraphs with bold and italic runs) through ``POST /translate_file``, against ``seq2seq
translate`` on the same sentences as plain text (one per line), on a CTranslate2 int8 export.

The target (docs/benchmarks.md): the file reaches at least 90% of the plain text's sentences
per second, with its peak RSS stated. Each row runs in its own process (its own peak RSS):

- ``plain text (CLI)``: ``seq2seq translate EXPORT --engine ctranslate2 -i sentences.txt -o
  OUT``, in process, after the same command on a one-line file has run once (imports); the
  time of that command run again (model load, a sentence) is taken off: translation alone;
- ``docx (server)``: the app of ``seq2seq serve`` with the export loaded, the upload through
  httpx's in-process transport (no network), timed from the upload to the downloaded file;
  a small file is translated first (warm-up);
- ``docx, no runs (server)``: the same book without its bold and italic runs (no paragraph
  needs word alignments): the cost of the format alone;
- ``docx (CLI)``: ``seq2seq translate EXPORT -i book.docx -o OUT``, start-up taken off as above.

Without ``MODEL_DIR`` the tests' tiny model (tests/factories.py, the ``shift`` task, 150
training steps: d_model 32, one layer each side) is built and exported: its decoding is so fast
that the format's share of the time is at its largest (a harder test than the demo model).

    python benchmarks/document_speed.py                    # the tiny model, built here
    python benchmarks/document_speed.py runs/demo/averaged # a trained model directory
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import needs  # this folder: one line and exit 2 for a user mistake

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"


def sentences(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences of 5-12 words of the tiny model's vocabulary."""
    sys.path.insert(0, str(TESTS))
    from factories import WORDS

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
        out.append(" ".join(words).capitalize() + ".")
    return out


def make_book(
    lines: list[str], per_paragraph: int = 5, per_page: int = 5, formatting: bool = True
) -> bytes:
    """A .docx of paragraphs of ``per_paragraph`` sentences, a page break every ``per_page``
    paragraphs (none after the last); with ``formatting`` every third paragraph has a bold and
    an italic run."""
    import docx
    from docx.enum.text import WD_BREAK

    d = docx.Document()
    for k in range(0, len(lines), per_paragraph):
        chunk = lines[k : k + per_paragraph]
        p = d.add_paragraph()
        if formatting and (k // per_paragraph) % 3 == 0 and len(chunk) >= 2:
            first = chunk[0].split()
            p.add_run(" ".join(first[:2]) + " ")
            p.add_run(" ".join(first[2:4])).bold = True
            p.add_run(" " + " ".join(first[4:]) + " ")
            p.add_run(chunk[1]).italic = True
            p.add_run(" " + " ".join(chunk[2:]))
        else:
            p.add_run(" ".join(chunk))
        last = k + per_paragraph >= len(lines)
        if (k // per_paragraph) % per_page == per_page - 1 and not last:
            p.add_run().add_break(WD_BREAK.PAGE)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_cli(export: Path, src: Path, out: Path) -> float:
    from seq2seq.cli.command import main

    start = time.perf_counter()
    status = main(
        ["translate", str(export), "--engine", "ctranslate2", "-i", str(src), "-o", str(out)]
    )
    if status:
        raise needs.UserError(f"seq2seq translate exited {status}")
    return time.perf_counter() - start


def part_cli(export: Path, work: Path, kind: str) -> dict:
    """Translation time of the CLI on the big input, its start-up taken off."""
    suffix = ".txt" if kind == "plain" else ".docx"
    small = work / f"small{suffix}"
    run_cli(export, small, work / f"small.out{suffix}")  # imports and first calls
    start_up = run_cli(export, small, work / f"small.out{suffix}")
    total = run_cli(export, work / f"book{suffix}", work / f"book.out{suffix}")
    return {"seconds": total - start_up, "start_up": start_up, "rss": peak_rss_mib()}


def part_server(export: Path, work: Path, book_name: str = "book.docx") -> dict:
    import asyncio

    import httpx

    from seq2seq.decode import Translator
    from seq2seq.serve.app import create_app
    from seq2seq.serve.config import ServeConfig
    from seq2seq.serve.served_model import model_info

    translator = Translator.load([export], engine="ctranslate2")
    info = model_info(translator, export, "ctranslate2")
    app = create_app(translator, info=info, config=ServeConfig(max_file_bytes=50_000_000))
    book = (work / book_name).read_bytes()
    small = (work / "small.docx").read_bytes()

    async def upload(client, name, data) -> bytes:
        r = await client.post(
            "/translate_file", data={"source": info.source, "target": info.target},
            files={"file": (name, data)},
        )  # fmt: skip
        if r.status_code != 200:
            raise needs.UserError(f"/translate_file answered {r.status_code}: {r.text}")
        return (await client.get(r.json()["translatedFileUrl"])).content

    async def main() -> float:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
                await upload(client, "small.docx", small)
                start = time.perf_counter()
                out = await upload(client, "book.docx", book)
                seconds = time.perf_counter() - start
        (work / "book.server.docx").write_bytes(out)
        return seconds

    return {"seconds": asyncio.run(main()), "rss": peak_rss_mib()}


def build_export(work: Path, model: str | None) -> Path:
    from seq2seq.export import export_model

    if model is None:
        sys.path.insert(0, str(TESTS))
        from factories import make_model_dir

        model_dir = make_model_dir(work / "model", train_steps=150, task="shift")
    else:
        model_dir = needs.model_dir(model)
    out = work / "ct2"
    export_model(model_dir, out, fmt="ctranslate2", quantization="int8")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", metavar="MODEL_DIR", help="default: the tests' tiny model")
    p.add_argument("--sentences", type=int, default=2500, help="sentences in the book")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every row (medians)")
    p.add_argument(
        "--part", choices=["plain", "docx-cli", "server", "server-plain"], help=argparse.SUPPRESS
    )
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        work = Path(args.work)
        export = work / "ct2"
        if args.part == "server":
            result = part_server(export, work)
        elif args.part == "server-plain":
            result = part_server(export, work, "book_plain.docx")
        else:
            result = part_cli(export, work, "plain" if args.part == "plain" else "docx")
        print(json.dumps(result))
        return
    if args.sentences < 100:
        raise needs.UserError("--sentences must be at least 100")
    if args.rounds < 1:
        raise needs.UserError("--rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="document-speed-") as tmp:
        work = Path(tmp)
        build_export(work, args.model)
        lines = sentences(args.sentences)
        (work / "book.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (work / "small.txt").write_text(lines[0] + "\n", encoding="utf-8")
        (work / "book.docx").write_bytes(make_book(lines))
        (work / "book_plain.docx").write_bytes(make_book(lines, formatting=False))
        (work / "small.docx").write_bytes(make_book(lines[:5]))
        rounds: list[dict] = []
        for _ in range(args.rounds):  # the rows interleaved, so that a busy spell hits them all
            results = {}
            for part in ("plain", "server", "server-plain", "docx-cli"):
                proc = subprocess.run(
                    [sys.executable, __file__, "--part", part, "--work", str(work)],
                    capture_output=True, text=True,
                )  # fmt: skip
                if proc.returncode:
                    sys.stderr.write(proc.stderr[-3000:])
                    raise SystemExit(proc.returncode)
                results[part] = json.loads(proc.stdout.strip().splitlines()[-1])
            rounds.append(results)
        import docx

        pages = 1 + sum(
            1 for p in docx.Document(work / "book.docx").paragraphs for r in p.runs
            if 'w:br w:type="page"' in r._r.xml or "w:type=\"page\"" in r._r.xml
        )  # fmt: skip
    n = args.sentences
    print(f"{n:,} sentences; a .docx of {pages} pages; CTranslate2 int8 export; "
          f"medians of {args.rounds} round(s), the ratio within each round")  # fmt: skip
    print(f"{'path':<24}{'seconds':>9}{'sentences/s':>13}{'vs plain':>10}  {'rounds':<22}"
          f"{'peak RSS MiB':>13}")  # fmt: skip
    rows = (("plain text (CLI)", "plain"), ("docx (server)", "server"),
            ("docx, no runs (server)", "server-plain"), ("docx (CLI)", "docx-cli"))  # fmt: skip
    for label, key in rows:
        seconds = statistics.median(r[key]["seconds"] for r in rounds)
        ratios = [r["plain"]["seconds"] / r[key]["seconds"] for r in rounds]
        each = ", ".join(f"{x:.0%}" for x in ratios)
        rss = max(r[key]["rss"] for r in rounds)
        print(f"{label:<24}{seconds:>9.2f}{n / seconds:>13.0f}{statistics.median(ratios):>9.0%}"
              f"  {each:<22}{rss:>13.0f}")  # fmt: skip


if __name__ == "__main__":
    needs.run(main)
