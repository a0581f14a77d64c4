"""Experiment configuration: frozen dataclasses that a YAML file mirrors one to one.

Defaults live only here, and so do the checks of each section's values (``validate``);
reading YAML and ``key.sub=value`` overrides is :mod:`seq2seq.config.loading`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from seq2seq.config.checks import (
    BEAM_LIMIT,
    INT_LIMIT,
    LANG_CODE_RE,
    SEED_LIMIT,
    SIZE_LIMITS,
    at_least,
    at_most,
    check_float,
    check_integer,
    choice,
    fraction,
    positive,
    split_pair,
)
from seq2seq.config.errors import InvalidValue
from seq2seq.core import UserError

__all__ = [
    "ACCELERATORS",
    "BEAM_LIMIT",
    "DataConfig",
    "DecodingConfig",
    "ExperimentConfig",
    "ExportConfig",
    "INT_LIMIT",
    "LANG_CODE_RE",
    "METHODS",
    "ModelConfig",
    "SEED_LIMIT",
    "SIZE_LIMITS",
    "TrainingConfig",
    "split_pair",
]


ACTIVATIONS = ("relu", "gelu", "swish")
POSITIONS = ("sinusoidal", "sinusoidal_marian", "learned")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
_MAX_TIME_RE = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how it becomes batches of ids."""

    corpus: str = "multi30k"
    """Registered corpus name (``seq2seq prepare --list`` shows them) or ``files``."""
    pair: str = "en-de"
    """``src-tgt`` language pair, e.g. ``en-de`` (a bilingual model; unused with ``pairs``)."""
    pairs: str | tuple[str, ...] = ()
    """The directions of one multilingual model: a list of ``src-tgt`` pairs
    (``[en-de, de-en, en-fr]``), or ``all`` for every direction among ``languages``. Empty: a
    bilingual model of ``pair``. A multilingual model puts a target-language tag (``<2fr>``,
    :mod:`seq2seq.data.tags`) before each source sentence (docs/multilingual.md)."""
    languages: tuple[str, ...] = ()
    """With ``pairs: all``: the languages, every ordered pair of which is a direction."""
    sampling_temperature: float = 1.0
    """Multilingual training: direction i is sampled with probability proportional to
    ``(n_i / N) ** (1 / T)`` (fairseq's multilingual task): 1 keeps the data's proportions,
    larger values flatten them towards uniform (seq2seq/data/directions.py)."""
    variant: str = "raw"
    """Corpus variant: ``raw`` (cased, untokenized), ``tok`` (Multi30K lowercased tokenized),
    ``fairseq`` (IWSLT14 as fairseq's prepare-iwslt14.sh writes it), ``norm`` (WMT14 training text
    punctuation-normalized as prepare-wmt14en2de.sh); ``seq2seq prepare --list`` shows each
    corpus' variants."""
    train_split: str = "train"
    valid_split: str = "val"
    test_splits: tuple[str, ...] = ("test_2016_flickr",)
    train_prefix: str | None = None
    """With ``corpus: files``: the training text. Either a prefix of two line-aligned files named
    by the pair's language codes (``data/train`` -> ``data/train.en`` + ``data/train.de`` for
    ``pair: en-de``), or one tab-separated file with a sentence pair a line (``data/train.tsv``;
    columns from ``tsv_columns``)."""
    valid_prefix: str | None = None
    """With ``corpus: files``: the validation text, as ``train_prefix``. ``test_splits`` are
    prefixes (or TSV files) of the same kind."""
    tsv_columns: tuple[int, int] = (0, 1)
    """0-based columns of the source and target sentence in tab-separated pair files (Tatoeba's
    ``id, text, id, text`` exports: ``[1, 3]``)."""
    spm_model: str | None = None
    """Reuse this SentencePiece model (a ``spm.model`` file, or a directory with ``spm.model`` or
    ``spm.src.model`` + ``spm.tgt.model``) instead of training one; ``vocab_size`` and
    ``spm_type`` are then not used."""
    dedup: str = "none"
    """Cleaning: ``pairs`` drops exact duplicate training pairs, ``sources`` drops pairs whose
    source was seen before, ``none`` keeps them (see seq2seq/data/cleaning.py)."""
    langid: bool = False
    """Cleaning: drop training pairs whose sides py3langid assigns to other languages than
    ``pair`` names (needs the ``langid`` extra)."""
    max_train_pairs: int = 0
    """Use only the first N training pairs (0 = all); for quick experiments and tests."""
    max_valid_pairs: int = 0
    """Use only the first N validation pairs (0 = all)."""
    spm_type: str = "bpe"
    """SentencePiece model type: ``bpe`` or ``unigram``."""
    vocab_size: int = 8000
    joint_vocab: bool = True
    """One SentencePiece model over both sides (needed for shared embeddings)."""
    character_coverage: float = 1.0
    spm_max_sentences: int = 2_000_000
    """Sentences sampled to train SentencePiece (enough for any vocabulary we use)."""
    max_len: int = 256
    """Training pairs with more pieces than this on either side are dropped; at most
    ``model.max_positions - 1`` (checked when training starts)."""
    max_ratio: float = 3.0
    """Training pairs whose token-length ratio exceeds this are dropped."""
    max_tokens: int = 4096
    """Tokens per batch, padding included (source or target, whichever is longer)."""
    bucket_width: int = 1
    """Length bucket granularity in tokens; sentences in one bucket have similar lengths."""
    num_workers: int = 0

    @property
    def multilingual(self) -> bool:
        """Whether this is a multilingual (tagged) model: ``pairs`` is given."""
        return bool(self.pairs)

    @property
    def directions(self) -> tuple[tuple[str, str], ...]:
        """The ``(source, target)`` language directions the data describes, lowercased.

        A bilingual config has one, from ``pair``; a multilingual one those ``pairs`` lists
        (or, with ``pairs: all``, every ordered pair of ``languages``, in their order).
        Everything that asks which directions a model translates (the server's ``/languages``,
        direction checks, the data module, per-direction validation) reads this.
        """
        if self.pairs == "all":
            langs = [lang.lower() for lang in self.languages]
            return tuple((a, b) for a in langs for b in langs if a != b)
        named = (self.pairs,) if isinstance(self.pairs, str) else self.pairs
        found = []
        for pair in named or (self.pair,):
            src, sep, tgt = pair.partition("-")
            if not sep or not src or not tgt:
                return ()
            found.append((src.strip().lower(), tgt.strip().lower()))
        return tuple(found)

    def _validate_directions(self, prefix: str) -> None:
        positive(prefix, self, "sampling_temperature")
        if self.pairs == ():
            if self.languages:
                raise InvalidValue(prefix + "languages", "is used only with data.pairs: all")
            split_pair(self.pair, prefix + "pair")
            return
        if isinstance(self.pairs, str) and self.pairs != "all":
            raise InvalidValue(
                prefix + "pairs", f"is {self.pairs!r}; expected all or a list of src-tgt pairs"
            )
        if self.pairs == "all" and len(set(self.languages)) < 2:
            raise InvalidValue(
                prefix + "languages",
                f"must name at least two languages for pairs: all, got {list(self.languages)}",
            )
        if self.corpus == "files":
            raise InvalidValue(prefix + "pairs", "needs a registered corpus, not corpus: files")
        if self.langid:
            raise InvalidValue(prefix + "langid", "cleans bilingual data only (data.pair)")
        seen = set()
        for item in () if self.pairs == "all" else self.pairs:
            split_pair(item, prefix + "pairs")
            if item.lower() in seen:
                raise InvalidValue(prefix + "pairs", f"lists {item!r} twice")
            seen.add(item.lower())

    def validate(self, prefix: str = "data.") -> None:
        """Refuse values that cannot work, naming the key (:class:`InvalidValue`)."""
        choice(prefix, "spm_type", self.spm_type, ("bpe", "unigram"))
        self._validate_directions(prefix)
        choice(prefix, "dedup", self.dedup, ("none", "pairs", "sources"))
        at_least(prefix, self, 8, "vocab_size")
        at_most(prefix, self, {"vocab_size": SIZE_LIMITS["vocab_size"]})
        at_least(prefix, self, 1, "spm_max_sentences", "max_len", "max_tokens", "bucket_width")
        at_least(prefix, self, 0, "num_workers", "max_train_pairs", "max_valid_pairs")
        positive(prefix, self, "max_ratio")
        if not 0.0 < self.character_coverage <= 1.0:
            raise InvalidValue(
                prefix + "character_coverage", f"must be in (0, 1], got {self.character_coverage}"
            )
        if min(self.tsv_columns) < 0 or self.tsv_columns[0] == self.tsv_columns[1]:
            raise InvalidValue(
                prefix + "tsv_columns",
                f"must be two different 0-based columns, got {list(self.tsv_columns)}",
            )


@dataclass(frozen=True)
class ModelConfig:
    """Transformer shape and options (names follow torch.nn.Transformer)."""

    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    """Feed-forward activation: ``relu``, ``gelu`` or ``swish`` (SiLU, x * sigmoid(x), as
    OPUS-MT's Marian models use)."""
    norm_first: bool = True
    """Pre-norm (True) or post-norm (False, the original Transformer)."""
    positions: str = "sinusoidal"
    """Position encoding: ``sinusoidal`` (tensor2tensor's frequencies), ``sinusoidal_marian``
    (Marian's: frequencies 10000 ** (-2i / d_model), sines in the first half, cosines in the
    second) or ``learned``."""
    max_positions: int = 1024
    position_offset: int = 0
    """The sinusoidal table's row that position 0 reads: position p reads row p + offset.
    M2M100 and NLLB-200 models read row p + 2 (their ``padding_idx + 1``)."""
    share_embeddings: bool = True
    """Share source and target token embeddings (needs a joint vocabulary)."""
    tie_output: bool = True
    """Tie the output projection to the target embedding."""
    scale_embeddings: bool = True
    """Multiply token embeddings by sqrt(d_model) before adding the positions."""
    final_logits_bias: bool = False
    """Add a fixed (not trained) bias vector to the output logits, as Marian models have; a
    converted OPUS-MT model also uses it to keep the start token out of the softmax."""
    start_is_eos: bool = False
    """The decoder's start id (``<s>``) reads the ``</s>`` row of the target embedding, as
    M2M100 and NLLB-200 decoders start from ``</s>`` (fairseq's, transformers'
    ``decoder_start_token_id``); the ``<s>`` row is then unused, and its output logit is fixed
    at :data:`seq2seq.model.marian.START_BIAS`, so it takes no gradient and is never generated.
    ``seq2seq convert m2m100`` sets it, so a fine-tuned model keeps one row for both, as the
    original has."""
    decoder_mask: str = "causal"
    """Decoder self-attention mask: ``causal``, ``window`` or ``block``."""
    window: int = 16
    """With ``decoder_mask: window``: each query sees this many most recent keys (itself
    included)."""
    block_size: int = 8
    """With ``decoder_mask: block``: block length."""
    prev_blocks: int = 1
    """With ``decoder_mask: block``: how many earlier blocks a query may also see."""

    def validate(self, prefix: str = "model.") -> None:
        """Refuse a shape or option that cannot build a model, naming the key."""
        at_least(prefix, self, 1, "d_model", "n_heads", "d_ff")
        at_least(prefix, self, 1, "n_encoder_layers", "n_decoder_layers")
        if self.d_model % self.n_heads:
            raise InvalidValue(
                prefix + "n_heads",
                f"must divide {prefix}d_model ({self.d_model}), got {self.n_heads}",
            )
        fraction(prefix, self, "dropout", "attention_dropout", "activation_dropout")
        choice(prefix, "activation", self.activation, ACTIVATIONS)
        choice(prefix, "positions", self.positions, POSITIONS)
        choice(prefix, "decoder_mask", self.decoder_mask, ("causal", "window", "block"))
        at_least(prefix, self, 2, "max_positions")
        at_least(prefix, self, 0, "position_offset")
        if self.position_offset and self.positions == "learned":
            raise InvalidValue(
                prefix + "position_offset", "applies to a sinusoidal table, not learned positions"
            )
        at_least(prefix, self, 1, "window", "block_size")
        at_least(prefix, self, 0, "prev_blocks")
        at_most(prefix, self, {k: v for k, v in SIZE_LIMITS.items() if k != "vocab_size"})


@dataclass(frozen=True)
class TrainingConfig:
    """Optimisation, schedule, validation and checkpointing."""

    seed: int = 1
    lr: float = 5e-4
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: str = "inverse_sqrt"
    """``inverse_sqrt`` (linear warmup to ``lr``, then lr*sqrt(warmup/step)), ``noam``,
    ``constant``, or ``linear`` / ``cosine`` (warmup, then decay to ``min_lr`` at ``max_steps``)."""
    warmup_steps: int = 4000
    min_lr: float = 0.0
    """Where the ``linear`` and ``cosine`` schedules end, at ``max_steps``."""
    label_smoothing: float = 0.1
    rdrop_alpha: float = 0.0
    """R-Drop (Liang et al., 2021): each batch runs through the model twice (two dropout
    masks) and the loss adds ``rdrop_alpha`` times the symmetric KL divergence between the two
    passes' token distributions (0 = off; seq2seq/model/loss.py, ``rdrop_loss``). Doubles the
    cost of an update. The KL is summed over the target tokens, like the cross-entropy, and
    the update's gradient is divided by its token count: the papers' "token-summed KL"."""
    rdrop_cutoff: float = 0.0
    """SimCut (Wu et al., 2022): in the second of the two passes, each input token's embedding
    (source and target) is zeroed with this probability (seq2seq/model/cutoff.py), so the KL
    term pulls a clean and a cut pass together. 0 = both passes differ by dropout only (R-Drop).
    Any value > 0 runs the two passes, even with ``rdrop_alpha`` 0 (then cutoff is data
    augmentation: the loss is the mean of the two passes' cross-entropies)."""
    rdrop_start: int = 0
    """The update at which the two passes (``rdrop_alpha``, ``rdrop_cutoff``) begin; before it
    each batch runs once, at one pass's cost (0 = from the first update). A late start spends
    the dearer updates where the model is near its plateau."""
    clip_norm: float = 0.0
    """Gradient clipping by global norm (0 = off)."""
    accumulate: int = 1
    """Gradient accumulation: batches per optimizer step."""
    precision: str = "32"
    """Lightning precision: ``32``, ``bf16-mixed`` or ``16-mixed``; ``auto``: ``bf16-mixed``
    where the CPU has bf16 instructions and a probe measures it faster, else ``32``
    (machine- and load-dependent); ``bf16-native``: ``bf16-mixed`` wherever the hardware has
    bf16, by its flags alone (seq2seq/train/precision.py)."""
    max_steps: int = 10_000
    max_epochs: int = -1
    max_time: str | None = None
    """Wall-clock limit ``DD:HH:MM:SS`` (None = unlimited)."""
    expected_step_s: float = 0.0
    """Seconds per update (validation included) on the machine the config was sized on (0 = not
    given): the expected training time is printed at start, and a run much slower than that is
    warned about once (seq2seq/train/pace_watch.py)."""
    expected_machine: str = ""
    """That machine, in words, printed with the estimate."""
    val_every_steps: int = 1000
    save_every_steps: int = 0
    """Periodic checkpoint every N optimizer steps (0 = every ``val_every_steps``)."""
    val_metric: str = "bleu"
    """Metric used for the best checkpoint and early stopping: ``bleu``, ``chrf`` or ``loss``."""
    val_method: str = "greedy"
    """Decoding during validation: ``greedy`` or ``beam`` (uses decoding.beam_size)."""
    val_samples: int = 3
    """Sample translations printed at each validation."""
    patience: int = 0
    """Early stopping after this many validations without improvement (0 = off)."""
    keep_last: int = 5
    """Periodic checkpoints kept for averaging."""
    average_last: int = 5
    """Checkpoints averaged into the exported model (1 = use the best checkpoint); only those
    from the second half of the run count (see
    ``seq2seq.train.checkpoints.checkpoints_to_average``)."""
    tune_len_penalty: tuple[float, ...] = ()
    """Length penalties a recipe tries on the validation set after averaging (empty = keep
    ``decoding.len_penalty``): it decodes the validation split once per value and writes the
    best (by BLEU) into the averaged model's ``decoding.len_penalty``, which evaluation, export
    and serving then use (seq2seq/cli/recipe.py)."""
    log_every_steps: int = 50
    max_nonfinite: int = 10
    """Consecutive non-finite losses tolerated (each skips its update) before the run stops."""
    deterministic: bool = False
    accelerator: str = "auto"
    devices: str = "auto"
    num_nodes: int = 1
    strategy: str = "auto"
    threads: int = 0
    """torch intra-op threads (0 = leave torch's default)."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    keep_freed_memory: bool = True
    """On the CPU, keep freed memory in the process for the next step instead of returning
    it to the system (glibc's malloc; seq2seq/core/memory.py): fewer page faults, same results."""
    init_from: str | None = None
    """Fine-tune: start from this model directory's weights, SentencePiece model(s) and model
    shape (``seq2seq train --init-from DIR``; see seq2seq/train/finetune.py). The optimizer and the
    schedule start fresh."""

    @property
    def two_passes(self) -> bool:
        """Whether training batches run through the model twice (R-Drop or SimCut), from
        update ``rdrop_start`` on."""
        return self.rdrop_alpha > 0 or self.rdrop_cutoff > 0

    def validate(self, prefix: str = "training.") -> None:
        """Refuse values Lightning would reject late (accelerator, devices, max_time), naming
        the key. The rest of the training section is checked by
        :func:`seq2seq.train.module.check_training_config` before a run starts."""
        choice(prefix, "accelerator", self.accelerator, ACCELERATORS)
        devices = self.devices.strip()
        parts = devices.split(",") if "," in devices else [devices]
        ok = devices == "auto" or all(p.strip().lstrip("-").isdigit() for p in parts)
        if ok and devices != "auto":
            numbers = [int(p) for p in parts]
            ok = numbers == [-1] or (len(numbers) == 1 and numbers[0] >= 1)
            ok = ok or (
                len(numbers) > 1 and min(numbers) >= 0 and len(set(numbers)) == len(numbers)
            )
        if not ok:
            raise InvalidValue(
                prefix + "devices",
                f"is {self.devices!r}; expected auto, a count (1, 2, ...), -1 (all) or "
                "device indices (0,1)",
            )
        if self.max_time is not None:
            m = _MAX_TIME_RE.fullmatch(self.max_time.strip())
            if not m or not any(int(g) for g in m.groups()):
                raise InvalidValue(
                    prefix + "max_time",
                    f"is {self.max_time!r}; expected a duration DD:HH:MM:SS such as 00:12:00:00",
                )
        at_least(prefix, self, 1, "num_nodes")
        positive(prefix, self, "eps")
        at_least(prefix, self, 0, "weight_decay", "clip_norm", "rdrop_alpha", "rdrop_start")
        fraction(prefix, self, "rdrop_cutoff")
        for value in self.tune_len_penalty:
            DecodingConfig.check_value("len_penalty", value, prefix=prefix + "tune_len_penalty: ")
        for i, beta in enumerate(self.betas):
            if not 0.0 <= beta < 1.0:
                raise InvalidValue(
                    prefix + "betas",
                    f"must be two numbers in [0, 1), got {list(self.betas)} (item {i + 1})",
                )


METHODS = ("beam", "greedy", "sample")
"""The search methods (seq2seq.decode.beam, greedy, sampling)."""

# Each numeric decoding field: ("int", lowest, highest) or ("float", rule).
_DECODING_NUMBERS: dict[str, tuple] = {
    "beam_size": ("int", 1, BEAM_LIMIT),
    "nbest": ("int", 1, BEAM_LIMIT),
    "min_len": ("int", 0, INT_LIMIT),
    "max_len_b": ("int", 0, INT_LIMIT),
    "no_repeat_ngram": ("int", 0, INT_LIMIT),
    "top_k": ("int", 0, INT_LIMIT),
    "seed": ("int", 0, SEED_LIMIT - 1),
    "max_tokens": ("int", 1, INT_LIMIT),
    "len_penalty": ("float", "finite"),
    "max_len_a": ("float", "length"),
    "unk_penalty": ("float", "penalty"),
    "temperature": ("float", "positive"),
    "top_p": ("float", "fraction"),
}


@dataclass(frozen=True)
class DecodingConfig:
    """Search options (fairseq-compatible beam scoring; see seq2seq/decode/beam.py)."""

    method: str = "beam"
    """``beam``, ``greedy`` or ``sample``."""
    beam_size: int = 5
    nbest: int = 1
    len_penalty: float = 1.0
    min_len: int = 1
    max_len_a: float = 1.2
    max_len_b: int = 10
    no_repeat_ngram: int = 0
    unk_penalty: float = 0.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    """Sampling seed, in ``[0, 2**64)`` (the ctranslate2 engine takes seeds below ``2**32``)."""
    max_tokens: int = 4096
    """Source tokens per translation batch."""

    @staticmethod
    def check_value(key: str, value: Any, prefix: str = "") -> None:
        """Refuse one search or batching option's value, alone: the per-value half of
        :meth:`validate`, for callers that take a single option (``seq2seq score``'s
        ``len_penalty`` and ``max_tokens``, the command line before a model loads).

        Integers must be ints (not bools) in their range (beam and n-best up to
        :data:`BEAM_LIMIT`, other counts up to :data:`INT_LIMIT`, seeds in ``[0, 2**64)``); floats must be numbers (not bools), finite (``unk_penalty``
        may be +inf) and in their range.

        Args:
            key: the field of :class:`DecodingConfig`.
            value: its value.
            prefix: put before ``key`` in the message (``decoding.`` in a config).

        Raises:
            InvalidValue: the value, naming ``prefix + key``.
            KeyError: ``key`` is not a numeric decoding option (a caller's bug).
        """
        kind, *rule = _DECODING_NUMBERS[key]
        if kind == "int":
            check_integer(prefix + key, value, *rule)
        else:
            check_float(prefix + key, value, *rule)

    def validate(self, prefix: str = "decoding.", *, search: bool = False) -> None:
        """Refuse search values that cannot work or would give garbage (a negative length
        limit turns every translation into an empty line), naming the key.

        The one check of the search and batching options: config loading, the search options
        of the Python API, the command line and the server
        (:class:`seq2seq.decode.options.SearchOptions`, a subclass) and the search functions
        themselves all call it. Each value is checked by :meth:`check_value`.

        Args:
            prefix: put before each key in the messages: ``decoding.`` for the config's
                section, ``""`` for search options (given in code or on the command line).
            search: the values are what a search runs with: also refuse the combinations no
                search can do (``nbest`` above the beam size, or above 1 with greedy). A
                config's section holds defaults the command line may still change, so those
                are checked only once the options are complete.

        Raises:
            UserError: an unknown method (search options); :class:`InvalidValue` naming the
                key for any other value.
        """
        if search and self.method not in METHODS:
            raise UserError(
                f"unknown decoding method {self.method!r}; expected one of {', '.join(METHODS)}"
            )
        if not isinstance(self.method, str):
            raise InvalidValue(prefix + "method", f"must be a string, got {self.method!r}")
        choice(prefix, "method", self.method, METHODS)
        for key in _DECODING_NUMBERS:
            self.check_value(key, getattr(self, key), prefix)
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise InvalidValue(
                prefix + "max_len_b",
                f"and {prefix}max_len_a are both 0: every translation would be empty",
            )
        if not search:
            return
        if self.method == "greedy" and self.nbest > 1:
            raise UserError(f"nbest {self.nbest} needs beam search or sampling, not greedy")
        if self.method == "beam" and not self.nbest <= self.beam_size:
            raise UserError(
                f"nbest ({self.nbest}) must be between 1 and the beam size ({self.beam_size})"
            )


@dataclass(frozen=True)
class ExportConfig:
    """Export defaults for ``seq2seq export``."""

    format: str = "ctranslate2"
    quantization: str = "none"
    """CTranslate2 quantization: ``none``, ``int8``, ``int8_float32`` or ``float16``."""
    opset: int = 17

    def validate(self, prefix: str = "export.") -> None:
        """Refuse an unknown format or quantization, naming the key."""
        choice(prefix, "format", self.format, ("ctranslate2", "onnx"))
        choice(
            prefix, "quantization", self.quantization, ("none", "int8", "int8_float32", "float16")
        )
        at_least(prefix, self, 7, "opset")


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole experiment: the YAML file's top-level sections."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    export: ExportConfig = field(default_factory=ExportConfig)

    def validate(self) -> None:
        """Validate every section (:class:`InvalidValue` naming the first bad key)."""
        for section in (self.data, self.model, self.training, self.decoding, self.export):
            section.validate()

    def validate_training(self) -> None:
        """The rule across sections that a config must pass to train (not to load a model).

        A pair of ``data.max_len`` pieces takes ``data.max_len + 1`` positions (the source
        with its EOS, the target input with its BOS), which must fit ``model.max_positions``:
        a longer pair would overflow the position table in the middle of the run. A trained
        model's config is not held to it, so model directories written before it still load.

        Raises:
            InvalidValue: ``data.max_len`` too large for ``model.max_positions``.
        """
        fits = self.model.max_positions - 1
        if self.data.max_len > fits:
            raise InvalidValue(
                "data.max_len",
                f"is {self.data.max_len}, but model.max_positions {self.model.max_positions} "
                f"holds at most {fits} pieces plus BOS or EOS: set data.max_len to {fits} or "
                "less, or raise model.max_positions",
            )
