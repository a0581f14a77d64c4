"""Validation of a training run: the loss, and BLEU / chrF with sacreBLEU on the detokenized
greedy or beam output of the whole validation set, gathered over all ranks.

:class:`ValidationMixin` holds :class:`~seq2seq.train.module.TranslationModule`'s Lightning
validation hooks; :func:`monitor_mode` says which way the validation metric improves.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from seq2seq.core import printable
from seq2seq.data import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from seq2seq.train.distributed import world_size

__all__ = ["VAL_METHODS", "VAL_METRICS", "ValidationMixin", "monitor_mode"]

VAL_METRICS = ("bleu", "chrf", "loss")
VAL_METHODS = ("greedy", "beam")


def monitor_mode(metric: str) -> str:
    """``max`` for BLEU and chrF, ``min`` for the loss."""
    return "min" if metric == "loss" else "max"


class ValidationMixin:
    """The validation hooks of :class:`~seq2seq.train.module.TranslationModule`.

    They use the module's ``cfg``, ``model``, ``compute_loss`` and ``wall_seconds``, the data
    module's texts (``tokenizer``, ``valid_src_text``, ``valid_ref_text``: without them only
    the loss is validated; ``valid_directions``, when a multilingual run has it, for BLEU per
    direction) and the bookkeeping its ``__init__`` sets up (``_val_sums``,
    ``_val_hyps``, ``_signature_shown``, ``_tick``).
    """

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(3, device=self.device)
        self._val_hyps = {}

    def validation_step(self, batch, batch_idx: int) -> None:
        out = self.compute_loss(batch.src_ids, batch.tgt_ids)
        self._val_sums += torch.stack(
            [out.loss.float(), out.nll.float(), out.loss.new_tensor(float(out.n_tokens))]
        )
        if self.tokenizer is None or self.valid_ref_text is None:
            return
        hyps = self.translate_batch(batch.src_ids)
        for i, text in zip(batch.index.tolist(), hyps):
            self._val_hyps[int(i)] = text

    @torch.no_grad()
    def translate_batch(self, src_ids: Tensor) -> list[str]:
        """Detokenized translations of a (B, S) padded source batch (``training.val_method``).

        Always in float32, as the exported model translates: under Lightning's autocast
        (``cache_enabled=False``, and the engine's inference mode caches no casts either)
        every decoding step would cast every weight to bf16 again.
        """
        with torch.autocast(src_ids.device.type, enabled=False):
            return self._translate_batch(src_ids)

    def _translate_batch(self, src_ids: Tensor) -> list[str]:
        from seq2seq.decode import SearchOptions, TorchEngine

        opts = SearchOptions.from_config(
            self.cfg.decoding, method=self.cfg.training.val_method, nbest=1
        )
        engine = TorchEngine(
            self.model,
            device=src_ids.device,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
        )
        rows = [row[row.ne(PAD_ID)].tolist() for row in src_ids]
        extra = {}
        if hasattr(self.tokenizer, "language_id"):  # M2M100/NLLB: the target language first
            from seq2seq.data import resolve_language
            from seq2seq.decode import Constraints

            tok = self.tokenizer
            code = resolve_language(self.cfg.data.directions[0][1], tok.languages)
            forced = Constraints(prefix=(tok.language_id(code),), counted=1)
            extra["constraints"] = [forced] * len(rows)
        nbest = engine.translate_ids(rows, opts, **extra)
        return self.tokenizer.decode_tgt([hyps[0].tokens for hyps in nbest])

    def _gather_hyps(self) -> dict[int, str]:
        if world_size() == 1:
            return dict(self._val_hyps)
        parts: list[dict[int, str] | None] = [None] * world_size()
        dist.all_gather_object(parts, self._val_hyps)
        merged: dict[int, str] = {}
        for part in parts:
            merged.update(part or {})
        return merged

    def on_validation_epoch_end(self) -> None:
        """Loss over all ranks; BLEU / chrF once over the whole validation set."""
        from seq2seq.evaluate import score_corpus

        sums = self._val_sums if self._val_sums is not None else torch.zeros(3, device=self.device)
        if world_size() > 1:
            sums = sums.clone()
            dist.all_reduce(sums)
        loss_sum, nll_sum, tokens = (float(x) for x in sums.tolist())
        tokens = max(tokens, 1.0)
        self.log("val/loss", loss_sum / tokens, sync_dist=True)
        self.log("val/nll", nll_sum / tokens, sync_dist=True)
        self.log("val/ppl", math.exp(min(nll_sum / tokens, 50.0)), sync_dist=True)
        # minutes of training when this validation ran (for BLEU-against-time curves)
        self.log("val/wall_min", self.wall_seconds() / 60.0, sync_dist=True)
        if self.tokenizer is None or self.valid_ref_text is None:
            return
        hyps = self._gather_hyps()  # every rank gets all of them: same scores everywhere
        if not hyps:
            return
        order = sorted(hyps)
        scores = score_corpus([hyps[i] for i in order], [self.valid_ref_text[i] for i in order])
        per_direction = self._direction_scores(hyps, order)
        if per_direction:  # the mean over directions: the best checkpoint follows it
            for key in ("bleu", "chrf"):
                scores[key] = sum(s[key] for s in per_direction.values()) / len(per_direction)
                for name, s in per_direction.items():
                    self.log(f"val/{key}/{name}", s[key], sync_dist=True)
        self.log("val/bleu", scores["bleu"], sync_dist=True)
        self.log("val/chrf", scores["chrf"], sync_dist=True)
        if self.trainer.sanity_checking:
            return
        if not self._signature_shown:
            self._signature_shown = True
            self.print(f"validation BLEU: {scores['bleu_signature']}")
            self.print(f"validation chrF: {scores['chrf_signature']}")
        lines = [
            f"step {self.global_step}: val loss {loss_sum / tokens:.3f}, BLEU {scores['bleu']:.2f}, "
            f"chrF {scores['chrf']:.2f} ({len(order)} sentences)"
            + (" (means over the directions)" if per_direction else "")
        ]
        if per_direction:
            lines.append(
                "  BLEU per direction: "
                + ", ".join(f"{name} {s['bleu']:.2f}" for name, s in per_direction.items())
            )
        for i in order[: self.cfg.training.val_samples]:  # escaped: no raw control characters
            if self.valid_src_text is not None:
                lines.append(f"  SRC {printable(self.valid_src_text[i])}")
            lines.append(f"  REF {printable(self.valid_ref_text[i])}")
            lines.append(f"  HYP {printable(hyps[i])}")
        self.print("\n".join(lines))

    def _direction_scores(self, hyps: dict[int, str], order: list[int]) -> dict[str, dict]:
        """BLEU and chrF of each direction of a multilingual validation set ({} when bilingual),
        in the order the directions first appear."""
        from seq2seq.evaluate import score_corpus

        if not self.valid_directions:
            return {}
        groups: dict[str, list[int]] = {}
        for i in order:
            groups.setdefault(self.valid_directions[i], []).append(i)
        return {
            name: score_corpus([hyps[i] for i in idx], [self.valid_ref_text[i] for i in idx])
            for name, idx in groups.items()
        }

    def on_validation_end(self) -> None:
        self._tick = None  # tokens/second measures training only
