"""How OmniVoice cuts a long text, as upstream's `OmniVoice.generate` does (omnivoice 0.2.1).

A text whose estimated audio fits `CHUNK_THRESHOLD_S` (30 s) is generated whole. A longer one is cut by
`chunk_text_punctuation` into pieces of about `CHUNK_S` (15 s) worth of characters (at the text's own
estimated frames per character), each generated with the reference (or, without one, with the first
piece's audio and text as the reference); the pieces' waveforms are joined by `cross_fade_chunks` (a
fade-out, 0.1 s of silence, a fade-in) and only then post-processed as one.
"""
from __future__ import annotations

CHUNK_THRESHOLD_S = 30.0        # OmniVoiceGenerationConfig.audio_chunk_threshold
CHUNK_S = 15.0                  # OmniVoiceGenerationConfig.audio_chunk_duration
MIN_CHUNK_CHARS = 3             # _generate_chunked's min_chunk_len

SPLIT_PUNCTUATION = frozenset(".,;:!?。，；：！？")
CLOSING_MARKS = frozenset("\"'“”‘’）]》>」】")
ABBREVIATIONS = frozenset((
    "Mr. Mrs. Ms. Dr. Prof. Sr. Jr. Rev. Fr. Hon. Pres. Gov. Capt. Gen. Sen. Rep. Col. Maj. Lt. Cmdr. Sgt. Cpl. "
    "Co. Corp. Inc. Ltd. Est. Dept. St. Ave. Blvd. Rd. Mt. Ft. No. Jan. Feb. Mar. Apr. Aug. Sep. Sept. Oct. "
    "Nov. Dec. i.e. e.g. vs. Vs. Etc. approx. fig. def.").split())


def chunk_text_punctuation(text: str, chunk_len: int, min_chunk_len: int | None = None) -> list[str]:
    """Upstream's chunk_text_punctuation, step for step: sentences end at a split mark (a "." after an
    abbreviation does not end one; marks and closing quotes at a sentence's start go to the previous
    one), sentences are packed up to `chunk_len` characters, and chunks shorter than `min_chunk_len`
    join their neighbour (the first one joins the second)."""
    sentences: list[list[str]] = []
    current: list[str] = []
    for ch in text:
        if not current and sentences and (ch in SPLIT_PUNCTUATION or ch in CLOSING_MARKS):
            sentences[-1].append(ch)
            continue
        current.append(ch)
        if ch in SPLIT_PUNCTUATION:
            if ch == ".":
                so_far = "".join(current).strip()
                if so_far and so_far.split()[-1] in ABBREVIATIONS:
                    continue
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    merged: list[list[str]] = []
    chunk: list[str] = []
    for sentence in sentences:
        if len(chunk) + len(sentence) <= chunk_len:
            chunk.extend(sentence)
        else:
            if chunk:
                merged.append(chunk)
            chunk = sentence
    if chunk:
        merged.append(chunk)
    if min_chunk_len is not None:
        first_short = bool(merged) and len(merged[0]) < min_chunk_len
        final: list[list[str]] = []
        for i, c in enumerate(merged):
            if i == 1 and first_short:
                final[-1].extend(c)
            elif len(c) >= min_chunk_len or not final:
                final.append(c)
            else:
                final[-1].extend(c)
        merged = final
    return [s for s in ("".join(c).strip() for c in merged) if s]


def split_long_text(text: str, target_frames: int, frame_rate: int) -> list[str]:
    """generate's short / long decision and _generate_chunked's cut: `target_frames` is the whole
    text's estimate (its reference's speaking rate, the speed)."""
    if target_frames <= int(CHUNK_THRESHOLD_S * frame_rate):
        return [text]
    per_char = target_frames / len(text)
    return chunk_text_punctuation(text, int(CHUNK_S * frame_rate / per_char), MIN_CHUNK_CHARS)
