"""Translating along a :class:`~seq2seq.serve.routing.Route`: one model, or two through the
pivot language, each leg on its own model's service.

A pivoted text is translated whole by the first leg (its sentences split, translated and
rejoined with the layout kept, as a direct request would be), and that translation is the
second leg's input: the answer is exactly ``leg2(leg1(text))``, as LibreTranslate pivots. The
request's options that shape the answer (``alternatives``, n-best lists, constraints) apply
to the last leg; the first one gives its best translation. An HTML text keeps its markup
through both legs. Each leg holds its model only while it runs
(:meth:`~seq2seq.serve.model_pool.ModelPool.use`), so a pivot works under ``--max-loaded 1``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from seq2seq.serve.bodies import RequestError

if TYPE_CHECKING:
    from seq2seq.decode import Glossary
    from seq2seq.serve.model_pool import ModelPool
    from seq2seq.serve.routing import Leg, Route
    from seq2seq.serve.service import TranslationService

__all__ = ["along", "direct_glossary", "translate_file_text", "translate_html", "translate_libre"]

T = TypeVar("T")
LegStep = Callable[["TranslationService", "Leg", list[str]], Awaitable[list[str]]]


async def along(
    pool: ModelPool,
    route: Route,
    texts: list[str],
    first: LegStep,
    last: Callable[[TranslationService, Leg, list[str]], Awaitable[T]],
) -> T:
    """``last`` on the last leg's service, given what ``first`` made of ``texts`` on every
    leg before it (nothing for a direct route)."""
    for leg in route.legs[:-1]:
        async with pool.use(leg.model) as service:
            texts = await first(service, leg, texts)
    final = route.legs[-1]
    async with pool.use(final.model) as service:
        return await last(service, final, texts)


def direct_glossary(route: Route, glossary: Glossary | None) -> Glossary | None:
    """The request's glossary, for a route of one leg: a glossary pairs source terms with
    target terms, which no leg of a pivoted route has both of.

    Raises:
        RequestError: 400 for a glossary on a pivoted route.
    """
    if glossary is not None and len(route.legs) > 1:
        raise RequestError(
            400,
            f"a glossary needs a model that translates {route.source}->{route.target} "
            f"directly; this pair is pivoted through {route.legs[0].target}",
        )
    return glossary


async def translate_libre(
    pool: ModelPool,
    route: Route,
    texts: list[str],
    alternatives: int,
    glossary: Glossary | None = None,
) -> tuple[list[str], list[list[str]]]:
    """LibreTranslate's text translation along ``route``: per text its translation and up
    to ``alternatives`` others (:meth:`TranslationService.translate_libre`), with the
    request's ``glossary`` (a direct route only: :func:`direct_glossary`)."""
    glossary = direct_glossary(route, glossary)

    async def first(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        out, _ = await service.translate_libre(now, leg.direction, 0)
        return out

    async def last(service: TranslationService, leg: Leg, now: list[str]):
        return await service.translate_libre(now, leg.direction, alternatives, glossary)

    return await along(pool, route, texts, first, last)


async def translate_html(
    pool: ModelPool,
    route: Route,
    texts: list[str],
    *,
    field: str,
    totals: bool = True,
    glossary: Glossary | None = None,
) -> list[str]:
    """HTML texts translated along ``route``, markup kept at each leg (a glossary: a direct
    route only)."""
    glossary = direct_glossary(route, glossary)

    async def step(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        return await service.translate_html(
            now, direction=leg.direction, field=field, totals=totals, glossary=glossary
        )

    return await along(pool, route, texts, step, step)


async def translate_file_text(
    pool: ModelPool, route: Route, text: str, glossary: Glossary | None = None
) -> str:
    """A text file translated along ``route``, its layout kept (a glossary: a direct route
    only)."""
    glossary = direct_glossary(route, glossary)

    async def step(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        return [await service.translate_file_text(now[0], leg.direction, glossary)]

    (out,) = await along(pool, route, [text], step, step)
    return out
