"""Record upstream's Chinese text normaliser and tone sandhi (reference venv + the repository; README.md).

    /work/venv-gpt-sovits/bin/python tests/gpt_sovits/make_zhnorm_fixtures.py

Tone sandhi: upstream's `ToneSandhi().pre_merge_for_modify` on `jieba_fast.posseg` cuts of SENTENCES (the
text as chinese2.py hands it over: Chinese characters and its ASCII punctuation) and on hand-made
segmentations (SEGMENTS), then `modified_tone` on every merged word with pypinyin's finals (chinese2.py's
`_get_initials_finals`) and on hand-made finals (TONES, the G2PW path's inputs). The script checks that these
cases execute every line of upstream's tone_sandhi.py. Writes fixtures/zhnorm.json; test_zhnorm.py compares.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ.get("GPT_SOVITS_REPO", "/work/upstream-gpt-sovits"))
if not (REPO / "GPT_SoVITS" / "text" / "tone_sandhi.py").is_file():
    sys.exit(f"the upstream repository is not at {REPO}")
sys.path.insert(0, str(REPO / "GPT_SoVITS"))

import jieba_fast  # noqa: E402
import jieba_fast.posseg as psg  # noqa: E402
from pypinyin import Style, lazy_pinyin  # noqa: E402

jieba_fast.setLogLevel(60)

SENTENCES = [
    "我们一起看一看,这个东西到底怎么样.",
    "你不要不高兴,我不是故意的.",
    "他看不懂这本书,也听不清老师的话.",
    "一天一夜,一心一意,一模一样.",
    "第一次来北京,我有点儿紧张.",
    "这是一百一十一块钱,不多不少.",
    "小朋友们在院子里玩儿,玩得很开心.",
    "你好,请问洗手间在哪里?",
    "我很喜欢吃水果,尤其是苹果和葡萄.",
    "老虎和蒙古包都在草原上.",
    "展览馆里有很多好看的画儿.",
    "所有人都想想办法吧!",
    "妈妈说,明天我们去公园走走.",
    "他把桌上的书放到地下了.",
    "你们快上来,我们下去看看.",
    "我买了三个苹果,两个梨.",
    "这件衣服太漂亮了,真是好看啊.",
    "孩子们高高兴兴地回家了.",
    "这件事情,我们还要商量商量.",
    "他是我的好朋友,也是我的老师.",
    "你吃饭了吗?还没呢.",
    "我想试试这双鞋子.",
    "雨一直下,天也越来越冷了.",
    "一个人去旅行,是一种什么样的体验?",
    "他一边走一边唱歌.",
    "我一看就知道不对劲.",
    "这个问题不太好回答.",
    "我也想买一本小说.",
    "你早点儿休息,别太累了.",
    "领导讲话,大家鼓掌.",
    "这里的水很好喝.",
    "展览馆的厂长很有本事.",
    "请你把窗户关上.",
    "他的脾气不好,总是发火.",
    "冬天到了,外面下着大雪.",
    "这个孩子聪明伶俐,大家都喜欢他.",
    "老百姓过上了好日子.",
    "我们学校有一千多名学生.",
    "你知道他在想什么吗?",
    "她笑着说,没关系,不要紧.",
    "我的手机不见了,你看见了没有?",
    "五一劳动节,我们放假三天.",
    "一二三四五,上山打老虎.",
    "这些花花草草真好看.",
    "家家户户都挂上了红灯笼.",
    "我给你讲个故事吧.",
    "他们俩是好兄弟.",
    "小狗在门口汪汪叫.",
    "你去过长城吗?我去过两次.",
    "早上起来,我先洗脸刷牙.",
    "这本书我已经看完了.",
    "请稍等一下,我马上就来.",
    "他们正在讨论明天的计划.",
    "嗯,我知道了.",
    "哎呀,你怎么又迟到了!",
    "我想起来了,他叫小明.",
    "这条路走不通,我们换一条吧.",
    "我洗洗手就来吃饭.",
    "你别管我,我自己能行.",
    "这个展览馆很大,我们走一走吧.",
    "老鼠跑进了厨房里.",
    "买卖不成仁义在.",
    "他跑得很快,像一阵风一样.",
    "我俩一块儿去吧.",
    "他往左一拐就不见了.",
    "说一说你的想法.",
    "只有你能帮我.",
    "马上就好了,再等一会儿.",
]

# Hand-made segmentations for the merges jieba rarely produces.
SEGMENTS = [
    [("听", "v"), ("一", "m"), ("听", "v")],
    [("听", "v"), ("一", "m"), ("听", "n")],
    [("一", "m"), ("段", "q"), ("话", "n")],
    [("好", "a"), ("不", "d")],
    [("不", "d"), ("不", "d"), ("好", "a")],
    [("不", "d")],
    [("一", "m")],
    [("看", "v"), ("看", "v"), ("书", "n")],
    [("纸", "n"), ("老虎", "n")],
    [("我", "r"), ("想", "v"), ("你", "r")],
    [("奶奶", "n"), ("好", "a")],
    [("我", "r"), ("也", "d"), ("很", "d"), ("好", "a")],
    [("展览", "vn"), ("馆", "n"), ("好", "a")],
    [("小", "a"), ("孩", "n"), ("儿", "n")],
    [("#", "x"), ("儿", "n")],
    [("儿", "n"), ("子", "n")],
    [("嗯", "y"), ("好", "a")],
    [("好", "a"), ("嗯", "y"), ("我", "r")],
    [("", "x"), ("好", "a")],
    [],
]

# (word, pos, finals) for modified_tone beyond what pypinyin's finals reach.
TONES = [
    ("一", "m", ["i1"]),
    ("一,", "m", ["i1", ","]),
    ("一二", "m", ["i1", "er4"]),
    ("二一零", "m", ["er4", "i1", "ing2"]),
    ("看一看", "v", ["an4", "i1", "an4"]),
    ("第一", "m", ["i4", "i1"]),
    ("第一个", "m", ["i4", "i1", "e4"]),
    ("第五", "m", ["i4", "u3"]),
    ("一段", "m", ["i1", "uan4"]),
    ("一天", "m", ["i1", "ian1"]),
    ("一起", "m", ["i1", "i3"]),
    ("不怕", "d", ["u4", "a4"]),
    ("不好", "d", ["u4", "ao3"]),
    ("看不懂", "v", ["an4", "u4", "ong3"]),
    ("不不", "d", ["u4", "u4"]),
    ("走了", "v", ["ou3", "e5"]),
    ("了", "ul", ["e5"]),
    ("着", "uz", ["e5"]),
    ("过", "ug", ["uo4"]),
    ("过", "v", ["uo4"]),
    ("孩子", "n", ["ai2", "i5"]),
    ("男子", "n", ["an2", "i3"]),
    ("他们", "r", ["a1", "en2"]),
    ("桌上", "s", ["uo1", "ang4"]),
    ("地下", "f", ["i4", "ia4"]),
    ("家里", "s", ["ia1", "i3"]),
    ("上来", "v", ["ang4", "ai2"]),
    ("出去", "v", ["u1", "v4"]),
    ("三个", "m", ["an1", "e4"]),
    ("几个", "m", ["i3", "e4"]),
    ("个", "q", ["e4"]),
    ("这个", "r", ["e4", "e4"]),
    ("麻烦", "a", ["a2", "an2"]),
    ("好麻烦", "a", ["ao3", "a2", "an2"]),
    ("奶奶", "n", ["ai3", "ai3"]),
    ("试试", "v", ["i4", "i4"]),
    ("人人", "n", ["en2", "en2"]),
    ("走吧", "v", ["ou3", "a5"]),
    ("我的", "r", ["uo3", "e5"]),
    ("你好", "l", ["i3", "ao3"]),
    ("蒙古包", "n", ["eng3", "u3", "ao3"]),
    ("纸老虎", "n", ["i3", "ao3", "u3"]),
    ("所有人", "r", ["uo3", "iou3", "en2"]),
    ("好喜欢", "v", ["ao3", "i3", "uan5"]),
    ("岂有此理", "i", ["i3", "iou3", "i3", "i3"]),
    ("展览馆长", "n", ["an3", "an3", "uan3", "ang3"]),
    ("……", "x", ["……"]),
    (",", "x", [","]),
]


def line_tracer(filename: str, hit: set[int]):
    def trace(frame, event, arg):
        if frame.f_code.co_filename != filename:
            return None
        if event == "line":
            hit.add(frame.f_lineno)
        return trace
    return trace


def finals_of(word: str) -> list[str]:
    return lazy_pinyin(word, neutral_tone_with_five=True, style=Style.FINALS_TONE3)


def main() -> None:
    from text import tone_sandhi
    from text.tone_sandhi import ToneSandhi

    sandhi = ToneSandhi()
    hit: set[int] = set()
    sys.settrace(line_tracer(tone_sandhi.__file__, hit))
    merges, tones = [], []
    segments = [[(p.word, p.flag) for p in psg.lcut(s)] for s in SENTENCES] + SEGMENTS
    for seg in segments:
        merged = [(w, p) for w, p in sandhi.pre_merge_for_modify(list(seg))]
        merges.append({"seg": seg, "merged": merged})
        for word, pos in merged:
            if pos != "eng":  # chinese2.py skips these
                tones.append((word, pos, finals_of(word)))
    tones += TONES
    tone_cases = []
    for word, pos, finals in dict.fromkeys((w, p, tuple(f)) for w, p, f in tones):
        out = sandhi.modified_tone(word, pos, list(finals))
        tone_cases.append({"word": word, "pos": pos, "finals": list(finals), "out": out})
    sys.settrace(None)

    source = Path(tone_sandhi.__file__).read_text(encoding="utf-8").splitlines()
    code_lines = set()
    for name, fn in vars(ToneSandhi).items():
        if callable(fn) and name != "__init__":  # __init__ only fills the word lists
            code = fn.__code__
            code_lines |= {line for _, _, line in code.co_lines() if line and line != code.co_firstlineno}
    missed = sorted(n for n in code_lines - hit if "print(" not in source[n - 1] and "except" not in source[n - 1])
    for n in missed:
        print(f"tone_sandhi.py:{n} not executed: {source[n - 1].strip()}")
    if missed:
        sys.exit("add cases until every line of upstream's ToneSandhi runs")
    # The jieba the default suite uses must split as jieba_fast does.
    import jieba
    for case in tone_cases:
        assert list(jieba.cut_for_search(case["word"])) == list(jieba_fast.cut_for_search(case["word"])), case

    path = HERE / "fixtures" / "zhnorm.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data["tone_sandhi"] = {"pre_merge_for_modify": merges, "modified_tone": tone_cases}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{len(merges)} segmentations, {len(tone_cases)} modified_tone cases -> {path}")


if __name__ == "__main__":
    main()
