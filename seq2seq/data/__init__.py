"""Data: the corpus registry, its downloads and preparation, cleaning, SentencePiece, language
tags and multilingual directions, parallel text, the binarized token store, token-bucket batching
and the LightningDataModule.

The public names below are imported on first use (docs/design.md, "Layers").
"""

from __future__ import annotations

from seq2seq.core.exports import lazy_exports

_HOMES = {
    "BOS_ID": "tokenizer",
    "EOS_ID": "tokenizer",
    "PAD_ID": "tokenizer",
    "SPECIAL_PIECES": "tokenizer",
    "SRC_MODEL": "tokenizer",
    "TGT_MODEL": "tokenizer",
    "TARGET_VOCAB_FILE": "vocab_map",
    "VOCAB_FILE": "vocab_map",
    "VocabMapTokenizer": "vocab_map",
    "LANGUAGES_FILE": "lang_tokens",
    "LanguageTokenizer": "lang_tokens",
    "model_languages": "lang_tokens",
    "libre_code": "lang_codes",
    "resolve_language": "lang_codes",
    "M2M100_SPM": "lang_tokens",
    "M2M100_VOCAB": "lang_tokens",
    "NLLB_TOKENIZER": "lang_tokens",
    "language_files": "lang_tokens",
    "our_id": "lang_tokens",
    "read_languages": "lang_tokens",
    "Detection": "language_id",
    "LanguageIdentifier": "language_id",
    "Tokenizer": "tokenizer",
    "TranslationDataModule": "datamodule",
    "UNK_ID": "tokenizer",
    "MosesSplitter": "sentence_split",
    "get_corpus": "registry",
    "moses_splitter": "sentence_split",
    "list_corpora": "registry",
    "prepare_corpus": "prepare",
    "resolve_direction": "tags",
    "tag_for": "tags",
    "tag_source": "tags",
    "read_vocab_map": "vocab_map",
}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(__name__, _HOMES)
