"""Chinese front end against upstream (fixtures/zhfront.json, recorded by make_zhfront_fixtures.py in the
reference venv): `clean_text(text, "zh", "v2")` on both pinyin paths, the "all_zh" Chinese / English split
with TextPreprocessor's retry, and get_bert_feature's per-phone expansion."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mizuoto.nodes.gpt_sovits import chinese, english, frontend
from mizuoto.nodes.gpt_sovits.loader import load_bert

import golden

from . import tiny

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "zhfront.json").read_text(encoding="utf-8"))
PYPINYIN = FIXTURE["pypinyin"]


def test_fixture_covers_the_cases():
    assert len(PYPINYIN) >= 50 and len(FIXTURE["mixed"]) >= 10 and len(FIXTURE["bert"]) >= 3
    phones = {p for c in PYPINYIN.values() for p in c["phones"]}
    assert {"SP2", "SP3", "EE", "AA", "er2", "…", "?", "!"} <= phones     # pauses, zero initials, erhua, marks


@pytest.mark.golden
@pytest.mark.parametrize("text", sorted(PYPINYIN))
def test_pypinyin_path_equals_upstream(text):
    case = PYPINYIN[text]
    phones, word2ph, norm = chinese.clean_text(text)
    want = case.get("jieba", case)      # where jieba_fast segments differently, upstream run on jieba (ours)
    assert (phones, word2ph, norm) == (want["phones"], want["word2ph"], want["norm"])
    if "jieba" in case:
        assert phones != case["phones"]


def test_readings_spelled_out():
    """A few upstream readings written by hand, so that a wrong fixture cannot hide a wrong rule."""
    # 一 before a fourth tone rises; a final 儿 is its own syllable taking the tone before it (erhua)
    assert chinese.g2p("一会儿我们去哪儿?") == ([
        "y", "i2", "h", "ui4", "EE", "er4", "w", "o3", "m", "en5", "q", "v4", "n", "a3", "EE", "er3", "?"],
        [2, 2, 2, 2, 2, 2, 2, 2, 1])
    assert chinese.clean_text("你好￥世界")[0] == ["n", "i2", "h", "ao3", "SP2", "sh", "ir4", "j", "ie4"]
    assert chinese.text_normalize("嗯……好吧！！") == "恩…好吧!"


def _lexicon(tmp_path: Path) -> dict:
    header = "".join(f";;; {i}\n" for i in range(1, 57))
    rows = "".join(f"{w.upper()}  {' '.join(p)}\n" for w, p in FIXTURE["lexicon"].items())
    (tmp_path / "cmudict.rep").write_text(header + rows)
    (tmp_path / "cmudict-fast.rep").write_text("")
    (tmp_path / "engdict-hot.rep").write_text("")
    return english.read_lexicon(tmp_path)


@pytest.mark.golden
def test_mixed_split_equals_upstream_all_zh(tmp_path):
    lexicon = _lexicon(tmp_path)
    table = {i: s for s, i in english.symbols().items()}
    for text, case in FIXTURE["mixed"].items():
        got = [{"language": s.language, "text": s.text, "phones": [table[i] for i in s.phone_ids], "norm": s.norm_text}
               | ({"word2ph": s.word2ph} if s.word2ph is not None else {})
               for s in frontend.phones_and_bert_inputs(text, "zh", lexicon)]
        assert got == case["segments"], text


def test_split_by_script():
    split = frontend.split_zh_en
    assert split("  我买了iPhone 15，花了5999元。 ") == [("zh", "我买了"), ("en", "iPhone "), ("zh", "15，花了5999元。")]
    assert split("“Hi”，他说。") == [("en", "“Hi”，"), ("zh", "他说。")]     # leading punctuation joins what follows
    assert split("It's 我的") == [("en", "It's "), ("zh", "我的")]
    # a non-ASCII letter keeps the run out of English (upstream's full_en), so its letters drop out as Chinese
    assert split("Café好") == [("zh", "Café好")]
    assert split("……") == [("zh", "……")]
    with pytest.raises(ValueError, match="not offered"):
        frontend.phones_and_bert_inputs("你好", "ja")
    with pytest.raises(ValueError, match="lexicon"):
        frontend.phones_and_bert_inputs("你好world", "zh")


def _bert_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "chinese-roberta-wwm-ext-large"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny.BERT_CONFIG))
    (folder / "tokenizer.json").write_text(tiny.bert_tokenizer_json())
    torch.save({k: v.half() for k, v in tiny.bert_weights().items()}, folder / "pytorch_model.bin")
    return folder


# float32 rows against upstream's recorded float32 rows: measured <= 3.5e-7 under every perturbation of
# tests/test_golden_travel.py (the BERT's float32 error, test_fixtures.py's BERT bound alike) -> x43
BERT_ROWS = 1.5e-5


@pytest.mark.golden
def test_bert_phone_features_equal_upstream(tmp_path, one_thread):
    folder = _bert_folder(tmp_path)
    bert, tokenizer = load_bert(folder, torch.float32)
    bert64, _ = load_bert(folder, torch.float64)
    for text, case in FIXTURE["bert"].items():
        # recorded on the recording machine: ours torch.equal upstream's get_bert_feature, and in float64 within
        # tests/golden.py's bound over the whole feature (both 0 there)
        assert case["equal"] and case["f64_error"] <= golden.F64_BOUND, text
        _, word2ph, norm = chinese.clean_text(text)
        assert (norm, word2ph) == (case["norm"], case["word2ph"])
        ids = frontend.bert_input_ids(norm, tokenizer)
        with torch.no_grad():
            feats = frontend.phone_features(bert(ids), word2ph)
            feats64 = frontend.phone_features(bert64(ids), word2ph)
        assert list(feats.shape) == case["shape"]
        golden.assert_close(feats[:4], torch.tensor(case["rows"]), BERT_ROWS, text)
        golden.assert_f64(feats64[:4], torch.tensor(case["rows_f64"], dtype=torch.float64), text)
    with torch.no_grad():
        segs = frontend.phones_and_bert_inputs("一二三", "zh")
        feats = frontend.bert_features(segs, tokenizer, bert)
    assert feats.shape == (1024, sum(len(s.phone_ids) for s in segs))


def test_bert_features_zero_for_english(tmp_path):
    lexicon = _lexicon(tmp_path)
    segs = frontend.phones_and_bert_inputs("我喜欢Apple的产品。", "zh", lexicon)
    calls = []

    def fake_bert(ids: torch.Tensor) -> torch.Tensor:
        calls.append(ids.shape[1])
        return torch.arange(ids.shape[1], dtype=torch.float32)[None, :, None].expand(1, -1, 1024)

    class Tok:
        def encode(self, text):
            return type("E", (), {"ids": list(range(len(text) + 2))})()

    feats = frontend.bert_features(segs, Tok(), fake_bert)
    lengths = [len(s.phone_ids) for s in segs]
    assert feats.shape == (1024, sum(lengths)) and calls == [len("我喜欢") + 2, len("的产品.") + 2]
    en = feats[:, lengths[0]:lengths[0] + lengths[1]]
    assert segs[1].language == "en" and torch.equal(en, torch.zeros_like(en))
    # character i's vector (here: the value i + 1 after [CLS]) repeated for its phones
    assert feats[0, :lengths[0]].tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]


def test_bert_tokens_line_up_with_characters():
    """Every character normalised Chinese text can hold is one BERT token (upstream's [1:-1] slicing), with
    upstream's tokenizer.json normaliser / pre-tokenizer (tiny vocabulary: the rest are [UNK], still one)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tiny.bert_tokenizer_json())
    text = "".join(chr(c) for c in range(0x4E00, 0x9FA6)) + "".join(chinese.PUNCTUATION)
    assert frontend.bert_input_ids(text, tokenizer).shape == (1, len(text) + 2)
    with pytest.raises(ValueError, match="one per character"):
        frontend.bert_input_ids("ab", tokenizer)
    with pytest.raises(ValueError, match="BERT tokens"):
        frontend.phone_features(torch.zeros(1, 4, 8), [1, 2, 1])


def test_g2pw_needs_the_polyphonic_table():
    with pytest.raises(ValueError, match="polyphonic"):
        chinese.g2p("你好", g2pw=lambda batch: [[None] * len(s) for s in batch])


@pytest.mark.golden
def test_g2pw_path_equals_upstream():
    """upstream chinese2 with is_g2pw = True on the tiny random G2PW model (fixtures/g2pw_model/, the g2pw
    tests' folder) and upstream's polyphonic-table entries the sentences look up."""
    from tokenizers import Tokenizer

    from mizuoto.nodes.gpt_sovits.g2pw import G2PW

    record = FIXTURE["g2pw"]
    assert len(record["cases"]) >= 15 and record["upstream_fails"]
    here = Path(__file__).parent / "fixtures"
    net = G2PW.from_folder(here / "g2pw_model", Tokenizer.from_file(str(here / "g2pw_tokenizer" / "tokenizer.json")))
    table = record["polyphonic"]
    differs_from_pypinyin = 0
    for text, want in record["cases"].items():
        phones, word2ph, norm = chinese.clean_text(text, net, table)
        assert (phones, word2ph, norm) == (want["phones"], want["word2ph"], want["norm"]), text
        differs_from_pypinyin += phones != chinese.clean_text(text)[0]
    assert differs_from_pypinyin >= 3       # the G2PW readings are really used
    for text in record["upstream_fails"]:   # G2PW gives no reading: upstream fails on None[0], ours says so
        with pytest.raises(ValueError, match="G2PW has no reading"):
            chinese.clean_text(text, net, table)
