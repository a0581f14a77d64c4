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

if TYPE_CHECKING:
    from seq2seq.serve.model_pool import ModelPool
    from seq2seq.serve.routing import Leg, Route
    from seq2seq.serve.service import TranslationService

__all__ = ["along", "translate_file_text", "translate_html", "translate_libre"]

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


async def translate_libre(
    pool: ModelPool, route: Route, texts: list[str], alternatives: int
) -> tuple[list[str], list[list[str]]]:
    """LibreTranslate's text translation along ``route``: per text its translation and up
    to ``alternatives`` others (:meth:`TranslationService.translate_libre`)."""

    async def first(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        out, _ = await service.translate_libre(now, leg.direction, 0)
        return out

    async def last(service: TranslationService, leg: Leg, now: list[str]):
        return await service.translate_libre(now, leg.direction, alternatives)

    return await along(pool, route, texts, first, last)


async def translate_html(
    pool: ModelPool, route: Route, texts: list[str], *, field: str, totals: bool = True
) -> list[str]:
    """HTML texts translated along ``route``, markup kept at each leg."""

    async def step(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        return await service.translate_html(
            now, direction=leg.direction, field=field, totals=totals
        )

    return await along(pool, route, texts, step, step)


async def translate_file_text(pool: ModelPool, route: Route, text: str) -> str:
    """A text file translated along ``route``, its layout kept."""

    async def step(service: TranslationService, leg: Leg, now: list[str]) -> list[str]:
        return [await service.translate_file_text(now[0], leg.direction)]

    (out,) = await along(pool, route, [text], step, step)
    return out
