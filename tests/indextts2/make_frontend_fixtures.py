"""Upstream IndexTTS 2's text front end on sentences with numbers, dates, units ..., recorded for
tests/indextts2/test_frontend.py.

    "$REF_VENV"/bin/pip install wetext==0.1.8 WeTextProcessing==1.2.0     # pynini comes with the latter
    "$REF_VENV"/bin/python tests/indextts2/make_frontend_fixtures.py "$INDEXTTS_REPO"   # or the env var

For each sentence: upstream's TextNormalizer(enable_glossary=True) (indextts/utils/front.py, as
IndexTTS2.__init__ builds it) and its TextTokenizer on the suite's tiny bpe.model (tiny.write_bpe), once
with each of upstream's two number normalisers: wetext (its Mac/Windows path, set as `load` would set it)
and WeTextProcessing (its Linux path, `load` itself: pynini grammars built into indextts/utils/tagger_cache).
GLOSSARY_CASES run with upstream's `load_glossary` of GLOSSARY first. Written to fixtures/frontend.json:
per sentence the normalised text and the BPE pieces of both.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

ZH = [
    "IndexTTS 正式发布1.0版本了，效果666", "晕XUAN4是一种GAN3觉", "我爱你！", "“我爱你”的英语是“I love you”",
    "2.5平方电线", "共465篇，约315万字", "2002年的第一场雪，下在了2003年", "速度是10km/h",
    "现在是北京时间2025年01月11日 20:00", "他这条裤子是2012年买的，花了200块钱", "电话：135-4567-8900", "1键3连",
    "他这条视频点赞3000+，评论1000+，收藏500+", "这是1024元的手机，你要吗？", "受不liao3你了",
    "“衣裳”不读衣chang2，而是读衣shang5", "最zhong4要的是：不要chong2蹈覆辙", "不zuo1死就不会死", "8:00 AM 开会",
    "数到3就开始：1、2、3", "5G网络是4G网络的升级版，2G网络是3G网络的前身",
    "苹果于2030/1/2发布新 iPhone 2X 系列手机，最低售价仅 ¥12999", "这酒...里...有毒...", "只有,,,才是最好的",
    "babala2是什么？", "用beta1测试", "今天是个好日子 it's a good day",
    "GPT-5-Nano 是 GPT-5 模型家族中最小且速度最快的变体", "2025/09/08 IndexTTS-2 全球发布",
    "约瑟夫·高登-莱维特（Joseph Gordon-Levitt is an American actor）",
    "蒂莫西·唐纳德·库克（英文名：Timothy Donald Cook），通称蒂姆·库克（Tim Cook），美国商业经理。",
    "《盗梦空间》由克里斯托弗·诺兰执导，2010年7月16日在美国上映。", "钛合金骨架仅3.2g无负重感，随步伐产生0.01mm振幅。",
    "今天气温-5℃到3℃。", "本次考试及格率为85.5%，比去年提高了3个百分点。", "会议定于下午3点30分开始。",
    "他的身高是1.85米，体重75公斤。", "这个房间面积为25平方米。", "2024年第一季度GDP同比增长5.3%。",
    "请拨打客服热线400-820-8820。", "我的手机号是13812345678。", "价格是￥99.9元，打八折后是79.92元。",
    "第1名是张三，第2名是李四。", "比分是3:2，主队获胜。", "他出生于1990年5月20日。", "1/3的人同意，2/3的人反对。",
    "那座山海拔8848.86米。", "我住在302房间。", "这辆车时速120公里。", "奥运会于2008年8月8日晚上8点开幕。",
    "圆周率约等于3.14159。", "温度上升了10%～20%。", "他跑了42.195公里的马拉松。", "我的邮箱是abc123@qq.com",
    "哪儿好玩儿？", "嗯，啊，这个嘛。", "这个软件支持Windows 10和macOS 14。", "買了３本書，花了１２０元。",
    "公元前221年，秦始皇统一六国。", "我们在2023-10-01见面。", "北京时间12:05:30。", "银<行|hang2>的利率是3.5%",
    "这个CosyVoice-2模型和F5-TTS比较。", "这件事发生在80年代。", "电池容量5000mAh，支持65W快充。",
    "我今年25岁。\n明天26岁。  ", "新款售价$299，约合人民币2100元。",
]
EN = [
    "I love you!", "See you at 8:00 AM", "Couting down 3, 2, 1, go!", "This sales for 2.5% off, only $12.5.",
    "have you ever been to beta2?", "where's the money?", "who's there?", "which's the best?", "how's it going?",
    "such as XTTS, CosyVoice2, Fish-Speech, and F5-TTS",
    "GPT-5-Nano is the smallest and fastest variant in the GPT-5 model family.",
    "Here are some highly-rated M.2 NVMe SSDs: Samsung 9100 PRO PCIe 5.0 SSD M.2, $139.99",
    "we dive deep into the showdown between DisplayPort 1.4 and HDMI 2.1 to determine which is the best choice",
    "The meeting is on January 5th, 2024 at 10:30 am.", "It costs $5.99 plus tax.", "Call me at 555-123-4567.",
    "He finished 1st, she finished 3rd, and I was 22nd.", "Pi is approximately 3.14159.",
    "Version 2.0 was released in the 1980s.", "Add 1/2 cup of sugar.", "The temperature dropped to -5 degrees.",
    "Dr. Smith lives at 221B Baker St.", "Mr. and Mrs. Jones arrived at 7 p.m.", "The population is 7,900,000,000.",
    "I ran 5 km in 25 minutes.", "The package weighs 2.5 kg.", "It grew by 15% in 2023.", "Today is 2024-03-15.",
    "The date was 12/25/2023.", "We sold 1,234 units for €2,500.", "World War II ended in 1945.",
    "Chapter 11 starts on page 237.", "The score was 3-2.", "It is 98.6°F outside.", "My flight leaves at 6:45.",
    "He is 6 ft tall.", "The speed limit is 65 mph.", "She earned £50,000 last year.", "About 100,000 people attended.",
    "Room 404 was not found.", "It's a 3.5-inch drive.", "Queen Elizabeth II was born in 1926.",
    "I have 2 cats and 3 dogs.", "The 19th century ended.", "Email me at john@example.com.",
    "Use 4G or 5G networks.", "The ratio is 16:9.", "Prices rose 0.5 percent.", "He was born on July 4, 1976.",
    "That's what she said, isn't it?", "The CPU runs at 3.2 GHz with 8 GB RAM.", "Take 2 tablets every 4 hours.",
    "Welcome to the 21st century!", "NASA and the FBI met at 9 a.m.", "It's 100% done.",
    "\"Hello\" (she said) [quietly]; then: goodbye...", "Wait — what?! No~ way.", "The <read|R EH D> book costs $20.",
    "hello\nworld  ", "abc@example.com", "Good morning!\nThank you.\n\nHi there?", "It costs $5  today, 3 items.",
]
GLOSSARY = {"C++": {"en": "C plus plus", "zh": "C 加加"}, "C#": "C sharp", "M.2": {"en": "M dot two", "zh": "M 二"},
            "PCIe 5.0": {"en": "PCIE five", "zh": "PCIE 五点零"}, "Inc.": {"en": "Ink"}}
GLOSSARY_CASES = ["I write C++ and C# at Acme Inc.", "我用C++写了一个M.2驱动，支持PCIe 5.0。",
                  "An M.2 SSD on PCIe 5.0 costs $99.", "c++ 和 c# 都是语言"]


def backends(repo: Path):
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # indextts.utils.common imports torchaudio; the CUDA-linked wheel needs the shim on CPU
    torchaudio_shim.install()
    from indextts.utils.front import TextNormalizer, TextTokenizer
    from wetext import Normalizer

    def wetext_normalizer(glossary: dict | None) -> TextNormalizer:
        n = TextNormalizer(enable_glossary=True)
        n.zh_normalizer = Normalizer(remove_erhua=False, lang="zh", operator="tn")   # load()'s non-Linux branch
        n.en_normalizer = Normalizer(lang="en", operator="tn")
        if glossary:
            n.load_glossary(glossary)
        return n

    def wtp_normalizer(glossary: dict | None) -> TextNormalizer:
        n = TextNormalizer(enable_glossary=True)
        n.load()                                                                  # its Linux branch
        if glossary:
            n.load_glossary(glossary)
        return n

    return TextTokenizer, {"wetext": wetext_normalizer, "wetextprocessing": wtp_normalizer}


def main(repo: Path) -> None:
    import platform
    assert platform.system() == "Linux", "the WeTextProcessing recording needs upstream's Linux branch of load()"
    TextTokenizer, makers = backends(repo)
    with tempfile.TemporaryDirectory() as tmp:
        bpe = Path(tmp) / "bpe.model"
        tiny.write_bpe(bpe)
        cases = [{"text": t, "set": "zh"} for t in ZH] + [{"text": t, "set": "en"} for t in EN]
        cases += [{"text": t, "set": "glossary"} for t in GLOSSARY_CASES]
        for name, make in makers.items():
            plain, glossed = make(None), make(GLOSSARY)
            for case in cases:
                normalizer = glossed if case["set"] == "glossary" else plain
                tokenizer = TextTokenizer(str(bpe), normalizer)
                case[name] = {"normalized": normalizer.normalize(case["text"]), "tokens": tokenizer.tokenize(case["text"])}
    from importlib.metadata import version
    out = {"versions": {"wetext": version("wetext"), "WeTextProcessing": version("WeTextProcessing")},
           "glossary": GLOSSARY, "cases": cases}
    (tiny.FIXTURES / "frontend.json").write_text(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    differ = [c["text"] for c in cases if c["wetext"] != c["wetextprocessing"]]
    print(len(cases), "sentences;", len(differ), "where wetext and WeTextProcessing differ:", *differ, sep="\n")


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INDEXTTS_REPO")
    if not source:
        sys.exit("make_frontend_fixtures.py needs index-tts's source: pass its folder or set $INDEXTTS_REPO")
    main(Path(source))
