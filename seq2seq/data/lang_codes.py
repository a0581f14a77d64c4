"""Language codes of a many-language model (M2M100, NLLB-200): the model's own and ISO 639-1.

A user names a language the way the model does (``eng_Latn``; ``en`` for M2M100's
``__en__``) or by its ISO 639-1 code where that names exactly one language of the model
(``de`` -> ``deu_Latn``). LibreTranslate's two Chinese codes are its own: ``zh`` is
Simplified (``zho_Hans``), ``zt`` Traditional (``zho_Hant``). :func:`resolve_language` is the
one check; :func:`libre_code` gives each model language the code LibreTranslate's
``/languages`` lists (its ISO 639-1 code where it has one that maps back to it alone, else the
model's code).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from seq2seq.core import UserError

__all__ = ["libre_code", "resolve_language"]

# ISO 639-1 -> the ISO 639-3 code NLLB-200 writes for that language (its individual language
# where 639-1 names a macrolanguage: ar -> arb, fa -> pes, ms -> zsm, sw -> swh ...)
_ISO1_TO_3 = dict(
    item.split(":")
    for item in (
        "af:afr ak:aka am:amh ar:arb as:asm ay:ayr az:azj ba:bak be:bel bg:bul bm:bam bn:ben "
        "bo:bod bs:bos ca:cat cs:ces cy:cym da:dan de:deu dz:dzo ee:ewe el:ell en:eng eo:epo "
        "es:spa et:est eu:eus fa:pes fi:fin fj:fij fo:fao fr:fra ga:gle gd:gla gl:glg gn:grn "
        "gu:guj ha:hau he:heb hi:hin hr:hrv ht:hat hu:hun hy:hye id:ind ig:ibo is:isl it:ita "
        "ja:jpn jv:jav ka:kat kg:kon ki:kik kk:kaz km:khm kn:kan ko:kor ks:kas ku:kmr ky:kir "
        "lb:ltz lg:lug li:lim ln:lin lo:lao lt:lit lv:lvs mg:plt mi:mri mk:mkd ml:mal mn:khk "
        "mr:mar ms:zsm mt:mlt my:mya nb:nob ne:npi nl:nld nn:nno ny:nya oc:oci om:gaz or:ory "
        "pa:pan pl:pol ps:pbt pt:por qu:quy rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd "
        "sg:sag si:sin sk:slk sl:slv sm:smo sn:sna so:som sq:als sr:srp ss:ssw st:sot su:sun "
        "sv:swe sw:swh ta:tam te:tel tg:tgk th:tha ti:tir tk:tuk tl:tgl tn:tsn tr:tur ts:tso "
        "tt:tat tw:twi ug:uig uk:ukr ur:urd uz:uzn vi:vie wo:wol xh:xho yi:ydd yo:yor zu:zul"
    ).split()
)
_LIBRE = {"zh": "zho_Hans", "zt": "zho_Hant"}
"""LibreTranslate's codes that name a script, not only a language."""


def _candidates(code: str, languages: Sequence[str]) -> list[str]:
    """The model languages ``code`` (not one of them) may name: by ISO 639-1."""
    if code in _LIBRE and _LIBRE[code] in languages:
        return [_LIBRE[code]]
    iso3 = _ISO1_TO_3.get(code)
    if iso3 is None:
        return []
    return [lang for lang in languages if lang.split("_")[0].lower() == iso3]


def resolve_language(code: str, languages: Sequence[str], *, what: str = "language") -> str:
    """The model's code for the language ``code`` names.

    Args:
        code: the model's code (``eng_Latn``, ``en``; case-insensitive) or an ISO 639-1 code
            that names exactly one of ``languages``.
        languages: the model's codes.
        what: how the message names the argument (``--source-lang``, ``target``).

    Raises:
        UserError: a code the model does not know, or one that names several of its
            languages; one line naming the closest codes.
    """
    given = code.strip()
    by_lower = {lang.lower(): lang for lang in languages}
    if given.lower() in by_lower:
        return by_lower[given.lower()]
    found = _candidates(given.lower(), languages)
    if len(found) == 1:
        return found[0]
    if found:
        raise UserError(
            f"{what} {given!r} names several languages of the model ({', '.join(found)}); "
            "give one of them"
        )
    close = difflib.get_close_matches(given.lower(), list(by_lower), n=4, cutoff=0.5)
    hint = f"; close: {', '.join(by_lower[c] for c in close)}" if close else ""
    raise UserError(
        f"{what} {given!r} is not a language of the model ({len(languages)} languages){hint}"
    )


def libre_code(lang: str, languages: Sequence[str]) -> str:
    """The code LibreTranslate's ``/languages`` gives the model language ``lang``: its ISO
    639-1 code (``zh``/``zt`` for Chinese) when that code resolves to ``lang`` alone, else
    ``lang`` itself."""
    for libre, model in _LIBRE.items():
        if model == lang:
            return libre
    iso3 = lang.split("_")[0].lower()
    for iso1, three in _ISO1_TO_3.items():
        if three == iso3 and _candidates(iso1, languages) == [lang]:
            return iso1
    return lang
