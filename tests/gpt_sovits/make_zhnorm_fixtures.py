"""Record upstream's Chinese text normaliser and tone sandhi (reference venv + the repository; README.md).

    "$REF_VENV"/bin/python tests/gpt_sovits/make_zhnorm_fixtures.py

Normaliser: upstream's `TextNormalizer().normalize` on TEXTS (written so every rule fires; the script checks
they execute every line of upstream's zh_normalization modules that the normaliser reaches) and on
FUZZ_COUNT seeded random strings of digits, units, symbols and characters.
Tone sandhi: upstream's `ToneSandhi().pre_merge_for_modify` on `jieba_fast.posseg` cuts of SENTENCES (the
text as chinese2.py hands it over: Chinese characters and its ASCII punctuation) and on hand-made
segmentations (SEGMENTS), then `modified_tone` on every merged word with pypinyin's finals (chinese2.py's
`_get_initials_finals`) and on hand-made finals (TONES, the G2PW path's inputs). The script checks that these
cases execute every line of upstream's tone_sandhi.py. Writes fixtures/zhnorm.json; test_zhnorm.py compares.
"""
from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = Path(os.environ["GPT_SOVITS_REPO"]) if os.environ.get("GPT_SOVITS_REPO") else None
if REPO is None or not (REPO / "GPT_SoVITS" / "text" / "tone_sandhi.py").is_file():
    sys.exit("set $GPT_SOVITS_REPO to RVC-Boss/GPT-SoVITS at commit 48b1a0169a28582a8984402f82cf438d3bfa6aca "
             f"unpacked outside this repository (tests/gpt_sovits/README.md); it is {str(REPO) if REPO else 'unset'}")
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

# Normaliser inputs: each rule of upstream's pipeline fires at least once, with edge cases.
TEXTS = [
    "今天是2024年3月1日，明天是2024年3月2号。",
    "他出生于1999年12月，那年是99年。",
    "会议定在2024-03-01，报名截止2024/02/29，发布于2023.12.31。",
    "日期2024-03/01的分隔符不一致。",
    "现在是12:30:45，闹钟定在07:05。",
    "营业时间8:30-12:30，下午14:00~18:00。",
    "早班8:30-9:15，晚班20:15-21:30，夜班23:00:05-23:59:59。",
    "温度在10℃~20℃之间，湿度30%~40%。",
    "身高1.5m~1.8m，体重50kg~60kg。",
    "今天25℃，昨天-3°C，体温36.5度，沸点100摄氏度。",
    "这箱苹果重3kg，长20cm，面积5cm²，体积2cm³，容量500ml。",
    "距离10km，面积3m²，体积2m³，噪音60db，延迟5ds，跑了100m，厚2mm，用时3s。",
    "This is a test，长度是5m2和6m3，还有7cm2和8cm3。",
    "1+1=2，3×4=12，10÷2=5，7-2=5。",
    "x²+y²=z²，2¹⁰=1024，xⁿ的意思。",
    "1+2+3+4=10，a+b=c。",
    ".5+.5=1，-1+2=1，1.5×2=3。",
    "10³是一千，面积是平方米m²。",
    "三分之一写作1/3，负二分之一写作-1/2，还有3/4。",
    "合格率95%，下降了-5%，增长12.5%。",
    "我的手机号是13812345678，请拨打。",
    "国际号码+86 13912345678或者+8615012345678，还有86 18612345678。",
    "座机010-12345678，上海021-1234567，深圳0755-12345678，本地12345678。",
    "客服热线400-123-4567，或者4001234567。",
    "范围是3-5个，或者1.5-2.5米，温差-1~2度，10~20人。",
    "气温-10度，海拔-155米，余额-100。",
    "版本1.2.3已发布，请升级到3.10.12.1。",
    "圆周率约3.14，一半是0.5，也可以写成.5，误差-0.25，3.20和1.000。",
    "我买了2个苹果，3+年经验，5多人，10余件，20元。",
    "2千克面粉，100万元，3小时，2两酒，一共2斤，5千米。",
    "他有2000元和3000美元，还有5十吨货物。",
    "订单号00078，验证码123456，房间1001。",
    "1,000,000是一百万。",
    "我今年12岁，他99岁，小明0岁。",
    "第3名，第1次，第21届。",
    "①第一步②第二步③第三步④⑤⑥⑦⑧⑨⑩。",
    "αβγΓδΔεζηθΘικλΛμνξΞοπΠρςΣστυφΦχψΨωΩ。",
    "每小时5km/h，价格10元/斤。",
    "A+B，C-D，E×F，G÷H，I=J。",
    "书名《红楼梦》【精装版】<限量>{特别}(注释)（附录）#标签&符号@用户“引用”^_|\\结束。",
    "这是一个测试——破折号。",
    "他说：“你好！”然后离开了。",
    "她问：‘真的吗？’我说：是的。",
    "第一句；第二句、第三句，第四句。第五句？第六句！",
    "English, with ASCII; punctuation? Yes!",
    "我用iPhone 15 Pro拍照，GPT-4模型很强，COVID-19疫情。",
    "我喜欢Python和C++编程。",
    "這是繁體中文，歡迎來到臺灣，電腦與網路。",
    "全角字母ＡＢＣ和数字１２３，全角空格\u3000在这里。",
    "价格¥100，约$15，还有€20。",
    "今天天气真好😀，我们去公园吧🎉！",
    "符号~和～，省略号……还有...点。",
    "空格   很多   的   句子。",
    "",
    "，。",
    "\n\n换行\n分隔\n\n的句子",
    "0.5",
    "-0.5",
    "1/3",
    "3-5",
    "12:30:45",
    "2024年3月1日",
    "2024-03-01",
    "25℃",
    "-3°C",
    "+86 13812345678",
    "010-12345678",
    "95%",
    "¥100",
    "1,000,000",
    "第3",
    "3kg",
    "100",
    "105",
    "1000",
    "10",
    "110",
    "100000001",
    "123456789012",
    "000",
    "0",
    "0:00",
    "24:00",
    "9:30-10:30",
    "2个和22个",
    "12年和2012年和312年",
    "3.0和3.00和0.10",
    "-5和-5.5和5-5和-5-5",
    "1:2的比例",
    "第1.2.3版",
]
FUZZ_COUNT = 300
FUZZ_PIECES = (
    list("0123456789" * 4) + list("-+~/.:%×÷=²³ⁿˣ年月日号点度℃°C个元多余几kgcmsd ,，。、；：！？”’“《》()#@①③αΩπ—")
    + ["摄氏度", "cm²", "小时", "千万", "+86 ", "400", "010-", "13812345678", "2024", "-03-", "12:30", "時間", "ｓ", "５",
       "\u3000", "😀", "¥", "$", "iPhone", "第"]
)


def traced(files: set[str], fn):
    """fn() with the line numbers it executes in `files` -> (result, {file: lines})."""
    hit: dict[str, set[int]] = {f: set() for f in files}

    def trace(frame, event, arg):
        if frame.f_code.co_filename not in files:
            return None
        if event == "line":
            hit[frame.f_code.co_filename].add(frame.f_lineno)
        return trace

    sys.settrace(trace)
    try:
        return fn(), hit
    finally:
        sys.settrace(None)


def check_coverage(functions, hit: dict[str, set[int]], skip: tuple[str, ...]) -> None:
    """Exit unless every line of `functions` (but their `def` and lines containing a `skip` text) ran."""
    missed = []
    for fn in functions:
        code = fn.__code__
        source = Path(code.co_filename).read_text(encoding="utf-8").splitlines()
        for line in sorted({n for _, _, n in code.co_lines() if n and n != code.co_firstlineno}):
            if line not in hit[code.co_filename] and not any(t in source[line - 1] for t in skip):
                missed.append(f"{Path(code.co_filename).name}:{line} {source[line - 1].strip()}")
    if missed:
        sys.exit("add cases until these upstream lines run:\n" + "\n".join(missed))


def finals_of(word: str) -> list[str]:
    return lazy_pinyin(word, neutral_tone_with_five=True, style=Style.FINALS_TONE3)


def record_tone_sandhi() -> dict:
    from text import tone_sandhi
    from text.tone_sandhi import ToneSandhi

    sandhi = ToneSandhi()

    def run():
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
        return merges, tone_cases

    (merges, tone_cases), hit = traced({tone_sandhi.__file__}, run)
    methods = [fn for name, fn in vars(ToneSandhi).items() if callable(fn) and name != "__init__"]
    check_coverage(methods, hit, skip=("print(", "except"))  # the failure prints: see pre_merge_for_modify
    # The jieba the default suite uses must split as jieba_fast does.
    import jieba
    for case in tone_cases:
        assert list(jieba.cut_for_search(case["word"])) == list(jieba_fast.cut_for_search(case["word"])), case
    print(f"tone sandhi: {len(merges)} segmentations, {len(tone_cases)} modified_tone cases")
    return {"pre_merge_for_modify": merges, "modified_tone": tone_cases}


def record_normalizer() -> dict:
    import inspect

    from text.zh_normalization import chronology, num, phonecode, quantifier, text_normlization

    modules = (chronology, num, phonecode, quantifier, text_normlization)
    rng = random.Random(0)
    fuzz = ["".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(1, 16))) for _ in range(FUZZ_COUNT)]
    texts = list(dict.fromkeys(TEXTS + fuzz))
    # A new TextNormalizer per text, as chinese2.py's text_normalize makes one
    cases, hit = traced({m.__file__ for m in modules},
                        lambda: [[t, text_normlization.TextNormalizer().normalize(t)] for t in texts])
    functions = [fn for m in modules for _, fn in inspect.getmembers(m, inspect.isfunction)
                 if fn.__module__ == m.__name__]
    functions += [fn for _, fn in inspect.getmembers(text_normlization.TextNormalizer, inspect.isfunction)]
    check_coverage(functions, hit, skip=("raise ValueError",))  # num2str never sees two points
    print(f"normaliser: {len(TEXTS)} texts + {len(texts) - len(TEXTS)} random strings")
    return {"texts": cases}


def main() -> None:
    path = HERE / "fixtures" / "zhnorm.json"
    data = {"tone_sandhi": record_tone_sandhi(), "normalize": record_normalizer()}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
