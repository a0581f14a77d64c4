"""--device and training.accelerator are checked against what this torch can use, up front."""

from __future__ import annotations

import pytest
import torch

from seq2seq.cli import main
from seq2seq.core.devices import check_accelerator, check_device
from seq2seq.core.errors import UserError

NO_CUDA = not torch.cuda.is_available()


def test_cpu_and_auto_always_pass():
    assert check_device("cpu") == "cpu"
    check_accelerator("auto", "auto")
    check_accelerator("cpu", "2")


def test_a_string_torch_cannot_parse_is_refused():
    with pytest.raises(UserError, match=r"--device 'banana' is not a torch device"):
        check_device("banana")


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a GPU")
def test_cuda_on_a_machine_without_it_is_refused():
    with pytest.raises(
        UserError, match=r"--device cuda: no such CUDA device; this machine has cpu"
    ):
        check_device("cuda")
    with pytest.raises(UserError, match="training.accelerator=gpu, but torch finds no GPU"):
        check_accelerator("gpu", "1")


@pytest.mark.skipif(NO_CUDA, reason="needs a GPU")
def test_cuda_device_index_beyond_the_machine_is_refused():
    n = torch.cuda.device_count()
    assert check_device("cuda:0") == "cuda:0"
    with pytest.raises(UserError, match="no such CUDA device"):
        check_device(f"cuda:{n}")
    with pytest.raises(UserError, match=f"asks for {n + 1} GPUs, but torch finds {n}"):
        check_accelerator("gpu", str(n + 1))


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a GPU")
def test_translate_and_train_refuse_cuda_before_any_work(tmp_path, capsys):
    assert main(["translate", str(tmp_path), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seq2seq translate: error: --device cuda: no such CUDA device")
    assert len(err.splitlines()) == 1
    out = tmp_path / "run"
    args = ["train", "--config", "configs/multi30k_tiny.yaml", "--out", str(out)]
    assert main([*args, "training.accelerator=gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seq2seq train: error: training.accelerator=gpu, but torch finds no GPU")
    assert not out.exists()


def test_an_unknown_strategy_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--config", "configs/multi30k_tiny.yaml", "--out", str(out)]
    assert main([*args, "training.strategy=bogus"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "seq2seq train: error: training.strategy is 'bogus'; expected one of auto"
    )
    assert "ddp" in err and not out.exists()
