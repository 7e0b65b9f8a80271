"""Upstream CosyVoice's segmentation of a text, recorded for tests/cosyvoice/test_segments.py.

    "$REF_VENV"/bin/python tests/cosyvoice/make_segment_fixtures.py "$COSYVOICE_REPO"   # or the env var

Each text of TEXTS through upstream's CosyVoiceFrontEnd.text_normalize(text, split=True)
(cosyvoice/cli/frontend.py) with no text front-end (text_frontend = '': neither ttsfrd nor wetext, the
engine's case) and upstream's CosyVoice2Tokenizer / CosyVoice3Tokenizer on the suite's tiny BPE
(tiny.write_tokenizer) as split_paragraph's token counter. Upstream spells out digits of non-Chinese
text with inflect, which the engine does not: the identity stands in, so the fixture compares the
segmentation. The method runs on a namespace holding only the fields it reads (the real constructor loads
the ONNX models). Written to fixtures/segments.json.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "你好 世界. 今天（测试）天气【很好】——真的x²，",
    "第一句。\n第二句！\n\n第三句？",
    "他说：“你好。”然后走了；我们、你们、他们。",
    "今天天气很好，我们去公园散步吧，" * 6 + "好的。",
    "这是一个很长的句子。" * 20,
    "你好 Hello world, 今天 is a good day. 好的!",
    "2025年1月1日，温度是-5度。价格是12.5元！",
    "Hello there. How are you today? I am fine; thank you: really.",
    "Hello there.\nHow are you?\n\nFine!",
    "This is a sentence. " * 30,
    "One, two, three, four, five, six, seven, eight, nine, ten, " * 5 + "done",
    "He said \"stop.\" Then he left. Really?",
    "I have 3 apples and 12 oranges.",
    "no punctuation at the end",
    "...",
    "Hi. ! Ok.",
    "<|im_start|>你好 世界.<|im_end|>",
    "A very short one.",
    "短。",
    "第一 - 第二 - 第三。",
    "Mixed 中文 and English. 再来一句！And one more?",
    "こんにちは。今日はいい天気ですね！",
    "   leading and trailing spaces.   ",
    "一、二、三、四、五、六、七、八、九、十、" * 8,
]


def main(repo: Path) -> None:
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "third_party" / "Matcha-TTS"))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # the CUDA-linked torchaudio wheel imports on CPU torch (Python parts only)
    torchaudio_shim.install()
    from cosyvoice.cli.frontend import CosyVoiceFrontEnd
    from cosyvoice.tokenizer.tokenizer import CosyVoice2Tokenizer, CosyVoice3Tokenizer

    out: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny.write_tokenizer(Path(tmp))
        for version, cls in ((2, CosyVoice2Tokenizer), (3, CosyVoice3Tokenizer)):
            front = types.SimpleNamespace(text_frontend="", tokenizer=cls(tmp), allowed_special="all",
                                          inflect_parser=types.SimpleNamespace(number_to_words=lambda s: s))
            out[f"v{version}"] = [{"text": t, "segments": CosyVoiceFrontEnd.text_normalize(front, t, split=True)}
                                  for t in TEXTS]
    (tiny.FIXTURES / "segments.json").write_text(json.dumps(out, ensure_ascii=False, indent=0))
    print({k: [len(c["segments"]) for c in v] for k, v in out.items()})


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COSYVOICE_REPO")
    if not source:
        sys.exit("make_segment_fixtures.py needs CosyVoice's source: pass its folder or set $COSYVOICE_REPO")
    main(Path(source))
