"""English G2P as kokoro.KPipeline runs misaki 0.9.4 without espeak, on hibari-tts's port (no spaCy).

hibari's G2P (hibari-tts 0.2.1, pinned by install.py) is misaki's en.G2P with a perceptron tagger in place
of spaCy's and an extra text normalizer. Three differences from upstream's output are undone here:

- no normalizer: misaki reads the text as written (`km`, `Jan.`, `#42` are not expanded);
- quote marks get spaCy's tags (`` opening, '' closing): hibari's tagger calls them nouns, which glued them
  to the next word and dropped the word (`"Hello," she said` lost `Hello`);
- with no fallback, misaki skips only the unknown sub-token of a word and still reads the rest
  (`10:30` -> ten thirty, `abc123` -> one twenty three); hibari's port gave up on the whole word.

Imported only when English text is spoken (hibari is imported here, at module level).
"""
from __future__ import annotations

from hibari.g2p import G2P, Context
from hibari.g2p.token import Tok, merge_tokens

OPENING, CLOSING = "``", "''"


def quote_tag(tokens: list[Tok], i: int) -> str | None:
    """spaCy's tag for a quote token: “ opens, ” closes, a straight quote opens at the start or after a
    space when a word follows it directly, and closes otherwise."""
    text = tokens[i].text
    if text == "“":
        return OPENING
    if text == "”":
        return CLOSING
    if text != '"':
        return None
    after_space = i == 0 or bool(tokens[i - 1].whitespace)
    return OPENING if after_space and not tokens[i].whitespace and i + 1 < len(tokens) else CLOSING


class MisakiEnglish(G2P):
    """`MisakiEnglish(british)(text)` -> the phonemes KPipeline(lang_code='a'|'b') gives without espeak."""

    def __init__(self, british: bool = False):
        super().__init__(oov=False, unk="", british=british)

    def __call__(self, text: str, normalize_text: bool = False) -> str:
        return super().__call__(text, normalize_text=normalize_text)

    def _tokens(self, text: str) -> list[Tok]:
        tokens = super()._tokens(text)
        for i, tk in enumerate(tokens):
            tag = quote_tag(tokens, i)
            if tag is not None:
                tk.tag = tag
        return tokens

    def phonemize_tokens(self, tokens: list[Tok]) -> list[Tok]:
        """misaki G2P.__call__ with fallback=None (hibari's loop, but an unknown sub-token is left unread
        instead of sending the whole word to a fallback that is not there)."""
        words = self.retokenize(tokens)
        ctx = Context()
        for w in reversed(words):
            if not isinstance(w, list):
                if w.phonemes is None:
                    w.phonemes, w.rating = self.lexicon(w, ctx)
                ctx = self.token_context(ctx, w.phonemes, w)
                continue
            left, right = 0, len(w)
            while left < right:
                if any(tk.alias is not None or tk.phonemes is not None for tk in w[left:right]):
                    tk = None
                else:
                    tk = merge_tokens(w[left:right])
                ps, rating = (None, None) if tk is None else self.lexicon(tk, ctx)
                if ps is not None:
                    w[left].phonemes, w[left].rating = ps, rating
                    for x in w[left + 1:right]:
                        x.phonemes, x.rating = "", rating
                    ctx = self.token_context(ctx, ps, tk)
                    right, left = left, 0
                elif left + 1 < right:
                    left += 1
                else:
                    right -= 1
                    tk = w[right]
                    if tk.phonemes is None and all(c in "',-._‘’/" for c in tk.text):
                        tk.phonemes, tk.rating = "", 3
                    left = 0
            self.resolve_tokens(w)
        out = [merge_tokens(tk, unk=self.unk) if isinstance(tk, list) else tk for tk in words]
        for tk in out:
            if tk.phonemes:
                tk.phonemes = tk.phonemes.replace("ɾ", "T").replace("ʔ", "t")
        return out

