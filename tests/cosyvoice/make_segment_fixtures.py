"""Upstream CosyVoice's text front end, recorded for tests/cosyvoice/test_segments.py and test_normalize.py.

    "$REF_VENV"/bin/python tests/cosyvoice/make_segment_fixtures.py "$COSYVOICE_REPO" "$WETEXT_FSTS"

(or the environment variables). Upstream's CosyVoiceFrontEnd.text_normalize (cosyvoice/cli/frontend.py)
as it runs with upstream's requirements installed: text_frontend 'wetext' (wetext==0.0.4, its
`Normalizer(remove_erhua=False)` for Chinese and `Normalizer()` for English) and inflect==7.3.1, with
upstream's CosyVoice2Tokenizer / CosyVoice3Tokenizer on the suite's tiny BPE (tiny.write_tokenizer) as
split_paragraph's token counter. The method runs on a namespace holding only the fields it reads (the real
constructor also loads the ONNX models).

wetext 0.0.4 downloads its graphs at construction (`modelscope.snapshot_download("pengzhendong/wetext")`),
which cannot run here: a stand-in `modelscope` returns $WETEXT_FSTS, the `fsts` folder of wetext 0.1.8's
wheel (zh/tn and en/tn tagger.fst / verbalizer.fst, the layout 0.0.4 reads). Assumption: those are the
same compiled WeTextProcessing grammars the download serves. Writes fixtures/segments.json (TEXTS, v2 and
v3 tokenizers) and fixtures/normalize_table.json (ZH and EN: split=True segments, split=False text).
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

# The front-end table: numbers, dates, times, currency, percentages, phone numbers, units, abbreviations,
# ordinals, mixed text and paragraphs that split.
ZH = [
    "今天是2024年3月15日，星期五。",
    "会议定在2023-10-01上午9:30开始。",
    "他出生于1998年，今年26岁。",
    "现在是下午3点45分。",
    "比赛在晚上8:05:30结束。",
    "这件衣服售价199元。",
    "房价涨到了每平方米5.6万元。",
    "我花了$25买了一本书。",
    "一共是￥1234.56，请付款。",
    "增长率达到了12.5%。",
    "合格率是99.9%，不合格率是0.1%。",
    "请拨打电话13812345678联系我。",
    "客服热线是400-800-1234。",
    "座机号码是010-88886666。",
    "他身高180cm，体重75kg。",
    "这段路长3.5km，限速60km/h。",
    "今天气温-3℃到5℃。",
    "房间面积是25m²，体积是60m³。",
    "他排名第1，她排名第23。",
    "这是第3届比赛，共有128支队伍。",
    "比分是3:2，主队获胜。",
    "请翻到第15页第2行。",
    "三分之二可以写成2/3。",
    "圆周率约等于3.14159。",
    "人口约有14亿，即1400000000人。",
    "他的编号是007。",
    "版本号是v2.0.1。",
    "电压是220V，功率是1500W。",
    "这台电脑有16GB内存和512GB硬盘。",
    "网速达到100Mbps。",
    "我们在2019年至2021年间合作。",
    "时间范围是1-5天。",
    "他在NBA打了10个赛季。",
    "我用iPhone 15拍的照片。",
    "请在AI和GPU方面多投入。",
    "这是一个很好的idea，我们try一下。",
    "你好，Hello，今天是Monday。",
    "ABC公司的CEO今天来访。",
    "我的邮箱是test@example.com。",
    "网址是www.example.com。",
    "第1名奖金10000元，第2名5000元。",
    "零下10度，风力3到4级。",
    "他跑了42.195公里的马拉松。",
    "股价下跌了-2.5%。",
    "每天工作8小时，每周5天。",
    "他说：“我明天9点到。”",
    "1、准备材料；2、开始制作；3、完成。",
    "这是（括号里的内容）和【方括号】。",
    "2008年8月8日晚上8点，北京奥运会开幕。",
    "今天天气很好，温度是25度，湿度是60%，我们去公园散步吧，" * 3 + "好的。",
    "第一章讲了1949年的故事。第二章讲了1978年的改革。第三章讲了2001年加入世贸组织。第四章讲了2008年的奥运会。第五章讲了2020年的疫情。",
    "这是一个很长的句子，里面有数字123和456。" * 6,
    "价格从100元涨到了150元，涨幅是50%。",
    "请在12月31日23:59之前提交。",
    "他的车牌号是京A12345。",
    "2024年第1季度营收为1.5亿元，同比增长20%，净利润达到3000万元。" * 4,
    "第一段：今天是1月1日，气温5℃。\n第二段：明天是1月2日，气温-2℃。\n" * 4,
]
EN = [
    "Today is March 15, 2024.",
    "The meeting is on 2023-10-01 at 9:30 am.",
    "She was born in 1998 and is 26 years old.",
    "It is 3:45 pm now.",
    "The race ended at 8:05:30.",
    "The shirt costs $19.99.",
    "The house sold for $1,250,000.",
    "I paid £25 for the book.",
    "The total is €1234.56.",
    "Growth reached 12.5% this year.",
    "The pass rate is 99.9%.",
    "Call me at 555-123-4567.",
    "The number is (800) 555-0199.",
    "He is 180 cm tall and weighs 75 kg.",
    "The road is 3.5 km long.",
    "The speed limit is 60 mph.",
    "It was -3°C this morning.",
    "The room is 25 m² in size.",
    "He finished 1st and she finished 23rd.",
    "This is the 3rd time and the 101st attempt.",
    "The score was 3-2.",
    "Turn to page 15, line 2.",
    "Two thirds is 2/3.",
    "Pi is about 3.14159.",
    "The population is about 1400000000.",
    "His code name is 007.",
    "Version 2.0 was released.",
    "The 1980s were a great decade.",
    "The voltage is 220V and the power is 1500W.",
    "The laptop has 16GB of RAM.",
    "Dr. Smith lives on Baker St. in London.",
    "Mr. and Mrs. Jones met Prof. Lee.",
    "The U.S.A. and the U.K. signed the deal.",
    "NASA and the FBI worked together.",
    "We met at 10 a.m. on Jan. 5th.",
    "I have 3 apples and 12 oranges.",
    "In 2020, 45% of the 300 people agreed.",
    "Chapter 11 starts on page 205.",
    "The year 2000 was a leap year.",
    "World War II ended in 1945.",
    "It costs $5 per hour or $100 per day.",
    "The temperature rose by 2.5 degrees.",
    "Send it to test@example.com today.",
    "Visit www.example.com for more.",
    "The flight AA123 leaves at 6:15.",
    "He ran 26.2 miles in 3 hours.",
    "Rooms 101 to 110 are free.",
    "He said \"I will be there at 9.\"",
    "Hello there. How are you today? I am fine; thank you: really.",
    "It's 5 o'clock somewhere, isn't it?",
    "The first step is easy. The second step is harder. The third step takes 3 days. " * 3,
    "In 1969, Apollo 11 landed on the Moon; 8 days later it returned. " * 4,
    "Prices went from $100 to $150, a 50% increase.",
    "Submit before 11:59 pm on December 31.",
    "I'm 100% sure it's the 2nd of May.",
    "Score: 21-7-3, about ~5 min in.",
    "Arabic-Indic ١٢٣ and full-width １２３ digits.",   # TN keeps them, inflect spells them out
    "Squares: x² and y³.",                           # str.isdigit() digits: inflect's reading of them
    "Item #42 is sold.",                             # wetext's grammar has no reading: upstream fails
    "He was #1 in the charts.",
    "Tel: +1 202 555 0143.",
]


def wetext_stand_in(fsts: Path) -> None:
    """`modelscope` as wetext 0.0.4 imports it: snapshot_download gives the local graphs' folder."""
    import importlib.machinery
    for lang in ("zh", "en"):
        for name in ("tagger.fst", "verbalizer.fst"):
            if not (fsts / lang / "tn" / name).is_file():
                raise SystemExit(f"{fsts / lang / 'tn' / name} not found: $WETEXT_FSTS must be wetext 0.1.8's fsts folder")
    stub = types.ModuleType("modelscope")
    stub.__spec__ = importlib.machinery.ModuleSpec("modelscope", None)
    stub.snapshot_download = lambda repo, *a, **k: str(fsts) if repo == "pengzhendong/wetext" else None
    sys.modules["modelscope"] = stub


def record(front: types.SimpleNamespace, text: str) -> dict:
    """One table row: the segments and the whole normalised text, or the exception upstream raises."""
    from cosyvoice.cli.frontend import CosyVoiceFrontEnd
    try:
        return {"text": text, "segments": CosyVoiceFrontEnd.text_normalize(front, text, split=True),
                "normalized": CosyVoiceFrontEnd.text_normalize(front, text, split=False)}
    except Exception as e:
        return {"text": text, "error": type(e).__name__}


def main(repo: Path, fsts: Path) -> None:
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "third_party" / "Matcha-TTS"))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # the CUDA-linked torchaudio wheel imports on CPU torch (Python parts only)
    torchaudio_shim.install()
    wetext_stand_in(fsts)
    from importlib.metadata import version

    import inflect
    from wetext import Normalizer

    from cosyvoice.cli.frontend import CosyVoiceFrontEnd
    from cosyvoice.tokenizer.tokenizer import CosyVoice2Tokenizer, CosyVoice3Tokenizer
    assert version("wetext") == "0.0.4" and version("inflect") == "7.3.1", "upstream's requirements.txt pins"

    # upstream's constructor, the text front-end part (frontend.py: `from wetext import Normalizer as ...`)
    zh_tn, en_tn = Normalizer(remove_erhua=False), Normalizer()
    segments: dict[str, list] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny.write_tokenizer(Path(tmp))
        fronts = {v: types.SimpleNamespace(text_frontend="wetext", tokenizer=cls(tmp), allowed_special="all",
                                           inflect_parser=inflect.engine(), zh_tn_model=zh_tn, en_tn_model=en_tn)
                  for v, cls in ((2, CosyVoice2Tokenizer), (3, CosyVoice3Tokenizer))}
        for v, front in fronts.items():
            segments[f"v{v}"] = [{"text": t, "segments": CosyVoiceFrontEnd.text_normalize(front, t, split=True)}
                                 for t in TEXTS]
        table = {lang: [record(fronts[2], t) for t in texts] for lang, texts in (("zh", ZH), ("en", EN))}
    (tiny.FIXTURES / "segments.json").write_text(json.dumps(segments, ensure_ascii=False, indent=0))
    (tiny.FIXTURES / "normalize_table.json").write_text(json.dumps(table, ensure_ascii=False, indent=0))
    print({k: [len(c["segments"]) for c in v] for k, v in segments.items()})
    print({k: len(v) for k, v in table.items()})


if __name__ == "__main__":
    args = sys.argv[1:] + [None, None]
    source = args[0] or os.environ.get("COSYVOICE_REPO")
    fsts = args[1] or os.environ.get("WETEXT_FSTS")
    if not source or not fsts:
        sys.exit("make_segment_fixtures.py needs CosyVoice's source and wetext 0.1.8's fsts folder: pass them or "
                 "set $COSYVOICE_REPO and $WETEXT_FSTS")
    main(Path(source), Path(fsts))
