"""Text -> Kokoro phonemes. English (American for `a*` voices, British for `b*`) through the G2P the
embedded voice uses, the hibari-tts package's port of misaki (its lexicons, tagger and rules, no spaCy),
run as KPipeline runs misaki without espeak (misaki_en.py): no extra normalizer, spaCy's quote tags, and
words outside the lexicons left out as upstream leaves them out (the unknown-word net is not wired in).
Other languages go through misaki's own G2P when it is installed, as kokoro.KPipeline does; when it is
not, the error names the package to install."""
from __future__ import annotations

import re
from typing import Callable

from ..pack.text import split_at_spaces

MAX_PHONEMES = 510          # kokoro.KPipeline: the 512 positions of the ALBERT minus the two pads
# language -> (misaki module, the pip requirement that brings it, espeak language or None)
OPTIONAL = {"ja": ("ja", "misaki[ja]", None), "zh": ("zh", "misaki[zh]", None),
            "es": ("espeak", "misaki[en] phonemizer espeakng_loader", "es"),
            "fr": ("espeak", "misaki[en] phonemizer espeakng_loader", "fr-fr"),
            "hi": ("espeak", "misaki[en] phonemizer espeakng_loader", "hi"),
            "it": ("espeak", "misaki[en] phonemizer espeakng_loader", "it"),
            "pt": ("espeak", "misaki[en] phonemizer espeakng_loader", "pt-br")}
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")


def sentences(text: str) -> list[str]:
    from hibari.tts import Hibari                            # a staticmethod; no model is created
    return Hibari.split_sentences(text)


def english(british: bool) -> Callable[[str], str]:
    from .misaki_en import MisakiEnglish
    return MisakiEnglish(british=british)


def other(language: str) -> Callable[[str], str]:
    """misaki's G2P for a non-English language; ValueError naming the package when it is missing."""
    module, requirement, espeak = OPTIONAL[language]
    try:
        if module == "ja":
            from misaki import ja
            g2p = ja.JAG2P()
        elif module == "zh":
            from misaki import zh
            g2p = zh.ZHG2P(version=None)
        else:
            from misaki import espeak as es
            g2p = es.EspeakG2P(language=espeak)
    except ImportError as e:
        raise ValueError(f"language: Kokoro reads {language!r} through misaki, which is not installed "
                         f"({e.name or e}); install it with: pip install {requirement}") from None
    return lambda text: g2p(text)[0]


def pieces(phonemes: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut a sentence's phonemes at spaces into pieces of at most `limit` characters (hard cut last)."""
    return split_at_spaces(phonemes, limit)
