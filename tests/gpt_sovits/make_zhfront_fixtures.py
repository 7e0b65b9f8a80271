"""Record upstream's Chinese front end on test sentences (reference venv + the repository; see README.md).

    cd /tmp && "$REF_VENV"/bin/python <worktree>/tests/gpt_sovits/make_zhfront_fixtures.py

1. `text.cleaner.clean_text(text, "zh", "v2")` + `cleaned_text_to_sequence` with `chinese2.is_g2pw = False`
   (upstream's pypinyin path; `text.g2pw` is stubbed: chinese2 builds a G2PW converter at import, which would
   download the model), once with upstream's jieba_fast and once with its segmenter swapped for jieba (ours):
   where the two differ, the case records both.
2. The G2PW path (`is_g2pw = True`) on the g2pw helper's tiny G2PW folder, when present
   (`tests/gpt_sovits/tiny_g2pw.py`): upstream's `G2PWPinyin` built on that folder and the tiny BERT tokenizer,
   with upstream's polyphonic tables; the fixture keeps the table entries the sentences look up.
3. Mixed Chinese / English for "all_zh": split_lang is not installed, so the split each sentence gets upstream
   is written out by hand below (reasoned from split_lang's pre_split / punctuation merge and LangSegmenter's
   `full_en`), and upstream's clean_text reads each piece; the "." retry as TextPreprocessor does it.
4. BERT phone features: upstream `TextPreprocessor.get_bert_feature` with a tiny `BertForMaskedLM` and
   `AutoTokenizer` on tiny.py's folder; the fixture keeps its first rows, and the same from the model
   `.double()` (`rows_f64`, with ours in float64 against it over the whole feature: `f64_error`,
   max |ours - upstream| / max |upstream|; tests/golden.py).
Asserts nothing about equality: it prints and records ours-vs-upstream; the default suite decides.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKTREE = HERE.parents[1]
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402
from make_fixtures_env import REPO  # noqa: E402

# Our code from this worktree (the venv's editable `mizuoto` may point at another checkout).
for name in [m for m in sys.modules if (m == "mizuoto" or m.startswith("mizuoto.")) and getattr(sys.modules[m], "__file__", None)]:
    del sys.modules[name]
_pkg = types.ModuleType("mizuoto")
_pkg.__path__ = [str(WORKTREE)]
sys.modules["mizuoto"] = _pkg

import jieba  # noqa: E402
import jieba.posseg  # noqa: E402
import nltk  # noqa: E402
import torch  # noqa: E402

nltk.download = lambda *a, **k: False
nltk.pos_tag = lambda words, *a, **k: [(w, "NN") for w in words]
import g2p_en.g2p  # noqa: E402

g2p_en.g2p.cmudict = types.SimpleNamespace(dict=lambda: {})

# chinese2 builds G2PWPinyin at import (a model download): a stand-in until we set the real one.
make_fixtures_env.stub("text.g2pw", G2PWPinyin=lambda **k: None, correct_pronunciation=None)
from text import chinese2, tone_sandhi as up_sandhi  # noqa: E402
from text import cleaned_text_to_sequence  # noqa: E402
from text.cleaner import clean_text as up_clean_text  # noqa: E402
from text.symbols2 import symbols  # noqa: E402

import jieba_fast  # noqa: E402
import jieba_fast.posseg  # noqa: E402

from mizuoto.nodes.gpt_sovits import chinese, english, frontend  # noqa: E402

sys.path.insert(0, str(HERE))
import tiny  # noqa: E402

CASES = [
    # polyphones, plain sentences
    "你好，世界！",
    "我们一起去银行办理业务，行不行？",
    "他长得很高，是家里的老大，长大后当了行长。",
    "这个音乐真好听，我很喜欢。",
    "重要的事情说三遍，重新来一次。",
    "他背着背包去了背后的山上。",
    "我觉得睡觉很重要。",
    "还有一些还没有还给你。",
    "朝阳区的朝阳很漂亮，我朝着他走去。",
    "他们正在开会，会不会说英语？",
    "骑自行车的人很多，快乐地生活。",
    # 一 / 不, three tones, neutral tone, reduplication
    "一个人，一天，一样，第一，一一对应。",
    "不要，不对，不是，不好，要不要？",
    "看一看，试一试，想一想。",
    "他不去，我也不想去。",
    "我很好，你也很好。",
    "展览馆里有很多老虎。",
    "我的朋友们都来了吧。",
    "东西放在桌子上面。",
    "奶奶和爷爷看看星星。",
    # erhua
    "小孩儿在胡同儿里玩儿。",
    "他的女儿和婴儿都在这儿。",
    "一会儿我们去哪儿？",
    "老汉儿的媳妇儿很有范儿。",
    "花儿开了，鸟儿在唱歌。",
    "这件事儿还得再考虑考虑。",
    # numbers, dates, units through the normaliser
    "今天是2024年3月15日，气温25°C。",
    "价格是12.5元，打八折后是10元。",
    "会议在下午3:30开始，持续到17:45。",
    "他的电话是13812345678。",
    "这个项目完成了85%。",
    "第1名和第23名之间相差-5分。",
    "1/3的人同意，2~3天后再说。",
    "公元前221年，秦始皇统一了中国。",
    "一百零一只狗跑了3.14公里。",
    # punctuation runs and marks
    "什么？！真的吗……",
    "好的。。。我知道了！！！",
    "——他说：“走吧”；然后、离开了。",
    "等等~~我来了～",
    "啊——但是《原神》是由,米哈游自主，研发的一款全.新开放世界.冒险游戏",
    # 嗯 / 呣
    "嗯，我知道了。",
    "呣呣呣～就是…大人的鼹鼠党吧？",
    # Latin letters inside Chinese text (clean_text "zh" drops them)
    "我喜欢用iPhone拍照。",
    "这是OK的，没问题。",
    # cleaner.py's special pause symbols
    "你好￥我是小明，很高兴认识你。",
    "今天^天气^很好，我们出去玩。",
    "停顿￥和^一起，看看。",
    # traditional characters, short text
    "這是一個測試，我們說話。",
    "你好",
    "银行行长说：一定不能乱来！",
    # numbers, dates, currency, percentages, phone numbers, units (upstream's zh_normalization)
    "2023年12月31日是星期日。",
    "会议定于2024-05-20上午9点举行。",
    "他出生于1998/07/01，今年26岁。",
    "这台电脑售价¥4999，比去年便宜了200元。",
    "一杯咖啡要$3.5，一个面包要€2。",
    "本季度营收增长了12.5%，利润下降了3%。",
    "请拨打客服热线400-820-8820咨询。",
    "我的手机号是+86 13912345678。",
    "办公室电话是010-62345678。",
    "这段路长3.6km，限速60km/h。",
    "今天最高气温-3℃，最低气温-12℃。",
    "这袋米重5kg，那瓶水是500ml。",
    "房间面积是45m²，层高2.8m。",
    "比分是3:2，我们赢了。",
    "第3季第12集在晚上8:30播出。",
    "他跑了100米，用时9.58秒。",
    "这个数字是1234567890。",
    "约有1/4的学生选择了A选项。",
    "圆周率约等于3.1415926。",
    "2+3=5，10-4=6。",
    "温度在20~25度之间。",
    "第二十届运动会共有3000多名运动员参加。",
    "这批货共计1,234,567件。",
    "版本号是v2.0.1，更新于3月5日。",
]

# The G2PW path on the tiny random G2PW model: polyphones (its readings are random but among each
# character's own), 一 / 不, erhua, corrections from upstream's polyphonic tables, several sentences at once.
G2PW_CASES = [
    "银行行长在行业会议上发言。",
    "他长大了，头发也长了。",
    "这个问题很重要，我们要重新考虑。",
    "我还没还你钱呢。",
    "我们一起去银行办理业务，行不行？",
    "他背着背包去了背后的山上。",
    "朝阳区的朝阳很漂亮，我朝着他走去。",
    "一个人，一天，一样，第一，一一对应。",
    "不要，不对，不是，不好，要不要？",
    "小孩儿在胡同儿里玩儿。",
    "一会儿我们去哪儿？",
    "今天是2024年3月15日，气温25°C。",
    "嗯，我知道了。",
    "這是一個測試，我們說話。",
    "你好￥我是小明，很高兴认识你。",
    "重要的事情说三遍。",
    "数一数有多少个数字，调查以后再调整。",
    "他一边走着一边唱着歌，放假了，这是假的。",
    "我用GPT-SoVITS在2024年做了好几个模型。",
    "他是我的长辈。",       # 輩's syllable is missing from the tiny model's table; 长辈's table entry covers it
]
# G2PW gives None for 輩 and no table entry covers 前辈 or 辈: upstream fails (None[0]); kept apart from the cases.
G2PW_FAILING = ["前辈们都来了。"]

# Mixed text for language "all_zh": the split upstream's LangSegmenter.getTexts(text, "zh") gives, reasoned
# from split_lang's code (pre_split by script: spaces stay with the run before, punctuation joins the run
# before or, at the start, after; digits -> "zh"; a run full_en accepts -> "en"; the rest -> "zh").
MIXED = {
    "我喜欢Apple的产品。": [("zh", "我喜欢"), ("en", "Apple"), ("zh", "的产品。")],
    "今天我们学习English和数学。": [("zh", "今天我们学习"), ("en", "English"), ("zh", "和数学。")],
    "Hello，你好吗？": [("en", "Hello，"), ("zh", "你好吗？")],
    "这个App叫Hello World，很好用。": [("zh", "这个"), ("en", "App"), ("zh", "叫"), ("en", "Hello World，"),
                                  ("zh", "很好用。")],
    "我买了iPhone 15，花了5999元。": [("zh", "我买了"), ("en", "iPhone "), ("zh", "15，花了5999元。")],
    "Good morning! 早上好。": [("en", "Good morning! "), ("zh", "早上好。")],
    "他说OK。": [("zh", "他说"), ("en", "OK。")],
    "用Python写代码很快，it's easy.": [("zh", "用"), ("en", "Python"), ("zh", "写代码很快，"), ("en", "it's easy.")],
    "我在2024年买了3个iPad。": [("zh", "我在2024年买了3个"), ("en", "iPad。")],
    "今天的Meeting在下午3点。": [("zh", "今天的"), ("en", "Meeting"), ("zh", "在下午3点。")],
    "你好": [("zh", "你好")],
    "Hi": [("en", "Hi")],
    "这是一本book。": [("zh", "这是一本"), ("en", "book。")],
}

# For BERT phone features (characters of tiny.BERT_VOCAB and others that tokenise to [UNK]).
BERT_TEXTS = ["你好，我是一二三。", "我的你好！", "一会儿我们去哪儿？"]


def sequence(phones: list[str]) -> list[str]:
    return [symbols[i] for i in cleaned_text_to_sequence(phones, "v2")]


def up_zh(text: str) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):     # chinese2 prints its pypinyin readings
        phones, word2ph, norm = up_clean_text(text, "zh", "v2")
    return {"phones": sequence(phones), "word2ph": word2ph, "norm": norm}


@contextlib.contextmanager
def segmenter(module):
    """chinese2's `psg` and tone_sandhi's `jieba` (for cut_for_search) from one library."""
    saved = chinese2.psg, up_sandhi.jieba
    chinese2.psg, up_sandhi.jieba = module.posseg, module
    try:
        yield
    finally:
        chinese2.psg, up_sandhi.jieba = saved


def ours_zh(text: str, g2pw=None, polyphonic=None) -> dict:
    phones, word2ph, norm = chinese.clean_text(text, g2pw, polyphonic)
    return {"phones": phones, "word2ph": word2ph, "norm": norm}


out: dict = {"pypinyin": {}, "g2pw": None, "mixed": {}, "bert": {}}

# ---- 1. pypinyin path ------------------------------------------------------------------------------------------
chinese2.is_g2pw = False
same = 0
for text in CASES:
    with segmenter(jieba_fast):
        want = up_zh(text)
    with segmenter(jieba):
        want_jieba = up_zh(text)
    mine = ours_zh(text)
    case = dict(want)
    if want_jieba != want:
        case["jieba"] = want_jieba
    status = "equal" if mine == want else ("equal to upstream with jieba" if mine == want_jieba else "DIFFERENT")
    same += mine == want
    print(f"{status}: {text!r} -> {want['norm']!r}\n  upstream {want['phones']}\n  ours     {mine['phones']}")
    out["pypinyin"][text] = case
print(f"pypinyin path: {same} of {len(CASES)} equal; {sum('jieba' in c for c in out['pypinyin'].values())} "
      f"differ between jieba_fast and jieba")

# ---- 2. G2PW path ------------------------------------------------------------------------------------------------
G2PW_MODEL, G2PW_TOKENIZER = HERE / "fixtures" / "g2pw_model", HERE / "fixtures" / "g2pw_tokenizer"
if (G2PW_MODEL / "g2pW.onnx").is_file():
    from tokenizers import Tokenizer  # noqa: E402

    from mizuoto.nodes.gpt_sovits import g2pw as our_g2pw  # noqa: E402

    del sys.modules["text.g2pw"]
    import text.g2pw as up_g2pw  # noqa: E402  (reads upstream's polyphonic tables)

    chinese2.is_g2pw = True
    chinese2.correct_pronunciation = up_g2pw.correct_pronunciation
    chinese2.g2pw = up_g2pw.G2PWPinyin(model_dir=str(G2PW_MODEL), model_source=str(G2PW_TOKENIZER), v_to_u=False,
                                       neutral_tone_with_five=True)
    net = our_g2pw.G2PW.from_folder(G2PW_MODEL, Tokenizer.from_file(str(G2PW_TOKENIZER / "tokenizer.json")))
    table = our_g2pw.read_polyphonic(REPO / "GPT_SoVITS" / "text")
    assert table == up_g2pw.pp_dict
    cases, errors, entries, same = {}, {}, set(), 0
    for text in G2PW_CASES + G2PW_FAILING:
        with segmenter(jieba_fast):
            try:
                want = up_zh(text)
            except Exception as e:      # noqa: BLE001  (upstream fails where G2PW gives no reading)
                want = {"error": type(e).__name__}
        try:
            mine = ours_zh(text, net, table)
        except ValueError as e:
            mine = {"error": str(e)}
        norm = chinese.text_normalize(text)
        entries |= {norm[i:j] for i in range(len(norm)) for j in range(i + 1, len(norm) + 1) if norm[i:j] in table}
        equal = mine == want or ("error" in want and "error" in mine)
        same += equal
        print(f"{'equal' if equal else 'DIFFERENT'} (G2PW): {text!r}\n  upstream {want}\n  ours     {mine}")
        if text in G2PW_FAILING:
            assert "error" in want, f"upstream reads {text!r}: pick another sentence for G2PW_FAILING"
            errors[text] = want["error"]
        else:
            cases[text] = want
    out["g2pw"] = {"cases": cases, "upstream_fails": errors, "polyphonic": {w: table[w] for w in sorted(entries)}}
    print(f"G2PW path: {same} of {len(G2PW_CASES) + len(G2PW_FAILING)} equal (failing ones: both fail)")
    chinese2.is_g2pw = False
else:
    print("no tiny G2PW model at", G2PW_MODEL, "(the g2pw branch's fixtures): G2PW path not recorded")

# ---- 3. mixed split ----------------------------------------------------------------------------------------------
lexicon = english.read_lexicon(REPO / "GPT_SoVITS" / "text")
used_words: set[str] = set()


def up_en(text: str) -> dict:
    phones, _, norm = up_clean_text(text, "en", "v2")
    return {"phones": sequence(phones), "norm": norm}


def up_all_zh(pieces: list[tuple[str, str]]) -> list[dict]:
    segs = []
    for lang, piece in pieces:
        with segmenter(jieba_fast):
            seg = up_zh(piece) if lang == "zh" else up_en(piece)
        segs.append({"language": lang, "text": piece, **seg})
    return segs


for text, pieces in MIXED.items():
    segs = up_all_zh(pieces)
    if sum(len(s["phones"]) for s in segs) < frontend.MIN_PHONES:     # TextPreprocessor's retry
        pieces = [(pieces[0][0], "." + pieces[0][1])] + pieces[1:]
        segs = up_all_zh(pieces)
    mine = frontend.phones_and_bert_inputs(text, "zh", lexicon)
    table = {i: s for s, i in english.symbols().items()}
    got = [{"language": s.language, "text": s.text, "phones": [table[i] for i in s.phone_ids], "norm": s.norm_text}
           | ({"word2ph": s.word2ph} if s.word2ph is not None else {}) for s in mine]
    status = "equal" if got == segs else "DIFFERENT"
    print(f"{status}: {text!r}\n  upstream {[(s['language'], s['text'], s['phones']) for s in segs]}\n"
          f"  ours     {[(s['language'], s['text'], s['phones']) for s in got]}")
    out["mixed"][text] = {"segments": segs, "equal": status == "equal"}
    for s in segs:
        if s["language"] == "en":
            for word in english._TOKEN.findall(s["norm"]) + list("abcdefghijklmnopqrstuvwxyz"):
                for w in [word.lower(), word.lower()[:-2]]:
                    if w in lexicon:
                        used_words.add(w)
out["lexicon"] = {w: lexicon[w] for w in sorted(used_words)}

# ---- 4. BERT phone features ----------------------------------------------------------------------------------
from transformers import AutoTokenizer, BertConfig as HFBertConfig, BertForMaskedLM  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "TTS_infer_pack_TextPreprocessor", REPO / "GPT_SoVITS" / "TTS_infer_pack" / "TextPreprocessor.py")
make_fixtures_env.stub("text.LangSegmenter", LangSegmenter=None)      # split_lang is not installed
_tts_pack = types.ModuleType("TTS_infer_pack")                        # its __init__ imports the whole TTS
_tts_pack.__path__ = [str(REPO / "GPT_SoVITS" / "TTS_infer_pack")]
sys.modules["TTS_infer_pack"] = _tts_pack
TextPreprocessorModule = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TextPreprocessorModule)

with tempfile.TemporaryDirectory() as tmp:
    shared = tiny.write_shared(Path(tmp))
    folder = shared / "chinese-roberta-wwm-ext-large"
    hf_bert = BertForMaskedLM(HFBertConfig(**tiny.BERT_CONFIG)).eval()
    state = {k: v.half().float() for k, v in tiny.bert_weights().items()}
    missing, unexpected = hf_bert.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("cls.") for k in missing), (missing, unexpected)
    pre = TextPreprocessorModule.TextPreprocessor(hf_bert, AutoTokenizer.from_pretrained(str(folder)), "cpu")
    from mizuoto.nodes.gpt_sovits.loader import load_bert  # noqa: E402

    our_bert, our_tok = load_bert(folder, torch.float32)
    our_bert64, _ = load_bert(folder, torch.float64)
    pre64 = TextPreprocessorModule.TextPreprocessor(copy.deepcopy(hf_bert).double(), pre.tokenizer, "cpu")
    torch.set_num_threads(1)
    for text in BERT_TEXTS:
        with segmenter(jieba_fast):
            case = up_zh(text)
        with torch.no_grad():
            want = pre.get_bert_feature(case["norm"], case["word2ph"])
            mine = frontend.phone_features(our_bert(frontend.bert_input_ids(case["norm"], our_tok)), case["word2ph"])
        hf_ids = pre.tokenizer(case["norm"], return_tensors="pt")["input_ids"]
        assert torch.equal(hf_ids, frontend.bert_input_ids(case["norm"], our_tok)), "tokenisation differs"
        with torch.no_grad():
            want64 = pre64.get_bert_feature(case["norm"], case["word2ph"])
            mine64 = frontend.phone_features(our_bert64(frontend.bert_input_ids(case["norm"], our_tok)), case["word2ph"])
        f64_error = ((mine64 - want64).abs().max() / want64.abs().max()).item()
        print(f"BERT features {text!r}: shape {tuple(want.shape)}, equal {torch.equal(mine, want)}, "
              f"float64 error {f64_error:.3g}")
        out["bert"][text] = {"norm": case["norm"], "word2ph": case["word2ph"], "shape": list(want.shape),
                             "rows": want[:4].tolist(), "equal": torch.equal(mine, want),
                             "rows_f64": want64[:4].tolist(), "f64_error": f64_error}

(HERE / "fixtures" / "zhfront.json").write_text(json.dumps(out, indent=0, ensure_ascii=False), encoding="utf-8")
print("wrote", HERE / "fixtures" / "zhfront.json")
