"""Record upstream's English front end on test sentences (reference venv + the repository; see README.md).

    "$REF_VENV"/bin/python tests/gpt_sovits/make_frontend_fixtures.py

Runs upstream's `text.cleaner.clean_text(text, "en", "v2")` + `cleaned_text_to_sequence` (with
TextPreprocessor's "fewer than 6 phones: retry with a leading '.'" rule) on its own lexicon files. NLTK's
data (tagger, cmudict corpus) cannot be downloaded here: `nltk.download` is a no-op, `pos_tag` tags every
word "NN" and g2p_en's corpus lexicon is empty (upstream replaces it with its own files anyway), so the
sentences avoid homographs and names. Asserts our english.py gives the same symbols, then writes
fixtures/english.json: the cases and the lexicon entries they use (the default suite rebuilds a lexicon
from those in upstream's file formats).
"""
from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402,F401
from make_fixtures_env import REPO  # noqa: E402
import nltk  # noqa: E402

nltk.download = lambda *a, **k: False
nltk.pos_tag = lambda words, *a, **k: [(w, "NN") for w in words]
import g2p_en.g2p  # noqa: E402

g2p_en.g2p.cmudict = types.SimpleNamespace(dict=lambda: {})
from text import cleaned_text_to_sequence  # noqa: E402
from text.cleaner import clean_text  # noqa: E402
from text.symbols2 import symbols  # noqa: E402

from mizuoto.nodes.gpt_sovits import english, frontend  # noqa: E402

CASES = [
    "Hello world.",
    "The quick brown fox jumps over the lazy dog!",
    "I can't believe it's already nineteen eighty-four?",
    "In 1984, there were 21 cats and 3,500 dogs.",
    "She sold 2005 apples in 1900, and 1999 pears.",
    "We need 100% of 7 things; that's all.",
    "Wait... what?! No way — really.",
    "The cat's toys and the dog's bowl.",
    "e.g. this, i.e. that.",
    "Hi.",
    "NASA and the FBI met at 10.",
    "Café naïve résumé.",
    "Zyx qwv abc.",
    "Blorptastic frumbles!",
    # numbers, dates, times, currency, percentages, ordinals, decimals, fractions, abbreviations (expend.py)
    "It costs $5.99 today.",
    "The ticket was $1.01, not $100.",
    "He paid 32.3$ for the book.",
    "Only $.5 is left, and £7.14 in the jar.",
    "The fee is £1, or £0.01 for students.",
    "We raised $5,000 in 2019.",
    "The bill came to £1,000.50 last night.",
    "The meeting starts at 10:30 tomorrow.",
    "Dinner is at 13:00 and dessert at 23:59.",
    "Wake me at 0:05, please.",
    "The train leaves at 7:45 and arrives at 12:00.",
    "She finished 1st, he came 2nd and I was 3rd.",
    "This is the 21st century, not the 101st.",
    "On the 4th of July we watched the 11th game.",
    "Pi is about 3.14159.",
    "Version 2.0 is better than 1.5.",
    "Add 0.5 cups of milk.",
    "Eat 1/2 of the cake and 3/4 of the pie.",
    "Only 1/3 of them came, and 3/2 is more than one.",
    "The 1980s were loud, and so were the 1990s.",
    "Temperatures fell from 23°C to 4°F overnight.",
    "Run 5km, then walk 1km.",
    "The rope is 1.5m long, the pole is 3ft.",
    "Wait 20h or 1.2s, then 10min more.",
    "Pour 1L of water.",
    "The score is 3 - 2 for us.",
    "We know that 5 × 6 = 30.",
    "And 8 ÷ 2 is 4, while x + y is unknown.",
    "It dropped to -5 degrees.",
    "Sales grew 50% in 2024.",
    "About 12,345,678 people live there.",
    "Chapter 1. The beginning.",
    "Step 3. Add salt.",
    "The year 2005 followed 2000.",
    "In 1905 and 1800, nothing happened.",
    "She was born on March 3rd, 1999.",
    "The date was May 21st, 2021.",
    "Call me at 5 or 6 tonight.",
    "We need 42 chairs and 7 tables.",
    "Mr. Smith met Dr. Brown.",
    "The FBI, the CIA and NASA agreed.",
    "I bought an iPhone and a MacBook.",
    "Use e.g. salt, i.e. sodium chloride.",
    "The US and the UK signed it.",
    "Room 404 is on floor 12.",
    "It fell from 3 to -12, then rose by -7 at night.",
]


def upstream(text: str) -> tuple[list[str], str]:
    phones, _, norm = clean_text(text, "en", "v2")
    if len(phones) < 6:
        phones, _, norm = clean_text("." + text, "en", "v2")
    return [symbols[i] for i in cleaned_text_to_sequence(phones, "v2")], norm


lexicon = english.read_lexicon(REPO / "GPT_SoVITS" / "text")
table = {i: s for s, i in english.symbols().items()}
cases, used = {}, set()
for text in CASES:
    want, norm = upstream(text)
    (segment,) = frontend.phones_and_bert_inputs(text, "en", lexicon)
    ids, mine_norm = segment.phone_ids, segment.norm_text
    got = [table[i] for i in ids]
    status = "equal" if (got, mine_norm) == (want, norm) else "DIFFERENT"
    print(f"{status}: {text!r}\n  upstream {want}\n  ours     {got}")
    cases[text] = {"phones": want, "norm": norm, "equal": status == "equal"}
    for word in english._TOKEN.findall(norm) + list("abcdefghijklmnopqrstuvwxyz") + ["negative"]:
        for w in [word.lower(), word.lower()[:-2], word.lower().removesuffix("negative")] + re.split(r"[^a-z]+", word.lower()):
            if w in lexicon:
                used.add(w)
assert english.symbols() == {s: i for i, s in enumerate(symbols)}, "symbols_v2.json differs from text/symbols2.py"
(HERE / "fixtures" / "english.json").write_text(json.dumps(
    {"cases": cases, "lexicon": {w: lexicon[w] for w in sorted(used)}}, indent=0, ensure_ascii=False))
print(sum(c["equal"] for c in cases.values()), "of", len(cases), "equal")
