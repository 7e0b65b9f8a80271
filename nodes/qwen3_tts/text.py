"""Qwen2 byte-level BPE for Qwen3-TTS prompts, built with the `tokenizers` package from the model folder.

Upstream loads `Qwen2TokenizerFast` from `vocab.json` + `merges.txt` + `tokenizer_config.json` (or a
`tokenizer.json`); we build the same pipeline: NFC, the Qwen2 split regex, byte-level mapping, BPE, and
the special tokens of `added_tokens_decoder` kept whole. The prompt templates are upstream's.
"""
from __future__ import annotations

from pathlib import Path

from ..formats.checkpoint import load_json, load_tokenizer, read_text_bounded, tokenizer_errors

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


class TextTokenizer:
    def __init__(self, folder: str | Path) -> None:
        try:
            import tokenizers
            from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
        except ImportError:
            raise ImportError("Qwen3-TTS needs the `tokenizers` package for its text tokenizer "
                              "(pip install tokenizers; ComfyUI already ships it)") from None
        folder = Path(folder)
        full = folder / "tokenizer.json"
        if full.is_file():
            self.tok = load_tokenizer(full, "Qwen3-TTS text tokenizer")
            return
        vocab, merges = folder / "vocab.json", folder / "merges.txt"
        for f in (vocab, merges):
            if not f.is_file():
                raise FileNotFoundError(f"Qwen3-TTS text tokenizer: {f} not found (expected vocab.json and "
                                        f"merges.txt, or tokenizer.json, in {folder})")
        special: list[tuple[int, str, bool]] = []
        config = folder / "tokenizer_config.json"
        if config.is_file():
            try:
                added = load_json(config, "Qwen3-TTS text tokenizer").get("added_tokens_decoder") or {}
                special = [(int(i), e["content"], bool(e.get("special", True)))
                           for i, e in sorted(added.items(), key=lambda kv: int(kv[0]))]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"Qwen3-TTS text tokenizer: {config} is not a valid tokenizer config: {e}") from None
        try:
            table = load_json(vocab, "Qwen3-TTS text tokenizer")
            lines = read_text_bounded(merges, "Qwen3-TTS text tokenizer").splitlines()
            pairs = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
            # Added tokens keep the ids tokenizer_config.json gives them, gaps included.
            for idx, content, _ in special:
                table.setdefault(content, idx)
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"Qwen3-TTS text tokenizer: {vocab} / {merges} could not be read: {e}") from None
        with tokenizer_errors("Qwen3-TTS text tokenizer", vocab, merges,
                              expected="a Qwen2 BPE vocabulary and its merges"):
            bpe = models.BPE(vocab=table, merges=pairs, unk_token=None, byte_fallback=False)
        tok = Tokenizer(bpe)
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        for idx, content, is_special in special:
            token = AddedToken(content, special=is_special, normalized=False, lstrip=False, rstrip=False,
                               single_word=False)
            tok.add_special_tokens([token]) if is_special else tok.add_tokens([token])
            if tok.token_to_id(content) != idx:
                raise ValueError(f"Qwen3-TTS text tokenizer: special token {content!r} got id "
                                 f"{tok.token_to_id(content)}, tokenizer_config.json says {idx}")
        self.tok = tok
        self._version = tokenizers.__version__

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids
