"""Upstream GPT-SoVITS's segmentation of a text, recorded for tests/gpt_sovits/test_segments.py.

    "$REF_VENV"/bin/python tests/gpt_sovits/make_segment_fixtures.py "$GPT_SOVITS_REPO"   # or the env var

Each text of TEXTS through upstream's TextPreprocessor.pre_seg_text(text, lang, "cut5") (api_v2's default
text_split_method) for lang "zh" and "en". text_segmentation_method.py is loaded as it is; from
TextPreprocessor.py, whose imports load BERT, G2PW and the language detector, only the functions that
pre_seg_text runs (get_first, merge_short_text_in_array, pre_seg_text, filter_text) are executed, from
their source. Also cut0-cut4 ("methods") on these texts and on the front-end fixtures' sentences
(fixtures/english.json, zhfront.json) joined five at a time. Written to fixtures/segments.json.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

TEXTS = [
    "今天天气很好。我们去公园散步吧！",
    "你好，我是小明。你好，我是小红。你好，我是小刚。你好，我是小张。",
    "第一句。\n第二句！\n\n第三句？",
    "好。今天天气很好",
    "先帝创业未半而中道崩殂，今天下三分，益州疲弊，此诚危急存亡之秋也。",
    "价格是3.14元，温度是-5度；时间：12:30。",
    "Hello there. How are you today? I am fine, thank you!",
    "Hi. This is short.",
    "Hello world",
    "Hello there.\nHow are you?\n\nFine!",
    "This is a sentence. " * 30,
    "这是一个很长的句子，没有句号" * 50,
    "你好 Hello! " * 20 + "😀。",
    "……——今天……天气——很好",
    "A, b, c, d, e, f.",
    "你好、世界、今天、天气。",
    "Mixed 中文 and English. 再来一句！And one more?",
    "こんにちは。今日はいい天気ですね！散歩に行きましょう。",
    "  leading spaces. trailing spaces.  ",
    "他说：“你好。”然后走了…真的吗？",
    "1.5, 2.5, and 3.75 are numbers.",
    "~波浪~线~",
    "嗯",
    "!!!Hello???",
    "字" * 600,
    "word " * 130,
    "长句没有句号" * 60 + "。" + "短句。" * 3,
]


def upstream(repo: Path) -> types.SimpleNamespace:
    root = repo / "GPT_SoVITS"
    # loaded by path: the package's __init__ imports TTS.py (torchaudio, the models)
    spec = importlib.util.spec_from_file_location("text_segmentation_method",
                                                  root / "TTS_infer_pack" / "text_segmentation_method.py")
    seg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg)
    tree = ast.parse((root / "TTS_infer_pack" / "TextPreprocessor.py").read_text())
    wanted = {"get_first", "merge_short_text_in_array"}
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TextPreprocessor")
    nodes += [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("pre_seg_text", "filter_text")]
    scope = {"re": re, "splits": seg.splits, "split_big_text": seg.split_big_text,
             "get_seg_method": seg.get_method, "i18n": lambda s: s, "print": lambda *a, **k: None}
    exec(compile(ast.Module(nodes, []), "TextPreprocessor.py", "exec"), scope)
    return types.SimpleNamespace(pre_seg_text=scope["pre_seg_text"], filter_text=scope["filter_text"])


METHODS = ("cut0", "cut1", "cut2", "cut3", "cut4")


def main(repo: Path) -> None:
    up = upstream(repo)
    me = types.SimpleNamespace(filter_text=lambda texts: up.filter_text(None, texts))
    out = {lang: [{"text": t, "segments": up.pre_seg_text(me, t, lang, "cut5")} for t in TEXTS] for lang in ("zh", "en")}
    # cut0-cut4 (the webui's other methods) on TEXTS and on the front-end fixtures' sentences joined five at a
    # time (English as "en", Chinese as "zh")
    english = list(json.loads((FIXTURES / "english.json").read_text(encoding="utf-8"))["cases"])
    chinese = list(json.loads((FIXTURES / "zhfront.json").read_text(encoding="utf-8"))["pypinyin"])
    paragraphs = {"en": TEXTS + [" ".join(english[i:i + 5]) for i in range(0, len(english), 5)],
                  "zh": TEXTS + ["".join(chinese[i:i + 5]) for i in range(0, len(chinese), 5)]}
    out["methods"] = {lang: [{"text": t, **{m: up.pre_seg_text(me, t, lang, m) for m in METHODS}} for t in texts]
                      for lang, texts in paragraphs.items()}
    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / "segments.json").write_text(json.dumps(out, ensure_ascii=False, indent=0))
    print({k: [len(c["segments"]) for c in out[k]] for k in ("zh", "en")},
          {k: len(v) for k, v in out["methods"].items()})


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("GPT_SOVITS_REPO")
    if not source:
        sys.exit("make_segment_fixtures.py needs GPT-SoVITS's source: pass its folder or set $GPT_SOVITS_REPO")
    main(Path(source))
