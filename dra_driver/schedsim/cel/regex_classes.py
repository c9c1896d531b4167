r"""RE2's character classes as Go's ``regexp/syntax`` knows them, as Python class text.

Called by the RE2 translator (``regex.py``): the Perl classes (``\d``, ``\s``, ``\w``, ASCII
only), the POSIX classes (``[:alpha:]``), the Unicode general categories and their aliases (with
code point ranges computed once from Python's ``unicodedata``), the one-word script names Go
accepts (which Python cannot express), and Go's canonical spelling of a class name.
"""

from __future__ import annotations

import functools
import unicodedata

WORD = "0-9A-Za-z_"
PERL = {"d": "0-9", "s": "\\t\\n\\f\\r ", "w": WORD}
POSIX = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": WORD,
    "xdigit": "0-9A-Fa-f",
}
CATEGORIES = frozenset(
    [
        "C",
        "Cc",
        "Cf",
        "Cn",
        "Co",
        "Cs",
        "L",
        "Ll",
        "Lm",
        "Lo",
        "Lt",
        "Lu",
        "M",
        "Mc",
        "Me",
        "Mn",
        "N",
        "Nd",
        "Nl",
        "No",
        "P",
        "Pc",
        "Pd",
        "Pe",
        "Pf",
        "Pi",
        "Po",
        "Ps",
        "S",
        "Sc",
        "Sk",
        "Sm",
        "So",
        "Z",
        "Zl",
        "Zp",
        "Zs",
    ]
)
# Go's unicode.CategoryAliases, keyed by regexp/syntax's canonical form of the alias.
ALIASES = {
    "Casedletter": "Lc",
    "Closepunctuation": "Pe",
    "Combiningmark": "M",
    "Connectorpunctuation": "Pc",
    "Control": "Cc",
    "Currencysymbol": "Sc",
    "Dashpunctuation": "Pd",
    "Decimalnumber": "Nd",
    "Enclosingmark": "Me",
    "Finalpunctuation": "Pf",
    "Format": "Cf",
    "Initialpunctuation": "Pi",
    "Letter": "L",
    "Letternumber": "Nl",
    "Lineseparator": "Zl",
    "Lowercaseletter": "Ll",
    "Mark": "M",
    "Mathsymbol": "Sm",
    "Modifierletter": "Lm",
    "Modifiersymbol": "Sk",
    "Nonspacingmark": "Mn",
    "Number": "N",
    "Openpunctuation": "Ps",
    "Other": "C",
    "Otherletter": "Lo",
    "Othernumber": "No",
    "Otherpunctuation": "Po",
    "Othersymbol": "So",
    "Paragraphseparator": "Zp",
    "Privateuse": "Co",
    "Punctuation": "P",
    "Separator": "Z",
    "Spaceseparator": "Zs",
    "Spacingmark": "Mc",
    "Surrogate": "Cs",
    "Symbol": "S",
    "Titlecaseletter": "Lt",
    "Unassigned": "Cn",
    "Uppercaseletter": "Lu",
    "Cntrl": "Cc",
    "Digit": "Nd",
    "Punct": "P",
}
# Unicode scripts Go's regexp finds by name (its lookup canonicalizes the name, so only the
# one-word script names are reachable). Python has no script data: these are not supported.
SCRIPTS = frozenset(
    [
        "Adlam",
        "Ahom",
        "Arabic",
        "Armenian",
        "Avestan",
        "Balinese",
        "Bamum",
        "Batak",
        "Bengali",
        "Bhaiksuki",
        "Bopomofo",
        "Brahmi",
        "Braille",
        "Buginese",
        "Buhid",
        "Carian",
        "Chakma",
        "Cham",
        "Cherokee",
        "Chorasmian",
        "Common",
        "Coptic",
        "Cuneiform",
        "Cypriot",
        "Cyrillic",
        "Deseret",
        "Devanagari",
        "Dogra",
        "Duployan",
        "Elbasan",
        "Elymaic",
        "Ethiopic",
        "Georgian",
        "Glagolitic",
        "Gothic",
        "Grantha",
        "Greek",
        "Gujarati",
        "Gurmukhi",
        "Han",
        "Hangul",
        "Hanunoo",
        "Hatran",
        "Hebrew",
        "Hiragana",
        "Inherited",
        "Javanese",
        "Kaithi",
        "Kannada",
        "Katakana",
        "Kawi",
        "Kharoshthi",
        "Khmer",
        "Khojki",
        "Khudawadi",
        "Lao",
        "Latin",
        "Lepcha",
        "Limbu",
        "Lisu",
        "Lycian",
        "Lydian",
        "Mahajani",
        "Makasar",
        "Malayalam",
        "Mandaic",
        "Manichaean",
        "Marchen",
        "Medefaidrin",
        "Miao",
        "Modi",
        "Mongolian",
        "Mro",
        "Multani",
        "Myanmar",
        "Nabataean",
        "Nandinagari",
        "Newa",
        "Nko",
        "Nushu",
        "Ogham",
        "Oriya",
        "Osage",
        "Osmanya",
        "Palmyrene",
        "Phoenician",
        "Rejang",
        "Runic",
        "Samaritan",
        "Saurashtra",
        "Sharada",
        "Shavian",
        "Siddham",
        "Sinhala",
        "Sogdian",
        "Soyombo",
        "Sundanese",
        "Syriac",
        "Tagalog",
        "Tagbanwa",
        "Takri",
        "Tamil",
        "Tangsa",
        "Tangut",
        "Telugu",
        "Thaana",
        "Thai",
        "Tibetan",
        "Tifinagh",
        "Tirhuta",
        "Toto",
        "Ugaritic",
        "Vai",
        "Vithkuqi",
        "Wancho",
        "Yezidi",
        "Yi",
    ]
)
MAX_RUNE = 0x10FFFF


@functools.cache
def category_ranges() -> dict[str, list[tuple[int, int]]]:
    """Code point ranges of every general category and one-letter group (Cn, unassigned, included)."""
    out: dict[str, list[tuple[int, int]]] = {}
    prev = None
    start = 0
    for cp in range(MAX_RUNE + 2):
        cat = unicodedata.category(chr(cp)) if cp <= MAX_RUNE else None
        if cat != prev:
            if prev is not None:
                out.setdefault(prev, []).append((start, cp - 1))
                out.setdefault(prev[0], []).append((start, cp - 1))
                if prev in ("Lu", "Ll", "Lt"):
                    out.setdefault("Lc", []).append((start, cp - 1))
                if prev != "Cn":
                    out.setdefault("Assigned", []).append((start, cp - 1))
            prev, start = cat, cp
    return out


def canonical(name: str) -> str:
    """regexp/syntax's canonical class name: first letter upper, the rest lower, no ``_``, ``-``, spaces."""
    out = [c for c in name if c not in "_- "]
    return (out[0].upper() + "".join(out[1:]).lower()) if out else ""


def class_text(lo: int, hi: int) -> str:
    """The Python class text for the code points ``lo..hi`` (escaped, so any code point is safe)."""

    def esc(c: int) -> str:
        return f"\\U{c:08x}" if c > 0xFFFF else f"\\u{c:04x}"

    return esc(lo) if lo == hi else f"{esc(lo)}-{esc(hi)}"
