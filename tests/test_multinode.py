"""Several nodes sharing one --out: one process prepares the data (a lock file in --out), the
others wait and verify; every node trains on its own shard; one model is written.

Two "nodes" on this machine: two torchrun agents (--nnodes 2, --node-rank 0 and 1, one process
each, --master-addr 127.0.0.1), gloo on the CPU, one shared --out.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from test_train import overrides, write_copy_corpus

from seq2seq.config.loading import dump_config, load_config
from seq2seq.core.files import exclusive
from seq2seq.model.directory import load_model_dir

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = Path(sys.executable).with_name("torchrun")

RUNNER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from seq2seq.data import datamodule
    from seq2seq.train import module as system
    from seq2seq.config.loading import load_config
    from seq2seq.train.trainer import train

    out = Path(sys.argv[1])
    real_batch = system.TranslationModule.on_train_batch_start
    real_prepare = datamodule.TranslationDataModule._prepare

    def record(self, batch, batch_idx):
        with open(out.parent / f"seen.rank{self.trainer.global_rank}", "a") as f:
            f.write(json.dumps([self.trainer.current_epoch, batch.index.tolist()]) + "\\n")
        return real_batch(self, batch, batch_idx)

    def prepare(self):
        with open(out.parent / "prepare.log", "a") as f:  # who prepared, in which order
            f.write(f"node {self.trainer.node_rank} start\\n")
        real_prepare(self)
        with open(out.parent / "prepare.log", "a") as f:
            f.write(f"node {self.trainer.node_rank} end\\n")

    system.TranslationModule.on_train_batch_start = record
    datamodule.TranslationDataModule._prepare = prepare
    train(load_config(sys.argv[2]), out, progress=False)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN.is_file(), reason="torchrun not installed")
def test_two_nodes_share_one_out_one_prepare_disjoint_shards_one_model(tmp_path):
    data = write_copy_corpus(tmp_path / "data")
    cfg = load_config(
        None,
        overrides(data, max_steps=6, val_every_steps=3, devices="1", strategy="ddp", num_nodes=2),
    )
    cfg_file = tmp_path / "cfg.yaml"
    dump_config(cfg, cfg_file)
    script = tmp_path / "runner.py"
    script.write_text(RUNNER, encoding="utf-8")
    port = str(_free_port())
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    env.pop("SEQ2SEQ_DEBUG", None)
    nodes = [
        subprocess.Popen(
            [str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank)]
            + ["--master-addr", "127.0.0.1", "--master-port", port]
            + [str(script), str(tmp_path / "run"), str(cfg_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for rank in (0, 1)
    ]
    results = [node.communicate(timeout=600) for node in nodes]
    for node, (_, err) in zip(nodes, results):
        assert node.returncode == 0, err[-3000:]
    stderr = results[0][1] + results[1][1]
    # each node's local rank 0 ran prepare_data, one after the other (the lock) ...
    log = (tmp_path / "prepare.log").read_text().splitlines()
    assert len(log) == 4 and log[0].endswith("start") and log[1].endswith("end"), log
    assert log[0].split()[1] == log[1].split()[1] != log[2].split()[1], log
    # ... and only the first built anything: one SentencePiece model, one report per store
    assert stderr.count("train: kept ") == 1, stderr[-3000:]
    seen = []
    for rank in (0, 1):
        rows = [
            json.loads(line) for line in (tmp_path / f"seen.rank{rank}").read_text().splitlines()
        ]
        assert len(rows) == 6
        seen.append({i for epoch, idx in rows if epoch == 0 for i in idx})
    assert seen[0] and seen[1] and not seen[0] & seen[1]  # disjoint shards
    loaded = load_model_dir(tmp_path / "run")  # one model, written once
    assert loaded.cfg.training.num_nodes == 2
    assert sorted(p.name for p in (tmp_path / "run").glob("model*.safetensors")) == [
        "model.safetensors"
    ]


def test_exclusive_makes_the_second_holder_wait(tmp_path):
    lock = tmp_path / "x.lock"
    order = []
    with exclusive(lock) as waited:
        assert not waited

        def second():
            with exclusive(lock, waiting="waiting") as w:
                order.append(("second", w))

        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert t.is_alive()  # blocked while the first holds the lock
        order.append(("first done", None))
    t.join(10)
    assert order == [("first done", None), ("second", True)]
