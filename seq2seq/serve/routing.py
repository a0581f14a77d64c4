"""Which model translates a language pair: the routing table of a server with several models.

The rule, in order:

1. A direction served by one model goes to it (a multilingual model serves each of its
   directions).
2. A direction served by several: a bilingual model (one ``data.pair``) wins over a
   multilingual one (``data.pairs``). Two bilingual models, or two multilingual ones and no
   bilingual one, claiming the same direction are an error when the server starts: a models
   file chooses (a model's ``directions:`` keeps only the ones it should serve).
3. A pair that no model serves directly is translated through the pivot language (English
   by default, ``--pivot``) when both legs, source -> pivot and pivot -> target, are served:
   the first leg's translation is the second leg's input, as LibreTranslate does.
4. Anything else is a 400 that names the languages served.

The table is built once from what the models' configs say (:class:`~seq2seq.serve.model_specs
.PlannedModel`), before any model loads.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass

from seq2seq.core import UserError, printable
from seq2seq.serve.bodies import RequestError

__all__ = ["Leg", "Route", "Router"]


@dataclass(frozen=True)
class Leg:
    """One model translating one direction."""

    model: str
    source: str
    target: str

    @property
    def direction(self) -> tuple[str, str]:
        return self.source, self.target


@dataclass(frozen=True)
class Route:
    """How a pair is translated: one leg, or two through the pivot language."""

    legs: tuple[Leg, ...]

    @property
    def source(self) -> str:
        return self.legs[0].source

    @property
    def target(self) -> str:
        return self.legs[-1].target

    @property
    def direction(self) -> tuple[str, str]:
        return self.source, self.target

    def describe(self) -> list[dict]:
        """What ``/v1/translate`` reports: each leg's model and direction."""
        return [{"model": g.model, "source": g.source, "target": g.target} for g in self.legs]


class Router:
    """The routing table (the module docstring states the rule).

    Args:
        models: ``(name, directions, multilingual)`` of each model, in the order given (the
            first model's first direction is the server's default pair).
        pivot: the pivot language (None: no pivoting).
        aliases: other names of served languages (a many-language model's own codes, such
            as ``deu_Latn`` for ``de``; matched in any case).

    Raises:
        UserError: two models claim a direction and the rule does not choose.
    """

    def __init__(
        self,
        models: Sequence[tuple[str, Sequence[tuple[str, str]], bool]],
        *,
        pivot: str | None = "en",
        aliases: dict[str, str] | None = None,
    ) -> None:
        self.aliases = {k.lower(): v for k, v in (aliases or {}).items()}
        self._alias_names = list(aliases or {})  # as the model writes them: suggestions
        if not models:
            raise UserError("give at least one model to serve")
        self.pivot = pivot.strip().lower() if pivot else None
        claims: dict[tuple[str, str], list[tuple[str, bool]]] = {}
        for name, directions, multilingual in models:
            for d in directions:
                claims.setdefault(tuple(d), []).append((name, multilingual))
        self._direct: dict[tuple[str, str], str] = {}
        for d, names in claims.items():
            bilingual = [n for n, multi in names if not multi]
            choice = bilingual if bilingual else [n for n, _ in names]
            if len(choice) > 1:
                kind = "bilingual" if bilingual else "multilingual"
                raise UserError(
                    f"{d[0]}->{d[1]} is served by the {kind} models {' and '.join(choice)}, and "
                    "no rule chooses: in a models file (--models), give one of them "
                    "directions: without it"
                )
            self._direct[d] = choice[0]
        self.default: tuple[str, str] = tuple(models[0][1][0])  # type: ignore[assignment]
        self._routes: dict[tuple[str, str], Route] = {
            d: Route((Leg(name, *d),)) for d, name in self._direct.items()
        }
        p = self.pivot
        if p is not None:
            into = [s for s, t in self._direct if t == p]
            out_of = [t for s, t in self._direct if s == p]
            for s in into:
                for t in out_of:
                    if s != t and (s, t) not in self._routes:
                        legs = (Leg(self._direct[s, p], s, p), Leg(self._direct[p, t], p, t))
                        self._routes[s, t] = Route(legs)
        self._languages = list(dict.fromkeys(x for d in self._direct for x in d))

    def route(self, source: str | None, target: str | None) -> Route:
        """The route of ``source -> target``. A missing target is the default pair's; a
        missing source is the default pair's when a model translates it into the target,
        else the first language a model translates into it (else the same through the pivot).

        Raises:
            RequestError: 400 naming the languages served, for a pair that has no route.
        """
        t = self.served_code(target or self.default[1])
        if source:
            s = self.served_code(source)
        else:
            direct = [a for a, b in self._direct if b == t]
            reach = direct or self.sources(t)
            s = self.default[0] if self.default[0] in reach or not reach else reach[0]
        found = self._routes.get((s, t))
        if found is None:
            unknown = [
                x for x in (source, target) if x and self.served_code(x) not in self._languages
            ]
            if unknown and self._alias_names:  # a many-language model: say which codes are close
                names = self._languages + self._alias_names
                close = difflib.get_close_matches(unknown[0].strip(), names, n=5, cutoff=0.6)
                close += difflib.get_close_matches(
                    unknown[0].strip().lower(), names, n=5, cutoff=0.6
                )
                raise RequestError(
                    400,
                    f"unknown language {printable(unknown[0])}"
                    + (f"; close codes: {', '.join(dict.fromkeys(close))}" if close else "")
                    + f" (served languages: {', '.join(self._languages[:40])}"
                    + (", ..." if len(self._languages) > 40 else "")
                    + ")",
                )
            pairs = ", ".join(f"{a}->{b}" for a, b in self._routes)
            raise RequestError(
                400,
                f"language pair {s}->{t} is not supported (served languages: "
                f"{', '.join(self._languages)}; supported pairs: {pairs})",
            )
        return found

    def languages(self) -> list[str]:
        """Every language served, as source or target, in the models' order."""
        return list(self._languages)

    def targets(self, source: str) -> list[str]:
        """The languages ``source`` is translated into (directly or through the pivot)."""
        return [t for s, t in self._routes if s == source]

    def served_code(self, code: str) -> str:
        """``code`` as the table names its language (lowercased; an alias resolved)."""
        code = code.strip().lower()
        return self.aliases.get(code, code)

    def sources(self, target: str | None = None) -> list[str]:
        """The languages translated into ``target`` (all sources when None), in order."""
        if target is not None:
            target = self.served_code(target)
        return list(dict.fromkeys(s for s, t in self._routes if target in (None, t)))

    def directions(self) -> list[tuple[str, str]]:
        """Every pair with a route: the models' directions first, then the pivoted ones."""
        return list(self._routes)

    def served_by(self, model: str) -> list[tuple[str, str]]:
        """The directions routed directly to ``model``."""
        return [d for d, name in self._direct.items() if name == model]
