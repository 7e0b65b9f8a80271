"""Upstream IndexTTS 2's segmentation of a text, recorded for tests/indextts2/test_segments.py.

    "$REF_VENV"/bin/python tests/indextts2/make_segment_fixtures.py "$INDEXTTS_REPO"   # or the env var

For each text of TEXTS: upstream's TextTokenizer (indextts/utils/front.py) on the suite's tiny bpe.model
(tiny.write_bpe) tokenizes it, with upstream's TextNormalizer on its Mac/Windows number normalisers
(wetext, as the engine runs them; fixtures/frontend.json compares them with its Linux ones, the
WeTextProcessing grammars; `pip install wetext==0.1.8` into the reference venv); upstream's split_segments cuts
the pieces (max_text_tokens_per_segment=120, infer_v2's default). For each token list of TOKEN_CASES
(pieces the real bpe.model yields: "▁.", "▁,", "-", "'"), split_segments alone. The join: upstream's
IndexTTS2.insert_interval_silence (infer_v2.py, its source executed alone: importing infer_v2 loads the
whole model stack) on segment waveforms of known lengths. Written to fixtures/segments.json.
"""
from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "你好世界。今天天气很好！你好？",
    "HELLO WORLD. HI THERE! THIS IS A TEST?",
    "Hello world. This is a test, speak slowly and softly.",
    "你好，世界、今天：天气；很好。",
    "Good morning!\nThank you.\n\nHi there?",
    "“你好”世界（今天）《天气》【很好】。",
    "Where's the world? It's a test... Hi there!",
    "HELLO - WORLD - HI - THERE - THIS - IS - A - TEST",
    "你好世界" * 40,
    "今天天气很好，" * 30 + "你好。",
    "HELLO WORLD, " * 40,
    "This is a test. " * 30,
    "你好 HELLO 世界 WORLD。今天 GOOD MORNING！",
    "Hi there... thank you!!! Good morning??",
    "A. B. C. D. E.",
    "你。好。世。界。",
    "Thank you ~ good morning — hi there.",
    "今天天气很好。" * 25,
    "Speak slowly and softly; hello world: this is a test.",
    "HI",
    "好",
    "SPEAK SLOWLY AND SOFTLY " * 20 + "THANK YOU.",
    "你好, world. 今天 is a test! 很好? yes.",
]
# Pieces of the real bpe.model's kinds, to reach every branch of split_segments_by_token.
WORDS = ["▁HELLO", "▁WORLD", "▁THIS", "▁IS", "▁A", "▁TEST"]
TOKEN_CASES = [
    WORDS + ["▁."] + WORDS + ["?"] + WORDS + ["!"],
    WORDS + ["▁,"] + WORDS + ["▁."] + ["▁'"] + WORDS,
    WORDS + ["."] + ["'"] + WORDS + ["."],
    ["▁A", "▁."] + WORDS + ["▁..."] + WORDS,
    WORDS * 30,
    (WORDS + ["▁,"]) * 30 + ["."],
    (WORDS + ["-"]) * 30,
    WORDS * 10 + ["▁,"] + WORDS * 25 + ["▁."],
    (WORDS * 3 + ["."]) * 12,
    ["你", "好", "世", "界", "."] * 40,
    ["."] * 5 + WORDS,
    WORDS * 10 + ["-"] + WORDS * 15 + ["▁,"] + WORDS * 5,
]
WAVE_LENGTHS = [[1000], [1000, 2000], [500, 0, 700, 3]]


def upstream_functions(repo: Path) -> tuple[type, type, callable]:
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # indextts.utils.common imports torchaudio; the CUDA-linked wheel needs the shim on CPU
    torchaudio_shim.install()
    from indextts.utils.front import TextNormalizer, TextTokenizer
    tree = ast.parse((repo / "indextts" / "infer_v2.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "IndexTTS2")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "insert_interval_silence")
    scope: dict = {"torch": torch}
    exec(compile(ast.Module([fn], []), "infer_v2.py", "exec"), scope)
    return TextNormalizer, TextTokenizer, scope["insert_interval_silence"]


def zero_runs(wav: torch.Tensor) -> list[list[int]]:
    """[start, end) of each run of zeros: where the silences lie."""
    runs: list[list[int]] = []
    for i, v in enumerate(wav.tolist()):
        if v == 0:
            if runs and runs[-1][1] == i:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
    return runs


def main(repo: Path) -> None:
    TextNormalizer, TextTokenizer, insert_interval_silence = upstream_functions(repo)
    from wetext import Normalizer
    normalizer = TextNormalizer(enable_glossary=True)
    normalizer.zh_normalizer = Normalizer(remove_erhua=False, lang="zh", operator="tn")   # load()'s non-Linux branch
    normalizer.en_normalizer = Normalizer(lang="en", operator="tn")
    with tempfile.TemporaryDirectory() as tmp:
        bpe = Path(tmp) / "bpe.model"
        tiny.write_bpe(bpe)
        tokenizer = TextTokenizer(str(bpe), normalizer)
        texts = []
        for text in TEXTS:
            tokens = tokenizer.tokenize(text)
            texts.append({"text": text, "tokens": tokens, "segments": tokenizer.split_segments(tokens, 120)})
    cases = [{"tokens": t, "segments": TextTokenizer.split_segments_by_token(
        t, tokenizer.punctuation_marks_tokens, max_text_tokens_per_segment=120)} for t in TOKEN_CASES]
    joins = []
    for lengths in WAVE_LENGTHS:
        wavs = [torch.ones(1, n) for n in lengths]
        joined = torch.cat(insert_interval_silence(None, wavs, sampling_rate=22050, interval_silence=200), dim=1)
        joins.append({"lengths": lengths, "sample_rate": 22050, "interval_silence": 200,
                      "zero_runs": zero_runs(joined[0]), "total": joined.shape[1]})
    out = {"texts": texts, "token_cases": cases, "joins": joins}
    (tiny.FIXTURES / "segments.json").write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    print(len(texts), "texts,", len(cases), "token cases,", len(joins), "joins")


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INDEXTTS_REPO")
    if not source:
        sys.exit("make_segment_fixtures.py needs index-tts's source: pass its folder or set $INDEXTTS_REPO")
    main(Path(source))
