"""Upstream Fish Speech S2's batches of a text, recorded for tests/fish_speech/test_segments.py.

    python tests/fish_speech/make_segment_fixtures.py "$FISH_SPEECH_REPO"     # any Python 3.10+

From the checkout's fish_speech/models/text2semantic/inference.py (the head, S2), split_text_by_speaker
and group_turns_into_batches are executed from their source (the module imports the model stack), as
generate_long calls them: `batches = group_turns_into_batches(turns, max_speakers=5,
max_bytes=chunk_length)` when the text has speaker turns, else `[text]`; chunk_length 512 (generate_long's
default) and 200 (the API server's). S1 (fish-speech 0.1.0, the parent of daa9b4f) has no batching: its
generate_long reads the whole text as one TextPart. Written to fixtures/segments.json.
"""
from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "Hello there. How are you today?\nI am fine, thank you!",
    "第一句。\n第二句！\n\n第三句？",
    "こんにちは。今日はいい天気ですね！",
    "(excited) What a day! (whispering) Keep it quiet.",
    "This is a sentence. " * 40,
    "这是一个很长的句子，" * 60 + "结束。",
    "Numbers 1, 2, 3.5 and 2025-01-01.",
    "<|speaker:0|>Hello there.<|speaker:1|>Hi! How are you?",
    "<|speaker:0|>你好。<|speaker:1|>你好！<|speaker:0|>今天天气很好。",
    "Before the tag. <|speaker:0|>After the tag.",
    "".join(f"<|speaker:{i % 2}|>Turn number {i}. " for i in range(8)),
    "".join(f"<|speaker:{i % 3}|>这是第{i}句话，说得比较长一些。" for i in range(12)),
    "<|speaker:0|>" + "Long single turn. " * 40,
    "  leading and trailing spaces.  ",
    "Mixed 中文 and English. 再来一句！",
    "[laugh] That is funny. [sigh] Okay.",
    "<|speaker:0|>A.<|speaker:1|>B.<|speaker:2|>C.<|speaker:3|>D.<|speaker:4|>E.",
    "<|speaker:0|>A.<|speaker:1|>B.<|speaker:2|>C.<|speaker:3|>D.<|speaker:4|>E.<|speaker:5|>F.",
    "Line one\nLine two\n\nLine three",
]


def main(repo: Path) -> None:
    tree = ast.parse((repo / "fish_speech" / "models" / "text2semantic" / "inference.py").read_text())
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name in ("split_text_by_speaker", "group_turns_into_batches")]
    scope: dict = {"re": re}
    exec(compile(ast.Module(nodes, []), "inference.py", "exec"), scope)
    out = []
    for text in TEXTS:
        turns = scope["split_text_by_speaker"](text)
        case = {"text": text}
        for chunk_length in (512, 200):
            case[f"batches_{chunk_length}"] = (scope["group_turns_into_batches"](turns, max_speakers=5,
                                                                                max_bytes=chunk_length)
                                               if turns else [text])
        out.append(case)
    (HERE / "fixtures").mkdir(exist_ok=True)
    (HERE / "fixtures" / "segments.json").write_text(json.dumps(out, ensure_ascii=False, indent=0))
    print([(len(c["batches_512"]), len(c["batches_200"])) for c in out])


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("FISH_SPEECH_REPO")
    if not source:
        sys.exit("make_segment_fixtures.py needs fish-speech's source: pass its folder or set $FISH_SPEECH_REPO")
    main(Path(source))
