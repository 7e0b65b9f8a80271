"""F5-TTS's text front end: characters, with Chinese words as tone-numbered pinyin (`vocab.txt` ids).

    tok = F5Tokenizer(folder / "vocab.txt")
    ids = tok.encode(reference_prompt(ref_text) + text)       # list of vocab ids (0 = unknown / space)

Upstream (`f5_tts.model.utils.convert_char_to_pinyin`) segments with rjieba 0.2.2 (jieba-rs:
jieba's dictionary, DAG and HMM) and converts pure-Chinese words with pypinyin (`Style.TONE3`, tone
sandhi). We segment with jieba's own dictionary, DAG and HMM (pure Python), driven the way jieba-rs
drives them: its CJK ranges for blocks, and its rule for Latin runs the HMM leaves alone (words
joined by single `.`, `-` or `_` stay one segment: "F5-TTS", "e-mail", "3.5x"; Python jieba splits
them, which changes the spaces upstream inserts). Other characters map one to one; unknown ones
become id 0, as upstream.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import check_data_file

_TRANSLATE = str.maketrans({";": ",", "“": '"', "”": '"', "‘": "'", "’": "'"})


_CJK = ("\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF\U00020000-\U0002A6DF\U0002A700-\U0002B73F"
        "\U0002B740-\U0002B81F\U0002B820-\U0002CEAF\U0002CEB0-\U0002EBEF\U0002F800-\U0002FA1F")
_BLOCK = re.compile(f"([{_CJK}a-zA-Z0-9+#&._%\\-]+)")        # jieba-rs is_han_default
_SPACE = re.compile(r"(\r\n|\s)")
_HMM_HAN = re.compile("([\u4E00-\u9FD5]+)")
_HMM_SKIP = re.compile(r"([a-zA-Z0-9]+(?:[.\-_][a-zA-Z0-9]+)*%?)")   # measured on rjieba 0.2.2


def is_chinese(c: str) -> bool:
    return "\u3100" <= c <= "\u9fff"


def prepared_transcript(ref_text: str) -> str:
    """preprocess_ref_audio_text's transcript: ends with ". " (or "。")."""
    if not ref_text.endswith(". ") and not ref_text.endswith("。"):
        ref_text += " " if ref_text.endswith(".") else ". "
    return ref_text


def reference_prompt(ref_text: str) -> str:
    """The transcript as upstream feeds it: ends with ". " (or "。"), then one more space after an
    ASCII last character (preprocess_ref_audio_text, then infer_batch_process)."""
    ref_text = prepared_transcript(ref_text)
    if len(ref_text[-1].encode("utf-8")) == 1:
        ref_text += " "
    return ref_text


# chunk_text's sentence ends: ASCII marks before whitespace (dropped), CJK marks anywhere.
_SENTENCE_END = re.compile(r"(?<=[;:,.!?])\s+|(?<=[；：，。！？])")
MAX_SECONDS = 22          # infer_process sizes batches so reference + batch last about 22 s


def batch_bytes(ref_text: str, ref_seconds: float, speed: float) -> int:
    """infer_process's max_chars: the reference's UTF-8 bytes per second (its prepared transcript) times
    the seconds left of MAX_SECONDS, times the speed."""
    return int(len(prepared_transcript(ref_text).encode("utf-8")) / ref_seconds * (MAX_SECONDS - ref_seconds) * speed)


def chunk_text(text: str, max_chars: int = 135) -> list[str]:
    """Upstream's chunk_text, step for step: sentences packed while their UTF-8 bytes fit `max_chars`, a
    space after each sentence ending in a one-byte character (so "a.\nb." reads "a. b."), edges stripped."""
    chunks: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(text):
        if not sentence:
            continue
        piece = sentence + " " if len(sentence[-1].encode("utf-8")) == 1 else sentence
        if len(current.encode("utf-8")) + len(sentence.encode("utf-8")) <= max_chars:
            current += piece
        else:
            if current:
                chunks.append(current.strip())
            current = piece
    if current:
        chunks.append(current.strip())
    return chunks


def read_vocab(path: str | os.PathLike) -> dict[str, int]:
    """vocab.txt: one token per line, its id the line number (upstream drops each line's last character,
    the newline)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"F5-TTS: vocabulary not found: {path}")
    check_data_file(path, "F5-TTS")
    vocab: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8", newline="") as f:
            for i, line in enumerate(f):
                vocab[line[:-1]] = i
    except UnicodeDecodeError as e:
        raise CheckpointError(f"F5-TTS: {path} is not UTF-8 text ({e}); expected one token per line") from None
    if not vocab:
        raise CheckpointError(f"F5-TTS: {path} is empty; expected one token per line")
    return vocab


class F5Tokenizer:
    """Text -> upstream's token list -> vocab ids."""

    def __init__(self, vocab_path: str | os.PathLike) -> None:
        self.vocab = read_vocab(vocab_path)
        self._jieba = None

    def __len__(self) -> int:
        return len(self.vocab)

    def _segmenter(self):
        if self._jieba is None:
            import logging

            import jieba
            jieba.setLogLevel(logging.WARNING)
            self._jieba = jieba.Tokenizer()
            self._jieba.check_initialized()
        return self._jieba

    def segments(self, text: str) -> list[str]:
        """jieba-rs's `cut(text, hmm=True)` (rjieba's default)."""
        out: list[str] = []
        for block in _BLOCK.split(text):
            if not block:
                continue
            if _BLOCK.fullmatch(block):
                out.extend(self._cut_dag(block))
            else:
                for x in _SPACE.split(block):
                    if _SPACE.fullmatch(x):
                        out.append(x)
                    else:
                        out.extend(x)
        return out

    def _cut_dag(self, sentence: str) -> Iterator[str]:
        """Most probable dictionary path; runs of single characters go to the HMM when not a word."""
        jb = self._segmenter()
        route: dict[int, tuple[float, int]] = {}
        jb.calc(sentence, jb.get_DAG(sentence), route)
        x, buf = 0, ""
        while x < len(sentence):
            y = route[x][1] + 1
            if y - x == 1:
                buf += sentence[x:y]
            else:
                if buf:
                    yield from self._unknown(buf)
                    buf = ""
                yield sentence[x:y]
            x = y
        if buf:
            yield from self._unknown(buf)

    def _unknown(self, buf: str) -> Iterator[str]:
        if len(buf) == 1:
            yield buf
        elif self._segmenter().FREQ.get(buf):
            yield from buf
        else:
            from jieba import finalseg
            viterbi = getattr(finalseg, "__cut")          # jieba's HMM word finder for Han runs
            for block in _HMM_HAN.split(buf):
                if not block:
                    continue
                if _HMM_HAN.fullmatch(block):
                    yield from viterbi(block)
                else:
                    yield from (x for x in _HMM_SKIP.split(block) if x)

    def tokens(self, text: str) -> list[str]:
        """upstream's convert_char_to_pinyin([text])[0]."""
        from pypinyin import Style, lazy_pinyin
        out: list[str] = []
        text = text.translate(_TRANSLATE)
        for seg in self.segments(text):
            nbytes = len(seg.encode("utf-8"))
            if nbytes == len(seg):                          # letters, digits, ASCII symbols
                if out and nbytes > 1 and out[-1] not in " :'\"":
                    out.append(" ")
                out.extend(seg)
            elif nbytes == 3 * len(seg):                    # only East Asian characters
                pinyin = lazy_pinyin(seg, style=Style.TONE3, tone_sandhi=True)
                for i, c in enumerate(seg):
                    if is_chinese(c):
                        out.append(" ")
                    out.append(pinyin[i])
            else:                                           # mixed
                for c in seg:
                    if ord(c) < 256:
                        out.append(c)
                    elif is_chinese(c):
                        out.append(" ")
                        out.extend(lazy_pinyin(c, style=Style.TONE3, tone_sandhi=True))
                    else:
                        out.append(c)
        return out

    def encode(self, text: str) -> list[int]:
        return [self.vocab.get(t, 0) for t in self.tokens(text)]
