"""Reading parallel text, the token store, the token-bucket sampler and collate."""

from __future__ import annotations

import gzip
import json
import pickle
import random
import resource
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_lightning.utilities import move_data_to_device
from torch.utils.data import DataLoader

from seq2seq.core.errors import UserError
from seq2seq.data.batching import Batch, TokenBucketSampler, collate
from seq2seq.data.parallel import ReadStats, count_lines, iter_parallel, read_parallel
from seq2seq.data.prepare import prepare_corpus
from seq2seq.data.store import TokenStore, build_store
from seq2seq.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

WORDS = "the a man woman dog cat runs walks red blue small big house street park ball".split()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _sentences(n: int, seed: int, lo: int = 1, hi: int = 12) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    src = _write(d / "s.txt", ("\n".join(_sentences(400, 1)) + "\n").encode())
    tgt = _write(d / "t.txt", ("\n".join(_sentences(400, 2)) + "\n").encode())
    return train_tokenizer(src, tgt, d / "spm", vocab_size=100)


# ---------------------------------------------------------------------------------------------
# Reading


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    src = _write(tmp_path / "a.en", b"1\n2\n3\n")
    tgt = _write(tmp_path / "a.de", b"1\n2\n")
    with pytest.raises(UserError) as err:
        list(iter_parallel(src, tgt))
    assert str(err.value).startswith(f"{src} has 3 lines but {tgt} has 2")


def test_invalid_utf8_names_file_and_line(tmp_path):
    src = _write(tmp_path / "a.en", b"ok\nfine\nbad \xc3\x28 here\nok\n")
    tgt = _write(tmp_path / "a.de", b"1\n2\n3\n4\n")
    with pytest.raises(UserError, match=rf"^{src}:3: invalid UTF-8"):
        list(iter_parallel(src, tgt))
    gz = _write(tmp_path / "b.de.gz", gzip.compress(b"1\n2\n3\n\xff\n"))
    with pytest.raises(UserError, match=rf"^{gz}:4: invalid UTF-8"):
        read_parallel(tgt, gz)


def test_empty_pairs_are_dropped_and_counted(tmp_path):
    src = _write(tmp_path / "a.en", b"one\n\ntwo\n \t \nthree\nfour\n")
    tgt = _write(tmp_path / "a.de", b"eins\nx\n\ny\ndrei\n  vier  \n")
    text = read_parallel(src, tgt, split="train")
    assert text.src == ["one", "three", "four"]
    assert text.tgt == ["eins", "drei", "vier"]
    assert text.lines == [0, 4, 5]
    assert (text.stats.lines, text.stats.empty, text.stats.kept) == (6, 3, 3)
    assert "kept 3 of 6" in text.stats.summary() and "3 empty" in text.stats.summary()
    assert read_parallel(src, tgt, limit=3).src == ["one"]


def test_line_ends_and_odd_characters_keep_alignment(tmp_path):
    # CRLF, no final newline, and characters str.splitlines() would split on
    src = _write(
        tmp_path / "a.en",
        "a\r\nb\x0bc\r\nd\x1ce\u2028f\r\ng\x00h\r\n\ufeffi\x85j\r\nlast".encode(),
    )
    tgt = _write(tmp_path / "a.de", b"1\n2\n3\n4\n5\n6")
    assert count_lines(src) == count_lines(tgt) == 6
    text = read_parallel(src, tgt)
    assert text.tgt == ["1", "2", "3", "4", "5", "6"]
    assert text.src == ["a", "b\x0bc", "d\x1ce\u2028f", "g\x00h", "\ufeffi\x85j", "last"]
    # a byte-order mark opening the file is not part of the first sentence
    bom = _write(tmp_path / "bom.en", "\ufeffhello\n".encode())
    one = _write(tmp_path / "one.de", b"hallo\n")
    assert read_parallel(bom, one).src == ["hello"]


def test_gzip_and_missing_files(tmp_path):
    src = _write(tmp_path / "a.en.gz", gzip.compress(b"x\ny\n"))
    tgt = _write(tmp_path / "a.de", b"u\nv\n")
    assert read_parallel(src, tgt).src == ["x", "y"]
    with pytest.raises(UserError, match="file not found: .*nope"):
        read_parallel(tmp_path / "nope", tgt)


# ---------------------------------------------------------------------------------------------
# The store


def _pair_files(tmp_path: Path, src: list[str], tgt: list[str], name: str = "c"):
    s = _write(tmp_path / f"{name}.en", ("\n".join(src) + "\n").encode())
    t = _write(tmp_path / f"{name}.de", ("\n".join(tgt) + "\n").encode())
    return s, t


def test_store_ids_equal_direct_encoding(tmp_path, tok):
    src, tgt = _sentences(500, 3), _sentences(500, 4)
    src[7] = ""  # dropped as empty
    s, t = _pair_files(tmp_path, src, tgt)
    log: list[str] = []
    store = build_store(
        tmp_path / "store", s, t, tok, split="test", train=False, chunk_size=64, log=log.append
    )
    keep = [i for i in range(500) if i != 7]
    assert len(store) == 499 and store.lines.tolist() == keep
    want_src = tok.encode_src([src[i] for i in keep])
    want_tgt = tok.encode_tgt([tgt[i] for i in keep])
    for j in range(len(store)):
        i, a, b = store[j]
        assert i == j and a.tolist() == want_src[j] and b.tolist() == want_tgt[j]
    assert store.src_lens.tolist() == [len(x) for x in want_src]
    assert store.tgt_lens.tolist() == [len(x) for x in want_tgt]
    header = store.header
    assert header["src_dtype"] == "uint16" and header["key"]["fingerprint"] == tok.fingerprint()
    assert header["stats"] == {
        "lines": 500,
        "empty": 1,
        "duplicate": 0,
        "wrong_language": 0,
        "too_long": 0,
        "bad_ratio": 0,
    }
    assert log == [
        "test: kept 499 of 500 sentence pairs (dropped 1 empty, 0 too long, 0 with a bad length ratio)"
    ]
    with pytest.raises(IndexError):
        store[499]


def test_long_pairs_are_dropped_from_training_data_only(tmp_path, tok):
    src = ["the man", "the dog " * 20, "a cat", "the big red house", "a"]
    tgt = ["der mann", "der hund", "the cat " * 20, "das haus", "the big red house in the park"]
    s, t = _pair_files(tmp_path, src, tgt)
    log: list[str] = []
    train = build_store(
        tmp_path / "train",
        s,
        t,
        tok,
        split="train",
        train=True,
        max_len=20,
        max_ratio=3.0,
        log=log.append,
    )
    test = build_store(
        tmp_path / "test",
        s,
        t,
        tok,
        split="test",
        train=False,
        max_len=20,
        max_ratio=3.0,
        log=log.append,
    )
    assert train.lines.tolist() == [0, 3]
    assert train.header["stats"] == {
        "lines": 5,
        "empty": 0,
        "duplicate": 0,
        "wrong_language": 0,
        "too_long": 2,
        "bad_ratio": 1,
    }
    assert test.lines.tolist() == [0, 1, 2, 3, 4]
    assert test.header["stats"]["too_long"] == test.header["stats"]["bad_ratio"] == 0
    assert (
        log[0]
        == "train: kept 2 of 5 sentence pairs (dropped 0 empty, 2 too long, 1 with a bad length ratio)"
    )
    assert len(log) == 2  # one line per split


def test_store_is_reused_and_rebuilt_when_its_inputs_change(tmp_path, tok):
    s, t = _pair_files(tmp_path, _sentences(50, 5), _sentences(50, 6))
    path = tmp_path / "store"
    log: list[str] = []
    build_store(path, s, t, tok, split="x", train=True, log=log.append)
    stamp = (path / "header.json").stat().st_mtime_ns
    build_store(path, s, t, tok, split="x", train=True, log=log.append)
    assert (path / "header.json").stat().st_mtime_ns == stamp and len(log) == 1  # reused
    # a different SentencePiece model: rebuilt with its ids
    other = train_tokenizer(s, t, tmp_path / "other", vocab_size=60)
    assert other.fingerprint() != tok.fingerprint()
    store = build_store(path, s, t, other, split="x", train=True, log=log.append)
    assert len(log) == 2 and store.fingerprint == other.fingerprint()
    assert store[0][1].tolist() == other.encode_src([_sentences(50, 5)[0]])[0]
    assert TokenStore.open(path).fingerprint == other.fingerprint()
    # changed text or filters: rebuilt too
    build_store(path, s, t, other, split="x", train=False, limit=10, log=log.append)
    assert len(TokenStore(path)) == 10 and len(log) == 3
    _write(s, ("\n".join(_sentences(50, 7)) + "\n").encode())
    build_store(path, s, t, other, split="x", train=False, limit=10, log=log.append)
    assert len(log) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".store")]  # no temp dirs left


def test_store_errors(tmp_path, tok):
    s, t = _pair_files(tmp_path, ["", " "], ["a", "b"])
    with pytest.raises(UserError, match="no sentence pairs left"):
        build_store(tmp_path / "store", s, t, tok, split="x", train=True)
    assert not (tmp_path / "store").exists()
    with pytest.raises(UserError, match="no token store at"):
        TokenStore(tmp_path / "store")
    s, t = _pair_files(tmp_path, ["a", "b", "c"], ["a", "b"], name="uneven")
    with pytest.raises(UserError, match="has 3 lines but"):
        build_store(tmp_path / "store", s, t, tok, split="x", train=True)


def test_store_pickles_as_its_path(tmp_path, tok):
    s, t = _pair_files(tmp_path, _sentences(2000, 8), _sentences(2000, 9))
    store = build_store(tmp_path / "store", s, t, tok, split="x", train=False, log=lambda _: None)
    blob = pickle.dumps(store)
    assert len(blob) < 500
    copy = pickle.loads(blob)
    assert len(copy) == len(store) and copy[1999][2].tolist() == store[1999][2].tolist()


def test_build_streams_in_chunks(tmp_path, tok):
    n = 8_000
    s, t = _pair_files(tmp_path, _sentences(n, 10, 5, 15), _sentences(n, 11, 5, 15))
    tracemalloc.start()
    try:
        store = build_store(
            tmp_path / "store", s, t, tok, split="x", train=True, chunk_size=500, log=lambda _: None
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(store) == n
    # holding the corpus (strings and id lists) at once takes about 6 MB (measured: one chunk
    # of 8000 pairs); streaming 500 at a time stays near the 1 MB read buffer
    assert peak < 3 * 2**20, peak


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_opening_a_large_store_needs_little_memory(tmp_path):
    """3M pairs written directly in the store format; opening maps them, it does not read them."""
    n = 3_000_000
    rng = np.random.default_rng(0)
    path = tmp_path / "big"
    path.mkdir()
    totals = {}
    for side in ("src", "tgt"):
        lens = rng.integers(1, 20, n)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        np.save(path / f"{side}.idx.npy", offsets)
        rng.integers(4, 8000, int(offsets[-1]), dtype=np.uint16).tofile(path / f"{side}.bin")
        totals[side] = int(offsets[-1])
        del lens, offsets
    np.save(path / "lines.npy", np.arange(n, dtype=np.int64))
    header = {
        "key": {"format": 1, "fingerprint": "x"},
        "n_pairs": n,
        "src_dtype": "uint16",
        "tgt_dtype": "uint16",
        "src_tokens": totals["src"],
        "tgt_tokens": totals["tgt"],
    }
    (path / "header.json").write_text(json.dumps(header))
    before = _rss_kb()
    tracemalloc.start()
    try:
        store = TokenStore(path)
        i, src, tgt = store[n - 1]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown_mb = (_rss_kb() - before) / 1024
    assert len(store) == n and i == n - 1 and 1 <= len(src) < 20
    # the offsets alone are 48 MB and the ids ~120 MB: none of it may be read into memory
    assert peak < 2**20, peak
    assert grown_mb < 20, grown_mb


# ---------------------------------------------------------------------------------------------
# The sampler


def _lens(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 60, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 3, None)
    return src, tgt


def _cost(batch, src, tgt):
    return len(batch) * max(src[batch].max(), tgt[batch].max())


def test_batches_respect_max_tokens_and_cover_every_pair_once():
    src, tgt = _lens()
    src[10], tgt[10] = 700, 20  # longer than max_tokens: a batch of its own
    sampler = TokenBucketSampler(src, tgt, max_tokens=500, seed=1)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert [10] in batches
    assert all(_cost(b, src, tgt) <= 500 for b in batches if b != [10])
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(len(src)))
    # similar lengths are batched together: batches are full and padding is small
    assert np.mean([_cost(b, src, tgt) for b in batches]) > 400


def test_bucket_width_still_respects_the_budget():
    src, tgt = _lens()
    batches = list(TokenBucketSampler(src, tgt, max_tokens=300, seed=1, bucket_width=8))
    assert all(_cost(b, src, tgt) <= 300 for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))


def test_order_depends_on_seed_and_epoch_only():
    src, tgt = _lens()
    a = TokenBucketSampler(src, tgt, max_tokens=400, seed=1)
    b = TokenBucketSampler(src, tgt, max_tokens=400, seed=1)
    c = TokenBucketSampler(src, tgt, max_tokens=400, seed=2)
    assert list(a) == list(b)
    assert list(a) != list(c)
    epoch0 = list(a)
    a.set_epoch(1)
    epoch1 = list(a)
    assert epoch0 != epoch1
    assert sorted(i for b in epoch1 for i in b) == list(range(len(src)))
    a.set_epoch(0)
    assert list(a) == epoch0
    # an epoch function (the trainer's current epoch) wins over set_epoch
    epoch = {"now": 1}
    d = TokenBucketSampler(src, tgt, max_tokens=400, seed=1, epoch_fn=lambda: epoch["now"])
    assert list(d) == epoch1
    epoch["now"] = 0
    assert list(d) == epoch0


def test_unshuffled_batches_come_in_length_order():
    src, tgt = _lens()
    sampler = TokenBucketSampler(src, tgt, max_tokens=400, seed=1, shuffle=False)
    batches = list(sampler)
    widths = [max(src[b].max(), tgt[b].max()) for b in batches]
    assert widths == sorted(widths)
    sampler.set_epoch(3)
    assert list(sampler) == batches


@pytest.mark.parametrize("drop_last", [False, True])
def test_replicas_get_disjoint_equal_shards(drop_last):
    src, tgt = _lens(2000)
    whole = TokenBucketSampler(src, tgt, max_tokens=400, seed=5)
    n_batches = len(whole)
    assert n_batches % 3 != 0  # the shards need evening out
    shards = [
        list(
            TokenBucketSampler(
                src, tgt, max_tokens=400, seed=5, num_replicas=3, rank=r, drop_last=drop_last
            )
        )
        for r in range(3)
    ]
    lengths = {len(s) for s in shards}
    assert len(lengths) == 1
    assert lengths.pop() == (n_batches // 3 if drop_last else -(-n_batches // 3))
    sets = [{i for b in shard for i in b} for shard in shards]
    for r in range(3):
        for q in range(r + 1, 3):
            assert not sets[r] & sets[q]
    covered = set().union(*sets)
    if drop_last:
        assert len(covered) < len(src)
        for shard in shards:  # nothing repeated
            flat = [i for b in shard for i in b]
            assert len(flat) == len(set(flat))
    else:
        assert covered == set(range(len(src)))
    # the shards are cut from the same batches as a single replica's
    whole_batches = {tuple(b) for b in whole}
    assert all(tuple(b) in whole_batches for shard in shards for b in shard)


def test_set_start_batch_skips_exactly_once():
    src, tgt = _lens()
    sampler = TokenBucketSampler(src, tgt, max_tokens=400, seed=1)
    sampler.set_epoch(2)
    full = list(sampler)
    sampler.set_start_batch(7)
    assert len(sampler) == len(full)
    assert list(sampler) == full[7:]
    assert list(sampler) == full  # only the next iteration skips
    sampler.set_start_batch(len(full) + 5)
    assert list(sampler) == []
    with pytest.raises(ValueError):
        sampler.set_start_batch(-1)


def test_padding_overhead_on_multi30k(mirror, tmp_path):
    files = prepare_corpus("multi30k", "en-de", tmp_path / "text", mirror=mirror, splits=["train"])
    src_file, tgt_file = files["train"]
    tok = train_tokenizer(src_file, tgt_file, tmp_path / "spm", vocab_size=8000)
    assert tok.src_vocab_size == 8000
    store = build_store(
        tmp_path / "store", src_file, tgt_file, tok, split="train", train=True, log=lambda _: None
    )
    src_lens, tgt_lens = store.src_lens + 1, store.tgt_lens + 2
    sampler = TokenBucketSampler(src_lens, tgt_lens, max_tokens=4096, seed=1)
    padded = real = 0
    for batch in sampler:
        padded += len(batch) * (src_lens[batch].max() + tgt_lens[batch].max())
        real += src_lens[batch].sum() + tgt_lens[batch].sum()
    assert real == src_lens.sum() + tgt_lens.sum()
    assert padded / real - 1 < 0.10, padded / real - 1
    # and the collated tensors are exactly that wide
    first = next(iter(sampler))
    b = collate([store[i] for i in first])
    assert b.src_ids.shape == (len(first), src_lens[first].max())
    assert b.tgt_ids.shape == (len(first), tgt_lens[first].max())
    assert b.src_ids.numel() <= 4096 or len(first) == 1


# ---------------------------------------------------------------------------------------------
# Collate


def test_collate_adds_specials_and_pads():
    items = [
        (5, np.array([10, 11, 12]), np.array([20])),
        (9, np.array([13]), np.array([21, 22, 23, 24])),
        (2, np.array([], np.uint16), np.array([25])),
    ]
    b = collate(items)
    assert isinstance(b, Batch) and len(b) == 3
    assert b.src_ids.dtype == b.tgt_ids.dtype == b.index.dtype == torch.long
    assert b.src_ids.tolist() == [
        [10, 11, 12, EOS_ID],
        [13, EOS_ID, PAD_ID, PAD_ID],
        [EOS_ID, PAD_ID, PAD_ID, PAD_ID],
    ]
    assert b.tgt_ids.tolist() == [
        [BOS_ID, 20, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
        [BOS_ID, 21, 22, 23, 24, EOS_ID],
        [BOS_ID, 25, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
    ]
    assert b.index.tolist() == [5, 9, 2]
    tgt_out = b.tgt_ids[:, 1:]
    assert b.n_tgt_tokens == int((tgt_out != PAD_ID).sum()) == 2 + 5 + 2


def test_batch_moves_to_a_device():
    b = collate([(0, np.array([4, 5]), np.array([6]))])
    moved = move_data_to_device(b, torch.device("meta"))
    assert isinstance(moved, Batch)
    assert (
        moved.src_ids.device.type == moved.tgt_ids.device.type == moved.index.device.type == "meta"
    )
    assert moved.n_tgt_tokens == b.n_tgt_tokens == 2


def test_dataloader_over_a_store(tmp_path, tok):
    src, tgt = _sentences(300, 12), _sentences(300, 13)
    s, t = _pair_files(tmp_path, src, tgt)
    store = build_store(tmp_path / "store", s, t, tok, split="x", train=False, log=lambda _: None)
    sampler = TokenBucketSampler(store.src_lens + 1, store.tgt_lens + 2, max_tokens=200, seed=0)
    seen = []
    for batch in DataLoader(store, batch_sampler=sampler, collate_fn=collate):
        assert batch.src_ids.numel() <= 200 and batch.tgt_ids.numel() <= 200
        for row, i in enumerate(batch.index.tolist()):
            seen.append(i)
            ids = batch.tgt_ids[row][batch.tgt_ids[row] != PAD_ID].tolist()
            assert ids == [BOS_ID, *tok.encode_tgt([tgt[i]])[0], EOS_ID]
    assert sorted(seen) == list(range(300))


def test_read_stats_summary():
    stats = ReadStats("train", lines=10, empty=1, too_long=2, bad_ratio=3)
    assert stats.kept == 4
    assert (
        stats.summary()
        == "train: kept 4 of 10 sentence pairs (dropped 1 empty, 2 too long, 3 with a bad length ratio)"
    )
