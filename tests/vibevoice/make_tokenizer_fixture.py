"""Record VibeVoice-Realtime's text tokenization from upstream (run in the reference venv): a tiny byte-level BPE
tokenizer.json in Qwen2's layout (NFC, Qwen's split regex, byte-level, its <|...|> special tokens) and the ids
upstream's processor feeds the model for a few texts (`VibeVoiceTextTokenizerFast.encode(text.strip() + "\\n",
add_special_tokens=False)`), with the negative prompt's `<|image_pad|>` id.

    VIBEVOICE_SRC=/path/to/VibeVoice $VIBEVOICE_VENV/bin/python tests/vibevoice/make_tokenizer_fixture.py [DIR]

DIR defaults to tests/vibevoice/fixtures (writes tokenizer.json and tokenizer_ids.json).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

sys.path.insert(0, os.environ["VIBEVOICE_SRC"])
from vibevoice.modular.modular_vibevoice_text_tokenizer import VibeVoiceTextTokenizerFast  # noqa: E402

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
           "<|image_pad|>"]
CORPUS = ["Hello, world! This is a tiny tokenizer for VibeVoice tests.", "The quick brown fox jumps over the lazy dog.",
          "Numbers 1234 and 56 and punctuation... don't, won't; it's fine.", "Ünïcödé café naïve – résumé 東京 テスト"] * 4
TEXTS = ["Hello world.", "  The quick brown fox jumps over the lazy dog, twice!  ", "It's 2026; café au lait?",
         "Line one\nline two", "東京 テスト <|image_pad|> end", "x"]


def build() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    build().save(str(out / "tokenizer.json"))
    hf = VibeVoiceTextTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    ids = {"texts": TEXTS, "ids": [hf.encode(t.strip() + "\n", add_special_tokens=False) for t in TEXTS],
           "negative_id": hf.convert_tokens_to_ids("<|image_pad|>")}
    (out / "tokenizer_ids.json").write_text(json.dumps(ids, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "fixtures")
