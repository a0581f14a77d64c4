"""Constrained decoding: forced target prefixes, positive lexical constraints, avoid lists.

Two levels:

- :class:`Constraints`: what one sentence asks for, in target token ids: a ``prefix`` the
  output starts with, ``include`` phrases that must appear (``ordered`` or not) and ``avoid``
  phrases that must never appear. (A termbase, seq2seq.decode.terminology, turns source terms
  found in a source sentence into ``include`` phrases: text level; the Translator encodes them.)
- :class:`ConstraintState`: the same for every hypothesis (row) of a search, as tensors, which
  the searches (seq2seq.decode.beam, greedy, sampling) advance with each chosen token and
  reorder with the beams. The search
  stays model-agnostic: it asks this state which tokens are forced (the prefix), which are
  banned (avoid), whether EOS is allowed (every ``include`` phrase met), which tokens would
  advance a constraint, and how many constraint tokens a candidate would have met (its *bank*,
  for dynamic beam allocation: :func:`allocate`).

Matching is on token ids (SentencePiece pieces), one automaton per phrase (Knuth-Morris-Pratt:
after a mismatch the longest part already matched that can still start the phrase is kept),
so overlapping occurrences are found. Unordered phrases are matched independently: one output
token may count for several phrases ("a b" and "b c" are both met by "a b c"; identical
phrases are one requirement). Ordered phrases are met one after the other, each after the
previous one ended. The number of constraint tokens met (the bank) is the tokens of the
phrases met plus the longest partial match of a phrase not yet met.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.core import UserError

__all__ = [
    "ConstraintState",
    "Constraints",
    "StepRules",
    "allocate",
]


def _phrase(p: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(t) for t in p)


def _contains(seq: Sequence[int], part: Sequence[int]) -> bool:
    n = len(part)
    return any(tuple(seq[i : i + n]) == tuple(part) for i in range(len(seq) - n + 1))


@dataclass(frozen=True)
class Constraints:
    """One sentence's constraints, in target token ids (no BOS/EOS).

    Attributes:
        prefix: the output starts with these tokens (forced; the search continues after them).
        include: phrases that must each appear in the output.
        ordered: the ``include`` phrases appear in this order, each after the previous ended.
        avoid: phrases that must never appear (a prefix may not contain one).
        counted: see the attribute's note.
    """

    prefix: tuple[int, ...] = ()
    include: tuple[tuple[int, ...], ...] = ()
    ordered: bool = False
    avoid: tuple[tuple[int, ...], ...] = ()
    counted: int = 0
    """The first ``counted`` prefix tokens count as generated tokens in the length
    normalization (a many-language model's forced target-language token, which transformers'
    ``generate`` counts); the rest of the prefix is given, not counted."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "prefix", _phrase(self.prefix))
        include = tuple(_phrase(p) for p in self.include)
        if not self.ordered:  # identical phrases are one requirement
            include = tuple(dict.fromkeys(include))
        object.__setattr__(self, "include", include)
        object.__setattr__(self, "avoid", tuple(dict.fromkeys(_phrase(p) for p in self.avoid)))

    @property
    def include_tokens(self) -> int:
        """Tokens of the ``include`` phrases (what an output needs at least, besides the prefix)."""
        return sum(len(p) for p in self.include)

    @property
    def min_len(self) -> int:
        """The shortest output length (EOS counted) that can hold the prefix and every phrase."""
        return len(self.prefix) + self.include_tokens + 1

    def needed_len(self, *, bans: bool = False) -> int:
        """The length limit (EOS counted) the search gives this sentence at least:
        :attr:`min_len` plus a reserve of one token per include phrase where tokens may be
        banned (avoided phrases, or ``bans``: no_repeat_ngram), to get around a banned one."""
        reserve = len(self.include) if (bans or self.avoid) else 0
        return self.min_len + reserve

    def check(
        self,
        *,
        special: Sequence[int],
        no_repeat_ngram: int = 0,
        names: Mapping[tuple[int, ...], str] | None = None,
    ) -> None:
        """Raise a one-line UserError for constraints no output can meet.

        Args:
            special: ids never generated (pad, BOS, EOS).
            no_repeat_ngram: a phrase that repeats an n-gram cannot be met under
                ``no_repeat_ngram`` = n.
            names: how the errors name a phrase (the prefix, a constraint, an avoided phrase),
                by its ids: the user's text (``'red ball'``), and where it came from when that
                was not the sentence's own line. Without a name, a phrase is shown as its ids.

        Raises:
            UserError: an empty phrase, a phrase with a special token, a prefix or constraint
                that contains an avoided phrase, or one that repeats an n-gram.
        """

        def name(p: tuple[int, ...]) -> str:
            return names[p] if names is not None and p in names else str(list(p))

        bad = set(special)
        for kind, phrases in (("constraint", self.include), ("avoided phrase", self.avoid)):
            for p in phrases:
                if not p:
                    shown = f" {names[p]}" if names is not None and p in names else ""
                    raise UserError(f"an empty {kind}{shown} (it has no SentencePiece piece)")
                if bad & set(p):
                    raise UserError(f"{kind} {name(p)} holds a special token")
        if bad & set(self.prefix):
            raise UserError(f"the prefix {name(self.prefix)} holds a special token")
        for a in self.avoid:
            if _contains(self.prefix, a):
                raise UserError(
                    f"the prefix {name(self.prefix)} contains the avoided phrase {name(a)}"
                )
            for p in self.include:
                if _contains(p, a):
                    raise UserError(f"constraint {name(p)} contains the avoided phrase {name(a)}")
        if no_repeat_ngram > 0:
            n = no_repeat_ngram
            kinds = [("the prefix", self.prefix)] + [("constraint", p) for p in self.include]
            for kind, p in kinds:
                grams = [tuple(p[i : i + n]) for i in range(len(p) - n + 1)]
                if len(set(grams)) < len(grams):
                    raise UserError(
                        f"{kind} {name(p)} repeats a {n}-gram, which no_repeat_ngram={n} forbids"
                    )

    @property
    def empty(self) -> bool:
        return not (self.prefix or self.include or self.avoid)


@dataclass
class StepRules:
    """Per-row rules of one search step (None: the rule does not apply in this step).

    Attributes:
        forced: (N,) the prefix token a row must take, -1 where none.
        banned: (N, A) tokens a row may not take (they would complete an avoided phrase), -1
            for none.
        eos_blocked: (N,) True where EOS is forbidden (an ``include`` phrase is not met yet).
    """

    forced: Tensor | None = None
    banned: Tensor | None = None
    eos_blocked: Tensor | None = None


def _kmp_ok(phrase: tuple[int, ...], width: int) -> list[list[bool]]:
    """``ok[k][j]``: after matching ``k`` tokens, ``j`` tokens can be matched by one more token
    (if it is ``phrase[j - 1]``): ``phrase[:j-1]`` is a suffix of ``phrase[:k]``.

    (width rows k, width + 1 columns j; j = 0, the fallback, is always ok.)
    """
    n = len(phrase)
    ok = [[False] * (width + 1) for _ in range(width)]
    for k in range(width):
        ok[k][0] = True
        if k >= n:
            continue
        for j in range(1, k + 2):
            ok[k][j] = phrase[: j - 1] == phrase[k - j + 1 : k]
    return ok


@dataclass
class _Phrases:
    """Per sentence, a padded table of phrases: tokens (B, P, L) (-1 pad), lengths (B, P)
    (0: no phrase), and the automaton table ok (B, P, L, L + 1) (see :func:`_kmp_ok`)."""

    tok: Tensor
    length: Tensor
    ok: Tensor

    @classmethod
    def build(cls, phrases: list[tuple[tuple[int, ...], ...]], device: torch.device) -> _Phrases:
        n_sent = len(phrases)
        P = max((len(ps) for ps in phrases), default=0)
        L = max((len(p) for ps in phrases for p in ps), default=1)
        tok = torch.full((n_sent, P, L), -1, dtype=torch.long)
        length = torch.zeros((n_sent, P), dtype=torch.long)
        ok = torch.zeros((n_sent, P, L, L + 1), dtype=torch.bool)
        for b, ps in enumerate(phrases):
            for i, p in enumerate(ps):
                tok[b, i, : len(p)] = torch.tensor(p, dtype=torch.long)
                length[b, i] = len(p)
                ok[b, i] = torch.tensor(_kmp_ok(p, L))
        return cls(tok.to(device), length.to(device), ok.to(device))

    @property
    def count(self) -> int:
        return self.tok.size(1)

    def step(self, sent: Tensor, prog: Tensor, y: Tensor) -> Tensor:
        """Progress after one more token, for every phrase of every row.

        Args:
            sent: (R,) sentence of each row.
            prog: (R, P) tokens of each phrase matched so far (< its length).
            y: (R, C) candidate tokens.

        Returns:
            (R, C, P) the new progress (the phrase's length: it was just completed).
        """
        tok = self.tok[sent]  # (R, P, L)
        L = tok.size(-1)
        p = torch.arange(tok.size(1), device=y.device)
        ok_k = self.ok[sent[:, None], p[None, :], prog.clamp(0, L - 1)]  # (R, P, L+1)
        match = tok[:, None] == y[:, :, None, None]  # (R, C, P, L): phrase[j-1] == y
        hit = ok_k[:, None, :, 1:] & match  # (R, C, P, L): j reachable from prog, and matched
        j = torch.arange(1, L + 1, device=y.device)
        return torch.where(hit, j, 0).amax(-1)  # (R, C, P); 0: nothing matched


@dataclass
class ConstraintState:
    """The constraint progress of every row (hypothesis) of a search: a typed search state.

    Built with :meth:`start` for B sentences (one row each); :meth:`reorder` selects rows like
    the decoder state, :meth:`advance` consumes one chosen token per row. The phrase tables are
    per sentence and shared by every state; a row knows its sentence (``sent``).

    Attributes:
        sent: (N,) the sentence of each row.
        prog: (N, P) tokens matched of each ``include`` phrase not met (0 for the others).
        done: (N, P) phrases met.
        next_phrase: (N,) ordered sentences: the first phrase not met yet.
        avoid_prog: (N, A) tokens matched of each avoided phrase.
    """

    include: _Phrases
    avoid: _Phrases
    ordered: Tensor  # (B,) bool
    prefix: Tensor  # (B, Lp) long, -1 pad
    prefix_len: Tensor  # (B,) long
    total: Tensor  # (B,) include tokens per sentence
    reserve: Tensor  # (B,) spare tokens kept for a way around banned tokens
    sent: Tensor
    prog: Tensor
    done: Tensor
    next_phrase: Tensor
    avoid_prog: Tensor
    prefix_list: list[int] = field(default_factory=list)
    """Prefix length per sentence (Python ints)."""
    given_list: list[int] = field(default_factory=list)
    """Prefix tokens per sentence that the score normalization does not count (the prefix
    less its :attr:`Constraints.counted` tokens)."""
    total_max: int = 0
    """The most include tokens of a sentence (a Python int: no device sync per step)."""

    @classmethod
    def start(
        cls, constraints: Sequence[Constraints], device: torch.device, *, bans: bool = False
    ) -> ConstraintState:
        """One row per sentence, nothing matched yet.

        ``bans``: tokens may be banned besides the avoided phrases (``no_repeat_ngram``); then
        every sentence with include phrases keeps a reserve (see :meth:`reserve_of_rows`).
        """
        B = len(constraints)
        include = _Phrases.build([c.include for c in constraints], device)
        avoid = _Phrases.build([c.avoid for c in constraints], device)
        Lp = max((len(c.prefix) for c in constraints), default=0)
        prefix = torch.full((B, max(Lp, 1)), -1, dtype=torch.long)
        for b, c in enumerate(constraints):
            prefix[b, : len(c.prefix)] = torch.tensor(c.prefix, dtype=torch.long)
        return cls(
            include=include,
            avoid=avoid,
            ordered=torch.tensor([c.ordered for c in constraints], device=device),
            prefix=prefix.to(device),
            prefix_len=torch.tensor([len(c.prefix) for c in constraints], device=device),
            total=include.length.sum(1),
            reserve=torch.tensor(
                [c.needed_len(bans=bans) - c.min_len for c in constraints],
                dtype=torch.long,
                device=device,
            ),
            sent=torch.arange(B, device=device),
            prog=torch.zeros((B, include.count), dtype=torch.long, device=device),
            done=include.length == 0,  # no phrase there: nothing to meet
            next_phrase=torch.zeros(B, dtype=torch.long, device=device),
            avoid_prog=torch.zeros((B, avoid.count), dtype=torch.long, device=device),
            prefix_list=[len(c.prefix) for c in constraints],
            given_list=[len(c.prefix) - c.counted for c in constraints],
            total_max=max((c.include_tokens for c in constraints), default=0),
        )

    # ---- what the search asks ---------------------------------------------------------

    @property
    def has_include(self) -> bool:
        return self.include.count > 0

    @property
    def common_prefix(self) -> int:
        """Prefix tokens every sentence has: decoded in one pass before the search steps."""
        return min(self.prefix_list, default=0)

    def prefix_block(self, m: int) -> Tensor:
        """(N, m) the first ``m`` prefix tokens of each row (m <= :attr:`common_prefix`)."""
        return self.prefix[self.sent, :m]

    def rules(self, generated: int) -> StepRules | None:
        """The rules of the step after ``generated`` tokens, or None when none applies."""
        forced = banned = blocked = None
        if generated < max(self.prefix_list, default=0):
            f = self.prefix[self.sent, min(generated, self.prefix.size(1) - 1)]  # (N,)
            forced = torch.where(generated < self.prefix_len[self.sent], f, -1)
        if self.avoid.count:
            length = self.avoid.length[self.sent]  # (N, A)
            last = self.avoid.tok[self.sent].gather(2, (length - 1).clamp(min=0)[..., None])
            banned = torch.where(
                (length > 0) & (self.avoid_prog == length - 1), last.squeeze(2), -1
            )  # (N, A)
        if self.has_include:
            blocked = ~self.done.all(1)
        if forced is None and banned is None and blocked is None:
            return None
        return StepRules(forced=forced, banned=banned, eos_blocked=blocked)

    def next_tokens(self) -> Tensor:
        """(N, P) the token that advances each active ``include`` phrase of a row, -1 for none.

        Active: unordered, every phrase not met; ordered, the next phrase only.
        """
        active = self._active()  # (N, P)
        tok = self.include.tok[self.sent]  # (N, P, L)
        L = tok.size(-1)
        nxt = tok.gather(2, self.prog.clamp(0, L - 1)[..., None]).squeeze(2)  # (N, P)
        return torch.where(active, nxt, -1)

    def met_after(self, y: Tensor) -> Tensor:
        """(N, C) constraint tokens each row would have met after the candidate tokens y (N, C)."""
        prog, done, _ = self._after(y)
        return self._met(prog, done, self.sent[:, None])

    def met(self) -> Tensor:
        """(N,) constraint tokens each row has met so far (its bank)."""
        return self._met(self.prog[:, None], self.done[:, None], self.sent[:, None])[:, 0]

    def needed(self, met: Tensor) -> Tensor:
        """Tokens still needed (at most) with ``met`` (N, ...) met: ``total - met``."""
        shape = (-1,) + (1,) * (met.dim() - 1)
        return self.total[self.sent].view(shape) - met

    def reserve_of_rows(self) -> Tensor:
        """(N,) spare tokens a row keeps before its max length while it can: one per include
        phrase where tokens may be banned (an avoided phrase or an n-gram repeat may block the
        next constraint token, and a spare token gets around it), else 0."""
        return self.reserve[self.sent]

    def total_of_rows(self) -> Tensor:
        """(N,) include tokens of each row's sentence."""
        return self.total[self.sent]

    # ---- moving on ----------------------------------------------------------------------

    def reorder(self, index: Tensor) -> ConstraintState:
        """Rows ``index`` (M,), in that order (beam expansion, reordering, dropping)."""
        return self._with(
            sent=self.sent[index],
            prog=self.prog[index],
            done=self.done[index],
            next_phrase=self.next_phrase[index],
            avoid_prog=self.avoid_prog[index],
        )

    def advance(self, y: Tensor) -> ConstraintState:
        """Consume the token ``y[i]`` (N,) in every row."""
        prog, done, nxt = self._after(y[:, None])
        avoid_prog = self.avoid_prog
        if self.avoid.count:
            avoid_prog = self.avoid.step(self.sent, self.avoid_prog, y[:, None])[:, 0]
            length = self.avoid.length[self.sent]
            # Only a dead beam (score -inf) can complete an avoided phrase: keep it in range.
            avoid_prog = torch.where(avoid_prog >= length, 0, avoid_prog)
        return self._with(
            prog=prog[:, 0], done=done[:, 0], next_phrase=nxt[:, 0], avoid_prog=avoid_prog
        )

    # ---- internals --------------------------------------------------------------------

    def _with(self, **changes) -> ConstraintState:
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return ConstraintState(**values)

    def _active(self) -> Tensor:
        valid = self.include.length[self.sent] > 0  # (N, P)
        p = torch.arange(self.include.count, device=self.sent.device)
        ordered_active = p[None, :] == self.next_phrase[:, None]
        return (
            valid & ~self.done & torch.where(self.ordered[self.sent][:, None], ordered_active, True)
        )

    def _after(self, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(prog, done, next_phrase) after the candidate tokens y (N, C): (N, C, P) x2, (N, C)."""
        N, C = y.shape
        if not self.has_include:
            empty = self.prog[:, None].expand(N, C, 0)
            return empty, self.done[:, None].expand(N, C, 0), self.next_phrase[:, None].expand(N, C)
        active = self._active()[:, None]  # (N, 1, P)
        new = self.include.step(self.sent, self.prog, y)  # (N, C, P)
        length = self.include.length[self.sent][:, None]  # (N, 1, P)
        completes = active & (new >= length)
        done = self.done[:, None] | completes
        prog = torch.where(active & ~completes, new, 0)
        nxt = self.next_phrase[:, None] + completes.any(-1).long()  # ordered: one active phrase
        return prog, done, nxt

    def _met(self, prog: Tensor, done: Tensor, sent: Tensor) -> Tensor:
        length = self.include.length[sent]  # (N, 1, P)
        if length.size(-1) == 0:
            return prog.sum(-1)
        return (done * length).sum(-1) + prog.amax(-1)


def allocate(
    cum: Tensor, bank: Tensor, total: Tensor, n_out: int, *, total_max: int | None = None
) -> Tensor:
    """Dynamic beam allocation (Post & Vilar 2018; vectorized as in Hu et al. 2019 / fairseq).

    Candidates are grouped in banks by the constraint tokens they have met; the banks take
    turns, most tokens met first, each giving its best candidate not yet taken. Candidates of
    score -inf come last.

    Args:
        cum: (Ba, C) cumulative scores of each sentence's candidates.
        bank: (Ba, C) constraint tokens met by each candidate (0 .. total).
        total: (Ba,) constraint tokens of each sentence.
        n_out: how many to return.
        total_max: ``total.max()`` if known (saves a device sync).

    Returns:
        (Ba, n_out) positions in ``cum``, in allocation order.
    """
    order = cum.argsort(dim=1, descending=True, stable=True)  # (Ba, C) best first
    c, b = cum.gather(1, order), bank.gather(1, order)
    if total_max is None:
        total_max = int(total.max()) if total.numel() else 0
    width = total_max + 1
    onehot = F.one_hot(b.clamp(0, width - 1), width)  # (Ba, C, W)
    rank = (onehot.cumsum(1) * onehot).sum(-1) - 1  # (Ba, C) rank within its bank
    key = rank * width + (total[:, None] - b)  # round r: the fullest bank first
    key = key.masked_fill(~c.isfinite(), torch.iinfo(torch.long).max)
    sel = key.argsort(dim=1, stable=True)[:, :n_out]
    return order.gather(1, sel)
