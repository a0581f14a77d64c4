"""Config: YAML <-> frozen dataclasses, overrides, and every user error with its message."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from seq2seq.config.errors import ConfigError
from seq2seq.config.loading import (
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
)
from seq2seq.config.schema import ExperimentConfig


def test_defaults_live_in_dataclasses_and_are_frozen():
    cfg = load_config(None)
    assert cfg == ExperimentConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.model.d_model = 3  # type: ignore[misc]


def test_yaml_round_trip(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("model:\n  d_model: 128\n  dropout: 0.3\ndata:\n  test_splits: [a, b]\n")
    cfg = load_config(path)
    assert cfg.model.d_model == 128 and cfg.model.dropout == 0.3
    assert cfg.data.test_splits == ("a", "b")
    assert cfg.model.n_heads == ExperimentConfig().model.n_heads  # untouched default
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    again = load_config(out)
    assert again == cfg
    # every key is written, so the resolved file is self-describing
    assert yaml.safe_load(out.read_text()) == config_to_dict(cfg)


def test_int_accepted_for_float_and_tuple_from_list():
    cfg = config_from_dict({"training": {"lr": 1, "betas": [0.9, 0.99]}})
    assert cfg.training.lr == 1.0 and isinstance(cfg.training.lr, float)
    assert cfg.training.betas == (0.9, 0.99)


def test_overrides_parse_yaml_values():
    cfg = apply_overrides(
        ExperimentConfig(),
        [
            "model.d_model=64",
            "model.norm_first=false",
            "training.max_time=00:01:00:00",
            "data.test_splits=[x]",
            "training.lr=3e-4",
        ],
    )
    assert cfg.model.d_model == 64
    assert cfg.model.norm_first is False
    assert cfg.training.max_time == "00:01:00:00"
    assert cfg.data.test_splits == ("x",)
    assert cfg.training.lr == pytest.approx(3e-4)


def test_unknown_key_in_file_names_key_file_and_suggestion(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("model:\n  dropot: 0.2\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"unknown key model.dropot in {path}; did you mean model.dropout?"


def test_unknown_section_suggests_nearest(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("modle:\n  d_model: 3\n")
    with pytest.raises(ConfigError, match=r"unknown key modle in .*x.yaml; did you mean model\?"):
        load_config(path)


def test_unknown_override_key():
    with pytest.raises(
        ConfigError,
        match=r"unknown key training.lrr in the command line; did you mean training.lr\?",
    ):
        load_config(None, ["training.lrr=0.1"])


def test_unknown_key_without_near_match_has_no_suggestion():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["zzzzzz.qqqq=1"])
    assert "did you mean" not in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model:\n  d_model: big\n", "model.d_model in {path} must be int, got 'big'"),
        ("model:\n  norm_first: 1\n", "model.norm_first in {path} must be bool, got 1"),
        ("model:\n  dropout: [1]\n", "model.dropout in {path} must be float, got [1]"),
        ("training:\n  betas: [0.9]\n", "training.betas in {path} must have 2 items, got 1"),
        ("model: 3\n", "model in {path} must be a mapping, got 3"),
    ],
)
def test_wrong_type_names_key_and_expected_type(tmp_path, text, message):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == message.format(path=path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("model:\n  d_model: 3\n   bad: [\n")
    with pytest.raises(ConfigError, match=r"x.yaml:\d+: "):
        load_config(path)


def test_override_without_equals_sign():
    with pytest.raises(ConfigError, match="must look like key.sub=value"):
        load_config(None, ["model.d_model"])


def test_override_of_a_section_is_an_error():
    with pytest.raises(ConfigError, match="model on the command line is a section"):
        load_config(None, ["model=3"])


def test_scientific_notation_without_dot_is_a_float(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("training:\n  lr: 5e-4\n")
    assert load_config(path).training.lr == pytest.approx(5e-4)


# ---------------------------------------------------------------------------------------------
# Values that cannot work are refused when the config is loaded, naming the key (issue 19)

TINY = ["model.d_model=32", "model.n_heads=2"]


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "model.n_heads=3",
            "model.n_heads in the command line must divide model.d_model (32), got 3",
        ),
        ("model.n_heads=0", "model.n_heads in the command line must be >= 1, got 0"),
        ("model.d_model=0", "model.d_model in the command line must be >= 1, got 0"),
        ("model.d_model=-32", "model.d_model in the command line must be >= 1, got -32"),
        ("model.d_ff=0", "model.d_ff in the command line must be >= 1, got 0"),
        ("model.dropout=1.5", "model.dropout in the command line must be in [0, 1), got 1.5"),
        (
            "model.attention_dropout=-0.1",
            "model.attention_dropout in the command line must be in [0, 1)",
        ),
        ("model.max_positions=0", "model.max_positions in the command line must be >= 2, got 0"),
        (
            "model.decoder_mask=diagonal",
            "model.decoder_mask in the command line is 'diagonal'; expected one of causal, window, block",
        ),
        (
            "model.activation=tanh",
            "model.activation in the command line is 'tanh'; expected one of relu, gelu, swish",
        ),
        (
            "model.positions=rotary",
            "model.positions in the command line is 'rotary'; expected one of sinusoidal, "
            "sinusoidal_marian, learned",
        ),
        (
            "training.accelerator=tpuu",
            "training.accelerator in the command line is 'tpuu'; expected one of auto, cpu, gpu, cuda, mps, tpu",
        ),
        ("training.devices=abc", "training.devices in the command line is 'abc'; expected auto"),
        ("training.devices=0", "training.devices in the command line is '0'"),
        (
            "training.max_time=soon",
            "training.max_time in the command line is 'soon'; expected a duration DD:HH:MM:SS",
        ),
        ("training.max_time=00:00:00:00", "training.max_time in the command line is '00:00:00:00'"),
        ("training.num_nodes=0", "training.num_nodes in the command line must be >= 1, got 0"),
        ("data.vocab_size=3", "data.vocab_size in the command line must be >= 8, got 3"),
        (
            "data.spm_type=word",
            "data.spm_type in the command line is 'word'; expected one of bpe, unigram",
        ),
        ("data.max_tokens=0", "data.max_tokens in the command line must be >= 1, got 0"),
        (
            "decoding.max_len_b=-100",
            "decoding.max_len_b in the command line must be >= 0, got -100",
        ),
        ("decoding.max_len_a=-5", "decoding.max_len_a in the command line must be >= 0, got -5.0"),
        ("decoding.top_p=0", "decoding.top_p in the command line must be in (0, 1], got 0.0"),
        ("decoding.method=viterbi", "decoding.method in the command line is 'viterbi'"),
        ("export.quantization=int4", "export.quantization in the command line is 'int4'"),
        # sizes nothing could allocate, and a beam the search would allocate rows for (issue 44)
        (
            "model.max_positions=1000000000",
            "model.max_positions in the command line must be <= 65,536, got 1,000,000,000",
        ),
        ("model.d_ff=10**9", "model.d_ff in the command line must be int"),
        ("model.d_ff=1000000000", "model.d_ff in the command line must be <= 262,144"),
        ("model.n_decoder_layers=5000", "model.n_decoder_layers in the command line must be <="),
        ("data.vocab_size=100000000", "data.vocab_size in the command line must be <= 2,097,152"),
        ("decoding.beam_size=1000000000", "decoding.beam_size in the command line must be <= 256"),
        ("decoding.nbest=257", "decoding.nbest in the command line must be <= 256, got 257"),
        # the one check of a language pair
        ("data.pair=en", "data.pair in the command line is 'en'; expected src-tgt"),
        ("data.pair=en-de-fr", "data.pair in the command line is 'en-de-fr'; expected src-tgt"),
        ("data.pair=../x-y", "data.pair in the command line is '../x-y'; expected src-tgt"),
        ("data.pair=en-EN", "data.pair in the command line is 'en-EN'; expected src-tgt"),
        ("data.pairs=[en-de, ../x-y]", "data.pairs in the command line is '../x-y'"),
    ],
)
def test_values_that_cannot_work_are_refused_at_load_naming_the_key(override, expected):
    with pytest.raises(ConfigError) as e:
        load_config(None, [*TINY, override])
    assert str(e.value).startswith(expected), str(e.value)


@pytest.mark.parametrize("pair", ["en-de", "src-tgt", "pt_BR-en", "eng_Latn-fra_Latn", "DE-en"])
def test_language_pairs_of_codes_pass(pair):
    assert load_config(None, [*TINY, f"data.pair={pair}"]).data.pair == pair


def test_a_bad_value_in_a_file_names_the_file_and_an_override_can_fix_it(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("model:\n  d_model: 32\n  n_heads: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"model.n_heads in {path} must divide model.d_model"):
        load_config(path)
    assert load_config(path, ["model.n_heads=4"]).model.n_heads == 4  # checked after overrides
    assert load_config(path, ["model.d_model=48"]).model.d_model == 48


def test_valid_devices_and_max_time_pass():
    for devices in ("auto", "1", "4", "-1", "0,1", "1,3"):
        load_config(None, [f"training.devices={devices}"])
    load_config(None, ["training.max_time=00:12:30:00"])


def test_a_bad_config_fails_train_before_any_work(tmp_path, capsys):
    from seq2seq.cli import main

    out = tmp_path / "run"
    args = ["train", "--config", "configs/multi30k_tiny.yaml", "--out", str(out)]
    assert main([*args, "model.n_heads=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seq2seq train: error: model.n_heads in the command line must divide")
    assert len(err.splitlines()) == 1 and not out.exists()


# ---------------------------------------------------------------------------------------------
# Duplicate YAML keys


def test_a_duplicate_section_is_an_error_naming_the_file_and_both_lines(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text(
        "model:\n  d_model: 32\n  n_heads: 2\ntraining:\n  lr: 0.001\nmodel:\n  dropout: 0.2\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (
        f"{path}:6: duplicate key model (first given at line 1); give each key once"
    )


def test_a_duplicate_key_inside_a_section_is_an_error(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("training:\n  lr: 0.001\n  warmup_steps: 10\n  lr: 0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"x.yaml:4: duplicate key lr \(first given at line 2\)"):
        load_config(path)


def test_yaml_merge_keys_are_not_duplicates(tmp_path):
    from seq2seq.config.loading import read_yaml

    path = tmp_path / "x.yaml"
    path.write_text(
        "base: &b\n  d_model: 32\n  n_heads: 4\nmodel:\n  <<: *b\n  n_heads: 2\n", encoding="utf-8"
    )
    assert read_yaml(path)["model"] == {"d_model": 32, "n_heads": 2}  # an override, as YAML says


def test_resume_check_reads_options_added_since_as_their_defaults():
    # A checkpoint written before an option existed lacks its key; the option's default is what
    # that run did, so resuming it is no change (and a real change is still one).
    from seq2seq.config import ExperimentConfig, config_to_dict
    from seq2seq.config.loading import model_data_changes

    old = config_to_dict(ExperimentConfig())
    del old["model"]["final_logits_bias"], old["model"]["scale_embeddings"]
    assert model_data_changes(old, ExperimentConfig()) == []
    changed = dataclasses.replace(
        ExperimentConfig(),
        model=dataclasses.replace(ExperimentConfig().model, scale_embeddings=False),
    )
    assert model_data_changes(old, changed) == ["model.scale_embeddings (True -> False)"]
