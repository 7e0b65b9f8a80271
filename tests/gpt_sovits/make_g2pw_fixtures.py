"""Record upstream's G2PW on a tiny random G2PW model (reference venv + both repositories; see README.md).

    "$REF_VENV"/bin/python tests/gpt_sovits/make_g2pw_fixtures.py

1. Writes fixtures/g2pw_model/ in upstream's G2PWModel layout: a tiny `g2pW.onnx` exported (legacy TorchScript
   exporter, opset 12, upstream's input names and dynamic axes, as GitYCC's scripts/export_onnx_model.py does)
   from GitYCC/g2pW's own `G2PW` torch module (a 2-layer 16-wide BERT + the char/POS-conditioned, phoneme-
   masked weighted softmax) with seeded random weights; config.py in GitYCC's format; POLYPHONIC_CHARS.txt /
   MONOPHONIC_CHARS.txt / the two json tables as subsets of GitYCC's real `char_bopomofo_dict.json` and
   `bopomofo_to_pinyin_wo_tune_dict.json` (one syllable left out on purpose: upstream's "cannot convert"
   None). fixtures/g2pw_tokenizer/: a BERT tokenizer.json (+ config.json, as GPT-SoVITS's
   chinese-roberta-wwm-ext-large folder has) whose vocabulary covers the sentences, with a few
   characters and Latin words left out ([UNK]) and Latin word pieces (##).
2. Runs upstream's `G2PWOnnxConverter(model_dir, style="pinyin", model_source=tokenizer dir,
   enable_non_tradional_chinese=True)` (GPT-SoVITS text/g2pw/onnx_api.py, onnxruntime) on every sentence
   alone and on three batches, recording the pinyin lists and, for every onnxruntime call, each input's
   shape and sha256 (proves our tokens and batching equal AutoTokenizer's / upstream's).
3. Records dataset.get_phoneme_labels / get_char_phoneme_labels on the tiny list (config use_char_phoneme).
4. Runs upstream g2pw.py's `read_dict()` on fixtures/g2pw_text/g2pw/{polyphonic,polyphonic-fix}.rep and
   `correct_pronunciation` on a few words.
Asserts our port gives the same, then writes fixtures/g2pw.json.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402,F401  (GPT-SoVITS on sys.path)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors  # noqa: E402

# Our worktree as `mizuoto` (the venv's editable install may point at another checkout).
_LINK = Path(tempfile.mkdtemp()) / "mizuoto"
_LINK.symlink_to(HERE.parents[1], target_is_directory=True)
sys.path.insert(0, str(_LINK.parent))
from mizuoto.nodes.gpt_sovits import g2pw as ours  # noqa: E402

if not os.environ.get("G2PW_REPO"):
    sys.exit("set $G2PW_REPO to a checkout of https://github.com/GitYCC/g2pW outside this repository "
             "(tests/gpt_sovits/README.md)")
G2PW_REPO = Path(os.environ["G2PW_REPO"])
FIXTURES = HERE / "fixtures"
MODEL = FIXTURES / "g2pw_model"
TOKENIZER = FIXTURES / "g2pw_tokenizer"
TEXT = FIXTURES / "g2pw_text"
SEED = 20
POS_TAGS = ["UNK", "A", "C", "D", "I", "N", "P", "T", "V", "DE", "SHI"]   # GitYCC dataset.TextDataset.POS_TAGS

PLAIN = "我们今天去公园散步你们明天去北京"   # no polyphone of the tiny list
LONG_TAIL = "我们在这里讨论很多的问题，今天天气很好，大家一起去公园散步，看见了许多人和花"
SENTENCES = [
    "银行行长在行业会议上发言。",
    "他长大了，头发也长了。",
    "这个问题很重要，我们要重新考虑。",
    "我还没还你钱呢。",
    "他一边走着一边唱着歌。",
    "音乐让人快乐。",
    "大家都到了首都北京。",
    "我觉得睡觉很舒服。",
    "他便宜地买了一辆便车。",
    "放假了，这是假的。",
    "将军将要出发。",
    "数一数有多少个数字。",
    "调查以后再调整。",
    "朝阳公园朝南开。",
    "传说中的传记。",
    "处理这个处所的事情。",
    "种子种在地里。",
    "差不多和他一样。",
    "為什麼銀行的長輩還沒來？",
    "我用GPT-SoVITS在2024年做了好几个模型。",
    "Hello 世界，你好吗？",
    "他说：“好的，我们明天见！”",
    "似乎一切都很好。",
    "你们今天吃饭吗？",
    "了",
    "",
    "１２３，我们ABC的xyz。",
    "ABC银行行长",
    "2024年，行长说了3次。",
    "GPT模型的长度。",
    "你好,。世界",
    "我们去了   三次，  行吗？",
    "行" + LONG_TAIL + "，最后还是长",
    "这是一个很长很长的句子，里面有很多很多的字，用来测试上下文窗口，行长说的话很重要，我们还要继续努力。",
    "长" + LONG_TAIL * 12 + "重",
    "重" + "我们" * 300 + "行",
    PLAIN * 2 + "银行行长" + PLAIN * 2,
    "长大" + PLAIN * 2 + "。",
]
# One polyphone each: upstream's plain batched call (no dedup groups), rows padded to the longest.
SINGLE = ["音乐让人快乐。"[:4], "他便宜", "朝阳公园", "传说", "种子", "看见许多人", "你好吗", "我们去了"]
REPEATED = ["我还没还你钱呢。", "我还没还你钱呢。", "种子种在地里。"]

POLYPHONIC_CHARS = "行長重還了著樂都覺得便假將數調朝傳處種發要地的為好看一不和差"
LEFT_OUT_OF_LISTS = "們北錢"      # Chinese characters read by pypinyin (in neither list)
LEFT_OUT_OF_VOCAB = "模吃"         # [UNK] characters
DROPPED_READING = "輩"             # its syllable is left out of bopomofo_to_pinyin_wo_tune_dict.json
VOCAB_LATIN = ["hello", "gp", "##t", "so", "##vi", "##ts", "20", "##24"]

REP = """湖泊: ['hu2','po1']
地壳: ['di4','qiao4']
银行 :  [ "yin2" , 'hang2', ]
长: ['zhang3']
了: ['le5']
"""
REP_FIX = """一丁不识: ['yi1', 'ding1', 'bu4', 'shi2']
银行: ['yin2', 'xing2']\r
重要: ['zhong4', 'yao4']
行长: ['hang2', 'zhang3']
"""
CORRECT = [("银行", ["yin2", "hang2"]), ("行长", ["xing2", "chang2"]), ("长了", ["chang2", None]),
           ("湖泊", ["hu2", "bo2"]), ("你好", ["ni3", "hao3"]), ("长", ["chang2"])]


def build_lists() -> tuple[dict[str, list[str]], list[str]]:
    import opencc
    table = json.loads((G2PW_REPO / "g2pw" / "char_bopomofo_dict.json").read_text(encoding="utf-8"))
    s2tw = opencc.OpenCC("s2tw")
    chars = sorted({c for s in SENTENCES for c in s2tw.convert(s) if c in table})
    polyphonic = {c: table[c][:3] for c in POLYPHONIC_CHARS}
    mono = [c for c in chars if len(table[c]) == 1 and c not in LEFT_OUT_OF_LISTS]
    extra = [c for c in sorted(table) if len(table[c]) == 1 and c not in mono][:300]
    monophonic = {c: table[c][0] for c in mono + extra}
    monophonic["似"] = table["似"][0]   # upstream drops it (non_monophonic)
    return polyphonic, [f"{c}\t{p}" for c, p in monophonic.items()]


def write_model_folder() -> tuple[list[str], list[str], dict]:
    MODEL.mkdir(parents=True, exist_ok=True)
    polyphonic, mono_lines = build_lists()
    (MODEL / "POLYPHONIC_CHARS.txt").write_text(
        "\n".join(f"{c}\t{p}" for c, ps in polyphonic.items() for p in ps) + "\n", encoding="utf-8")
    (MODEL / "MONOPHONIC_CHARS.txt").write_text("\n".join(mono_lines) + "\n", encoding="utf-8")
    convert = json.loads((G2PW_REPO / "g2pw" / "bopomofo_to_pinyin_wo_tune_dict.json").read_text(encoding="utf-8"))
    needed = {p[:-1] for ps in polyphonic.values() for p in ps} | {ln.split("\t")[1][:-1] for ln in mono_lines}
    # one monophonic syllable of the sentences left out: upstream's "cannot convert" None
    dropped = next(ln.split("\t")[1][:-1] for ln in mono_lines if ln[0] == DROPPED_READING)
    (MODEL / "bopomofo_to_pinyin_wo_tune_dict.json").write_text(
        json.dumps({k: convert[k] for k in sorted(needed) if k != dropped}, ensure_ascii=False), encoding="utf-8")
    table = json.loads((G2PW_REPO / "g2pw" / "char_bopomofo_dict.json").read_text(encoding="utf-8"))
    used = {c for s in SENTENCES for c in s} | set(polyphonic) | {ln[0] for ln in mono_lines}
    (MODEL / "char_bopomofo_dict.json").write_text(
        json.dumps({c: v for c, v in table.items() if c in used}, ensure_ascii=False, indent=1), encoding="utf-8")
    config = {
        "affect_location": "softmax", "bias": True, "char-linear": True, "pos-linear": False,
        "char+pos-second": True, "char+pos-second_lowrank": False, "lowrank_size": 0, "char+pos-second_fm": False,
        "fm_size": 0, "fix_mode": None, "count_json": "train.count.json"}
    (MODEL / "config.py").write_text(
        "root = './cpp_dataset/'\n\nmanual_seed = 1313\nmodel_source = 'bert-base-chinese'\n"
        "polyphonic_chars_path = root + 'POLYPHONIC_CHARS.txt'\nwindow_size = 32\nnum_workers = 2\n"
        "use_mask = True\nuse_conditional = True\n"
        f"param_conditional = {config!r}\n\n# for training\n"
        "exp_name = 'CPP_BERT_M_DescWS-Sec-cLin-B_POSw01'\ntrain_sent_path = root + 'train.sent'\n"
        "batch_size = 256\nlr = 5e-5\nuse_pos = True\nparam_pos = {\n    'weight': 0.1,\n"
        "    'pos_joint_training': True,\n    'train_pos_path': root + 'train.pos',\n}\n", encoding="utf-8")
    rows = [ln.split("\t") for ln in (MODEL / "POLYPHONIC_CHARS.txt").read_text(encoding="utf-8").strip().split("\n")]
    labels, char2phonemes = ours.phoneme_labels([tuple(r) for r in rows], False)
    return labels, sorted(char2phonemes), config


def write_tokenizer() -> Tokenizer:
    import opencc
    s2tw = opencc.OpenCC("s2tw")
    chars = sorted({c for s in SENTENCES + SINGLE for c in s2tw.convert(s).lower()
                    if not c.isspace() and not (c.isascii() and c.isalnum())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + VOCAB_LATIN + [c for c in chars
                                                                           if c not in LEFT_OUT_OF_VOCAB]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]",
                                     max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                                lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece(prefix="##")
    TOKENIZER.mkdir(parents=True, exist_ok=True)
    tok.save(str(TOKENIZER / "tokenizer.json"))
    return tok


class SixInputs(torch.nn.Module):
    """The six inputs upstream feeds: G2PW.forward's float default `eps` stays a constant, as it was in the
    published export (today's exporter would make it a graph input)."""

    def __init__(self, g2pw: torch.nn.Module) -> None:
        super().__init__()
        self.g2pw = g2pw

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.g2pw(*inputs)


def export_model(labels: list[str], chars: list[str], param_conditional: dict, vocab_size: int) -> None:
    spec = importlib.util.spec_from_file_location("g2pw_module", G2PW_REPO / "g2pw" / "module.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32, max_position_embeddings=512)
    config._attn_implementation = "eager"   # the published model predates SDPA
    (TOKENIZER / "config.json").write_text(config.to_json_string(), encoding="utf-8")
    model = module.G2PW(config, labels=labels, chars=chars, pos_tags=POS_TAGS, use_conditional=True,
                        param_conditional=param_conditional, use_focal=False, param_focal=None, use_pos=True,
                        param_pos={"weight": 0.1, "pos_joint_training": True}).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            std = 1.0 if "descriptor" in name or "classifier" in name else 0.3
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    names = list(ours.INPUTS)
    dummy = (torch.tensor([[2, 10, 11, 3]]), torch.zeros(1, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.long),
             torch.ones(1, len(labels)), torch.tensor([0]), torch.tensor([1]))
    torch.onnx.export(SixInputs(model), dummy, str(MODEL / "g2pW.onnx"), export_params=True, opset_version=12,
                      do_constant_folding=True, input_names=names, output_names=["probs"],
                      dynamic_axes={"input_ids": [0, 1], "token_type_ids": [0, 1], "attention_mask": [0, 1],
                                    "phoneme_mask": [0], "char_ids": [0], "position_ids": [0], "probs": [0]},
                      dynamo=False)


def digest(arrays: dict) -> dict:
    return {k: [list(v.shape), hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16]]
            for k, v in arrays.items()}


def main() -> None:
    import onnx
    import opencc
    labels, chars, param_conditional = write_model_folder()
    tok = write_tokenizer()
    export_model(labels, chars, param_conditional, tok.get_vocab_size())
    graph = onnx.load(str(MODEL / "g2pW.onnx"))
    operators = sorted({n.op_type for n in graph.graph.node})

    from text.g2pw import g2pw as upstream_g2pw
    from text.g2pw.onnx_api import G2PWOnnxConverter
    conv = G2PWOnnxConverter(model_dir=str(MODEL), style="pinyin", model_source=str(TOKENIZER),
                             enable_non_tradional_chinese=True)
    calls: list[dict] = []
    predict = conv._predict

    def recording(model_input):
        calls.append(digest(model_input))
        return predict(model_input=model_input)
    conv._predict = recording

    # AutoTokenizer's tokens == tokenizers.Tokenizer's, word by word (what tokenize_and_map asks for)
    s2tw = opencc.OpenCC("s2tw")
    for s in SENTENCES:
        for word in ours._wordize(s2tw.convert(s).lower())[0]:
            assert conv.tokenizer.tokenize(word) == tok.encode(word, add_special_tokens=False).tokens, word

    mine = ours.G2PW.from_folder(MODEL, Tokenizer.from_file(str(TOKENIZER / "tokenizer.json")))
    mine_calls: list[dict] = []
    mine_probs = mine.probabilities

    def mine_recording(model_input):
        mine_calls.append(digest({("attention_masks" if k == "attention_mask" else
                                   "phoneme_masks" if k == "phoneme_mask" else k): v
                                  for k, v in model_input.items()}))
        return mine_probs(model_input)
    mine.probabilities = mine_recording

    cases, failing = [], []
    for sentence in SENTENCES:
        try:
            conv([sentence])
        except IndexError:   # upstream reads past pypinyin's list (see g2pw.py _prepare_data)
            failing.append({"sentence": sentence, "ours": mine([sentence])})
    fine = [s for s in SENTENCES if s not in {f["sentence"] for f in failing}]
    for batch in [[s] for s in fine] + [fine, SINGLE, REPEATED]:
        del calls[:], mine_calls[:]
        expected = conv(list(batch))
        got = mine(list(batch))
        assert got == expected, (batch, got, expected)
        assert mine_calls == calls, batch
        cases.append({"sentences": batch, "pinyin": expected, "calls": list(calls)})

    TEXT.joinpath("g2pw").mkdir(parents=True, exist_ok=True)
    (TEXT / "g2pw" / "polyphonic.rep").write_bytes(REP.encode("utf-8"))
    (TEXT / "g2pw" / "polyphonic-fix.rep").write_bytes(REP_FIX.encode("utf-8"))
    upstream_g2pw.PP_DICT_PATH = str(TEXT / "g2pw" / "polyphonic.rep")
    upstream_g2pw.PP_FIX_DICT_PATH = str(TEXT / "g2pw" / "polyphonic-fix.rep")
    table = upstream_g2pw.read_dict()
    assert ours.read_polyphonic(TEXT) == table
    upstream_g2pw.pp_dict = table
    corrected = []
    for word, pinyins in CORRECT:
        expected = upstream_g2pw.correct_pronunciation(word, list(pinyins))
        assert ours.correct_pronunciation(word, pinyins, table) == expected
        corrected.append({"word": word, "pinyins": pinyins, "expected": expected})

    from text.g2pw.dataset import get_char_phoneme_labels, get_phoneme_labels
    rows = [ln.split("\t") for ln in (MODEL / "POLYPHONIC_CHARS.txt").read_text(encoding="utf-8").strip().split("\n")]
    label_sets = {}
    for char_phoneme, fn in ((False, get_phoneme_labels), (True, get_char_phoneme_labels)):
        expected = fn(polyphonic_chars=rows)
        assert ours.phoneme_labels([tuple(r) for r in rows], char_phoneme) == expected
        label_sets["char_phoneme" if char_phoneme else "phoneme"] = expected

    out = {"labels": len(labels), "chars": len(chars), "operators": operators, "opset": 12,
           "cases": cases, "upstream_index_error": failing, "label_sets": label_sets, "polyphonic_table": table, "correct_pronunciation": corrected}
    (FIXTURES / "g2pw.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases equal, {len(failing)} upstream IndexErrors; onnx {(MODEL / 'g2pW.onnx').stat().st_size} bytes; operators {operators}")


if __name__ == "__main__":
    main()
