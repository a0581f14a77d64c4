"""A pretrained-sized Marian model: transformers ``generate`` against our engines.

Builds a Marian-shaped model of a real size (``--shape``: ``opus``, OPUS-MT's d_model 512, 6+6
layers, 8 heads, ffn 2048, 58,101 pieces; ``nllb600m``, NLLB-200-distilled-600M's 12+12 layers,
d_model 1024, 16 heads, ffn 4096, 256,206 rows; ``m2m418m``, M2M100-418M's, with 128,112 rows;
random weights: speed does not depend on them) with transformers' own classes, saves it with ``save_pretrained``, converts it with ``seq2seq
convert marian`` (timed), exports it to CTranslate2 float32 and int8, and decodes Multi30K
test sentences at beam 4 with each engine, each in its own subprocess (for its peak RSS) on
``--threads`` threads. ``--profile`` adds, for the torch engine, ``torch.profiler``'s operators
by self CPU time over the run (on stderr).

Equal work: the sentences are sorted by the length of their reference (target pieces + EOS)
and cut into batches of ``--batch`` sentences; every engine decodes each batch with its output
length forced to the batch's longest reference length L (minimum and maximum length both L;
transformers: ``min_new_tokens`` = L - 1, ``max_new_tokens`` = L, EOS forced last), so every
engine computes the same number of decoder steps on the same batches. Prints one table; the
numbers go in docs/benchmarks.md.

    SEQ2SEQ_MIRROR=/path/to/mirror python benchmarks/pretrained.py --sentences 500
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from needs import mirror, run

SHAPES = {
    # Helsinki-NLP/opus-mt-en-de: a MarianMTModel
    "opus": dict(d_model=512, layers=6, heads=8, ffn=2048, rows=58_101, activation="swish"),
    # facebook/nllb-200-distilled-600M and facebook/m2m100_418M: M2M100ForConditionalGeneration
    # folders (pre-norm, ReLU) with an NLLB tokenizer, converted with `seq2seq convert m2m100`
    "nllb600m": dict(d_model=1024, layers=12, heads=16, ffn=4096, rows=256_206),
    "m2m418m": dict(d_model=1024, layers=12, heads=16, ffn=4096, rows=128_112),
}
ENGINES = ("transformers", "torch", "ctranslate2", "ctranslate2-int8")
SRC_LANG, TGT_LANG = "eng_Latn", "deu_Latn"  # the M2M100-family shapes' direction


def _lines(root: Path, split: str, lang: str, n: int) -> list[str]:
    path = root / "data" / "task1" / "raw" / f"{split}.{lang}.gz"
    if not path.is_file():
        path = root / "multi30k" / "data" / "task1" / "raw" / f"{split}.{lang}.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(n), f)]


def _padded_spm(root: Path, work: Path, pieces: int) -> Path:
    """A SentencePiece model trained on Multi30K, padded with unused pieces to ``pieces``."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    text = work / "train.txt"
    lines = _lines(root, "train", "en", 29_000) + _lines(root, "train", "de", 29_000)
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(work / "sp"),
        vocab_size=8000,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    proto = pb.ModelProto()
    proto.ParseFromString((work / "sp.model").read_bytes())
    have = {p.piece for p in proto.pieces}
    i = 0
    while len(proto.pieces) < pieces:
        name = f"\u2581unused{i}"
        i += 1
        if name not in have:
            proto.pieces.add(piece=name, score=-1e4, type=pb.ModelProto.SentencePiece.NORMAL)
    path = work / "padded.model"
    path.write_bytes(proto.SerializeToString())
    return path


def layer_sizes(size: dict) -> dict:
    """A BART-family config's size fields (MarianConfig, M2M100Config) from a :data:`SHAPES`
    entry: d_model, layers and heads on both sides, ffn."""
    return dict(
        d_model=size["d_model"],
        encoder_layers=size["layers"],
        decoder_layers=size["layers"],
        encoder_attention_heads=size["heads"],
        decoder_attention_heads=size["heads"],
        encoder_ffn_dim=size["ffn"],
        decoder_ffn_dim=size["ffn"],
    )


def build_m2m100(root: Path, out: Path, size: dict) -> None:
    """A random ``M2M100ForConditionalGeneration`` folder of ``size`` (d_model, layers, heads,
    ffn, rows) with an NLLB tokenizer that holds NLLB-200's 202 language codes, its
    SentencePiece model padded so that the tokenizer fills the rows, saved at ``out``."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    out.mkdir(parents=True)
    work = out.parent / "spm"
    work.mkdir(exist_ok=True)
    # NLLB's 256,000 pieces for its 256,206 rows: the rest are 4 specials, 202 codes, <mask>
    pieces = size["rows"] - 206
    shutil.copyfile(_padded_spm(root, work, pieces), out / "sentencepiece.bpe.model")
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    tok = NllbTokenizer.from_pretrained(  # NLLB-200's 202 language codes, in its order
        str(out),
        additional_special_tokens=list(FAIRSEQ_LANGUAGE_CODES),
        src_lang="eng_Latn",
        tgt_lang="deu_Latn",
    )
    assert tok.convert_tokens_to_ids("eng_Latn") != tok.unk_token_id
    assert pieces < len(tok) <= size["rows"], len(tok)  # the pieces and the language codes
    tok.save_pretrained(out)
    (out / "sentencepiece.bpe.model").unlink()  # the tokenizer.json holds it all
    config = M2M100Config(
        vocab_size=size["rows"],
        **layer_sizes(size),
        activation_function="relu",
        max_position_embeddings=1024,
        scale_embedding=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(config).eval()
    model.save_pretrained(out)


def family(shape: str) -> str:
    """The ``seq2seq convert`` family of a :data:`SHAPES` shape."""
    return "marian" if shape == "opus" else "m2m100"


def build_hf_model(root: Path, out: Path, shape: str = "opus") -> None:
    """A random model of :data:`SHAPES` ``shape`` with real SentencePiece models, saved at
    ``out``: a MarianMTModel (``opus``) or an M2M100ForConditionalGeneration."""
    if family(shape) == "m2m100":
        build_m2m100(root, out, SHAPES[shape])
        return
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel

    out.mkdir(parents=True)
    work = out.parent / "spm"
    work.mkdir()
    for side, lang in (("source", "en"), ("target", "de")):
        text = work / f"{lang}.txt"
        text.write_text("\n".join(_lines(root, "train", lang, 29_000)) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(text),
            model_prefix=str(work / lang),
            vocab_size=8000,
            model_type="unigram",
            hard_vocab_limit=False,
            minloglevel=2,
        )
        shutil.copyfile(work / f"{lang}.model", out / f"{side}.spm")
    vocab = {"</s>": 0, "<unk>": 1}
    for lang in ("en", "de"):
        sp = spm.SentencePieceProcessor(model_file=str(work / f"{lang}.model"))
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    size = SHAPES[shape]
    rows = size["rows"]
    while len(vocab) < rows - 1:  # the real size: pieces no sentence here uses
        vocab[f"\u2581unused{len(vocab)}"] = len(vocab)
    vocab["<pad>"] = rows - 1
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    config = MarianConfig(
        vocab_size=rows,
        decoder_vocab_size=rows,
        **layer_sizes(size),
        activation_function=size["activation"],
        max_position_embeddings=512,
        pad_token_id=rows - 1,
        eos_token_id=0,
        decoder_start_token_id=rows - 1,
        forced_eos_token_id=0,
        scale_embedding=True,
    )
    torch.manual_seed(0)
    model = MarianMTModel(config).eval()
    model.generation_config.bad_words_ids = [[rows - 1]]
    model.save_pretrained(out)
    (out / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de", "separate_vocabs": False})
    )


def groups(hf_dir: Path, root: Path, n: int, batch: int) -> list[tuple[int, list[str]]]:
    """(L, sources) batches of the first ``n`` test sentences, sorted by reference length; L is
    the longest reference length (target pieces + EOS) in the batch."""
    src = _lines(root, "test_2016_flickr", "en", n)
    ref = _lines(root, "test_2016_flickr", "de", n)
    if (hf_dir / "target.spm").is_file():  # Marian
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(hf_dir / "target.spm"))
        lengths = [len(sp.encode(r)) + 1 for r in ref]
    else:  # M2M100/NLLB: [deu_Latn] pieces </s>, the forced language token counted
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(hf_dir, src_lang=SRC_LANG, tgt_lang=TGT_LANG)
        lengths = [len(tok(text_target=r)["input_ids"]) for r in ref]
    ordered = sorted(zip(lengths, src))
    return [
        (ordered[i + len(ordered[i : i + batch]) - 1][0], [s for _, s in ordered[i : i + batch]])
        for i in range(0, len(ordered), batch)
    ]


def worker(engine: str, path: Path, groups_file: Path, threads: int, profile: bool = False) -> dict:
    """Decode every group with ``engine``; return sentences/s and peak RSS."""
    import torch

    torch.set_num_threads(threads)
    work = json.loads(groups_file.read_text(encoding="utf-8"))
    m2m100 = not (path / "target.spm").is_file() and engine == "transformers"
    langs = {}
    if engine == "transformers":
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(path, **({"src_lang": SRC_LANG} if m2m100 else {}))
        forced = {"forced_bos_token_id": tok.convert_tokens_to_ids(TGT_LANG)} if m2m100 else {}

        def decode(length: int, sentences: list[str]) -> None:
            batch = tok(sentences, padding=True, return_tensors="pt")
            with torch.inference_mode():
                model.generate(
                    **batch,
                    **forced,
                    num_beams=4,
                    min_new_tokens=length - 1,
                    max_new_tokens=length,
                    early_stopping=True,
                )
    else:
        from seq2seq.decode import Translator

        kind = "torch" if engine == "torch" else "ctranslate2"
        translator = Translator.load(path, engine=kind)
        if translator.languages:  # a many-language model: the same direction
            langs = {"source_lang": SRC_LANG, "target_lang": TGT_LANG}

        def decode(length: int, sentences: list[str]) -> None:
            translator.translate(
                sentences, beam_size=4, min_len=length, max_len_a=0.0, max_len_b=length, **langs
            )

    n = sum(len(s) for _, s in work)
    start = time.perf_counter()
    if profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        with profiler(activities=[ProfilerActivity.CPU]) as prof:
            for length, sentences in work:
                decode(length, sentences)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        print(f"{engine}:\n{table}", file=sys.stderr)
    else:
        for length, sentences in work:
            decode(length, sentences)
    seconds = time.perf_counter() - start
    return {
        "engine": engine,
        "sentences": n,
        "seconds": seconds,
        "sent_per_s": n / seconds,
        "peak_rss_mib": _peak_rss_mib(),
    }


def _peak_rss_mib() -> float:
    """This process' peak RSS (VmHWM). Not ru_maxrss: on Linux that survives fork + exec, so
    a worker would report at least the parent's peak (which built the model)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "seq2seq.cli", *args], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", default=os.environ.get("SEQ2SEQ_MIRROR"))
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="sentences per batch")
    ap.add_argument("--work", help="keep the built models in this folder and reuse them")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="opus")
    ap.add_argument("--profile", action="store_true", help="profile transformers and torch")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--groups", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        result = worker(args.worker, Path(args.path), Path(args.groups), args.threads, args.profile)
        print(json.dumps(result))
        return 0
    root = Path(mirror(args.mirror))
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory(prefix="pretrained-bench-") as tmp:
        tmp = Path(args.work) if args.work else Path(tmp)
        hf_dir, model_dir = tmp / "hf", tmp / "converted"
        if args.shape != "opus":
            hf_dir, model_dir = tmp / f"hf-{args.shape}", tmp / f"converted-{args.shape}"
        if not hf_dir.is_dir():
            build_hf_model(root, hf_dir, args.shape)
        shutil.rmtree(model_dir, ignore_errors=True)
        start = time.perf_counter()
        _cli("convert", family(args.shape), str(hf_dir), "--out", str(model_dir))
        convert_s = time.perf_counter() - start
        paths = {"transformers": hf_dir, "torch": model_dir}
        engines = args.engines.split(",")
        for name, quantization in (("ctranslate2", "none"), ("ctranslate2-int8", "int8")):
            paths[name] = tmp / f"{name}-{args.shape}"
            if name not in engines:
                continue
            _cli(
                "export", str(model_dir), "--format", "ctranslate2",
                "--quantization", quantization, "--out", str(paths[name]), "--force",
            )  # fmt: skip
        groups_file = tmp / "groups.json"
        work = groups(hf_dir, root, args.sentences, args.batch)
        groups_file.write_text(json.dumps(work), encoding="utf-8")
        rows = []
        for engine in engines:
            env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
            cmd = [
                sys.executable, __file__, "--worker", engine, "--path", str(paths[engine]),
                "--groups", str(groups_file), "--threads", str(args.threads),
            ]  # fmt: skip
            if args.profile and engine in ("transformers", "torch"):
                cmd.append("--profile")
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if args.profile:
                print(out.stderr[-6000:], file=sys.stderr)
        base = next((r["sent_per_s"] for r in rows if r["engine"] == "transformers"), None)
        print(f"converted in {convert_s:.1f} s; model directory {_size_mb(model_dir):.1f} MB")
        print(f"shape {args.shape}: {SHAPES[args.shape]}")
        print(f"{len(work)} batches of up to {args.batch}, beam 4, {args.threads} threads")
        print("| engine | sentences/s | vs transformers | peak RSS (MiB) |")
        print("|---|---|---|---|")
        for r in rows:
            ratio = f"{r['sent_per_s'] / base:.2f}x" if base else "-"
            print(f"| {r['engine']} | {r['sent_per_s']:.2f} | {ratio} | {r['peak_rss_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    run(main)
