"""G2PW polyphone disambiguation for GPT-SoVITS's Chinese front end, on our ONNX interpreter.

A port of upstream's `GPT_SoVITS/text/g2pw/` (onnx_api.py, dataset.py, utils.py, g2pw.py; code from
PaddleSpeech and GitYCC/g2pW, Apache-2.0) along the path chinese2.py takes: `G2PW.__call__` is
`G2PWOnnxConverter(style="pinyin", enable_non_tradional_chinese=True)(sentences)` (what `g2pw._g2pw(batch)`
runs, with upstream's default environment: sentence dedup on, a 16-character context around the polyphones),
and `correct_pronunciation` with the table `read_polyphonic` reads. G2PWPinyin's pypinyin Converter is not
on that path (chinese2.py never calls `g2pw.lazy_pinyin`), so it is not ported.

The model folder is upstream's downloaded `G2PWModel/` unchanged: `g2pW.onnx` (or `g2pw.onnx`), `config.py`
(read with `ast`, never executed), POLYPHONIC_CHARS.txt, MONOPHONIC_CHARS.txt, bopomofo_to_pinyin_wo_tune_dict.json
and char_bopomofo_dict.json. The graph runs in `nodes/formats/onnx_graph.OnnxModule`; the tokenizer is the
chinese-roberta `tokenizers.Tokenizer` upstream's AutoTokenizer wraps.
"""
from __future__ import annotations

import ast
import io
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pypinyin import Style, pinyin
from tokenizers import Tokenizer

from ...runtime.loading import CheckpointError
from ..formats.checkpoint import ModelFolderError, load_json, read_text_bounded
from ..formats.onnx_graph import OnnxModule
from ..formats.onnx_reader import read_model
from .zh_chars import traditional_to_simplified

log = logging.getLogger(__name__)

ONNX_NAMES = ("g2pW.onnx", "g2pw.onnx")
CONFIG = "config.py"
POLYPHONIC = "POLYPHONIC_CHARS.txt"
MONOPHONIC = "MONOPHONIC_CHARS.txt"
BOPOMOFO_TO_PINYIN = "bopomofo_to_pinyin_wo_tune_dict.json"
CHAR_BOPOMOFO = "char_bopomofo_dict.json"
INPUTS = ("input_ids", "token_type_ids", "attention_mask", "phoneme_mask", "char_ids", "position_ids")
# upstream's _G2PWBaseOnnxConverter: characters never sent to the model / never read from the monophonic list
NON_POLYPHONIC = frozenset("一不和咋嗲剖差攢倒難奔勁拗肖瘙誒泊听噢")
NON_MONOPHONIC = frozenset("似攢")
CONTEXT_CHARS = 16   # env g2pw_polyphonic_context_chars, default 16
MAX_LEN = 512        # prepare_onnx_input's max_len
# utils.default_config_dict, for the two fields inference reads
CONFIG_DEFAULTS = {"use_mask": True, "use_char_phoneme": False}
REP_FILES = ("polyphonic.rep", "polyphonic-fix.rep")
SPACES = re.compile(r" +")
LATIN = re.compile(r"[a-zA-Z0-9]+")


def _config_value(node: ast.expr, fields: dict[str, Any], path: Path, field: str) -> Any:
    """A literal, a name assigned earlier in the file, or a '+' of two strings (GitYCC's saved configs write
    `train_sent_path = root + 'train.sent'`); anything else is refused."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_config_value(e, fields, path, field) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_config_value(k, fields, path, field): _config_value(v, fields, path, field)
                for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _config_value(node.operand, fields, path, field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in fields:
        return fields[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _config_value(node.left, fields, path, field)
        right = _config_value(node.right, fields, path, field)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
    raise CheckpointError(f"G2PW: {path} field {field!r}: only literal values are read (the file is never "
                          f"executed), got {ast.unparse(node)[:80]!r}")


def read_config(path: Path) -> dict[str, Any]:
    """upstream's `utils.load_config(config.py, use_default=True)` for the fields inference reads, without
    executing the file: only assignments of literal values."""
    if not path.is_file():
        raise ModelFolderError(f"G2PW: {path} not found (upstream's G2PWModel folder holds it)")
    text = read_text_bounded(path, "G2PW")
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:   # RecursionError: a hostile deep nesting
        raise CheckpointError(f"G2PW: {path} is not a readable Python config ({type(e).__name__}: {e})") from None
    fields: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):   # a docstring
            continue
        if not (isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets)):
            raise CheckpointError(f"G2PW: {path} line {stmt.lineno}: only assignments of literal values are "
                                  f"read (the file is never executed), got {ast.unparse(stmt)[:80]!r}")
        value = _config_value(stmt.value, fields, path, stmt.targets[0].id)
        for target in stmt.targets:
            fields[target.id] = value
    config = {}
    for name, default in CONFIG_DEFAULTS.items():
        config[name] = fields.get(name, default)
        if not isinstance(config[name], bool):
            raise CheckpointError(f"G2PW: {path} field {name!r} must be True or False, got {config[name]!r}")
    return config


def _char_table(path: Path) -> list[tuple[str, str]]:
    """'char<TAB>phoneme' lines, split as upstream splits them (`read().strip().split("\\n")`)."""
    if not path.is_file():
        raise ModelFolderError(f"G2PW: {path} not found (upstream's G2PWModel folder holds it)")
    rows = []
    for number, line in enumerate(read_text_bounded(path, "G2PW").strip().split("\n"), start=1):
        parts = line.split("\t")
        if len(parts) != 2:
            raise CheckpointError(f"G2PW: {path} line {number}: expected 'character<TAB>phoneme', got {line!r}")
        rows.append((parts[0], parts[1]))
    return rows


def phoneme_labels(polyphonic: list[tuple[str, str]], char_phoneme: bool) -> tuple[list[str], dict[str, list[int]]]:
    """dataset.get_phoneme_labels / get_char_phoneme_labels: sorted labels, each character's label indices."""
    def label(char: str, phoneme: str) -> str:
        return f"{char} {phoneme}" if char_phoneme else phoneme
    labels = sorted({label(c, p) for c, p in polyphonic})
    index = {lab: i for i, lab in enumerate(labels)}
    char2phonemes: dict[str, list[int]] = {}
    for char, phoneme in polyphonic:
        char2phonemes.setdefault(char, []).append(index[label(char, phoneme)])
    return labels, char2phonemes


def _wordize(text: str) -> tuple[list[str], list[int | None], list[tuple[int, int]]]:
    """utils.wordize_and_map: runs of [a-zA-Z0-9] are words, spaces map to None, any other char is a word."""
    words: list[str] = []
    text2word: list[int | None] = []
    word2text: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text):
        space = SPACES.match(text, pos)
        if space:
            text2word += [None] * len(space.group(0))
            pos += len(space.group(0))
            continue
        latin = LATIN.match(text, pos)
        word = latin.group(0) if latin else text[pos]
        word2text.append((pos, pos + len(word)))
        text2word += [len(words)] * len(word)
        words.append(word)
        pos += len(word)
    return words, text2word, word2text


def tokenize_and_map(tokenizer: Tokenizer, text: str) -> tuple[list[str], list[int | None], list[tuple[int, int]]]:
    """utils.tokenize_and_map: word pieces of each word (`tokenizer.tokenize(word)`, the fast tokenizer's
    tokens without special tokens), a character -> token map and a token -> character span map."""
    words, text2word, word2text = _wordize(text)
    tokens: list[str] = []
    token2text: list[tuple[int, int]] = []
    for word, (start, end) in zip(words, word2text):
        pieces = tokenizer.encode(word, add_special_tokens=False).tokens
        if not pieces or pieces == ["[UNK]"]:
            token2text.append((start, end))
            tokens.append("[UNK]")
            continue
        for piece in pieces:
            length = len(piece[2:] if piece.startswith("##") else piece)
            token2text.append((start, start + length))
            start += length
            tokens.append(piece)
    text2token = text2word
    for i, (start, end) in enumerate(token2text):
        for pos in range(start, end):
            text2token[pos] = i
    return tokens, text2token, token2text


def _truncate(text: str, query_id: int, tokens: list[str], text2token: list[int | None],
              token2text: list[tuple[int, int]]) -> tuple[str, int, list[str], list[int | None]]:
    """dataset._truncate: a MAX_LEN - 2 token window centred on the query's token, shifted inside the text."""
    keep = MAX_LEN - 2
    token_start = text2token[query_id] - keep // 2
    token_end = token_start + keep
    if token_start < 0:
        token_start, token_end = 0, token_end - token_start
    elif token_end > len(tokens):
        token_start, token_end = token_start - (token_end - len(tokens)), len(tokens)
    start, end = token2text[token_start][0], token2text[token_end - 1][1]
    return (text[start:end], query_id - start, tokens[token_start:token_end],
            [i - token_start if i is not None else None for i in text2token[start:end]])


class G2PW:
    """upstream's G2PWOnnxConverter(style="pinyin", enable_non_tradional_chinese=True) on `OnnxModule`."""

    def __init__(self, net: OnnxModule, tokenizer: Tokenizer, polyphonic: list[tuple[str, str]],
                 monophonic: list[tuple[str, str]], bopomofo_to_pinyin: dict[str, str], config: dict[str, Any],
                 s2tw: Any) -> None:
        self.net = net
        self.tokenizer = tokenizer
        self.use_mask = config["use_mask"]
        self.use_char_phoneme = config["use_char_phoneme"]
        self.labels, self.char2phonemes = phoneme_labels(polyphonic, self.use_char_phoneme)
        self.char2id = {char: i for i, char in enumerate(sorted(self.char2phonemes))}
        self.polyphonic = set(self.char2id) - NON_POLYPHONIC
        self.monophonic = {char: phoneme for char, phoneme in monophonic if char not in NON_MONOPHONIC}
        self.bopomofo_to_pinyin = bopomofo_to_pinyin
        self.s2tw = s2tw
        special = [t for t in ("[CLS]", "[SEP]", "[UNK]") if tokenizer.token_to_id(t) is None]
        if special:
            raise CheckpointError(f"G2PW: the BERT tokenizer has no {', '.join(special)} token")

    @classmethod
    def from_folder(cls, model_dir: Path, tokenizer: Tokenizer) -> G2PW:
        """upstream's G2PWModel folder, unchanged; `tokenizer` is chinese-roberta's (upstream's model_source)."""
        model_dir = Path(model_dir)
        onnx = next((model_dir / n for n in ONNX_NAMES if (model_dir / n).is_file()), None)
        if onnx is None:
            raise ModelFolderError(f"G2PW: {model_dir / ONNX_NAMES[0]} not found (nor {ONNX_NAMES[1]}): "
                                   f"upstream's G2PWModel folder holds it")
        config = read_config(model_dir / CONFIG)
        polyphonic = _char_table(model_dir / POLYPHONIC)
        monophonic = _char_table(model_dir / MONOPHONIC)
        convert_path = model_dir / BOPOMOFO_TO_PINYIN
        # upstream requires char_bopomofo_dict.json but its lookup leads to the same pypinyin reading as a miss
        # (_prepare_data's two last branches are identical), so only its presence is checked.
        for path in (convert_path, model_dir / CHAR_BOPOMOFO):
            if not path.is_file():
                raise ModelFolderError(f"G2PW: {path} not found (upstream's G2PWModel folder holds it)")
        bopomofo_to_pinyin = load_json(convert_path, "G2PW")
        try:
            import opencc
        except ImportError:
            raise ImportError("G2PW needs the `opencc` package (pip install opencc): upstream converts every "
                              "sentence to Traditional Chinese (OpenCC s2tw) before predicting") from None
        net = OnnxModule(read_model(onnx), what=str(onnx)).eval()
        if sorted(net.inputs) != sorted(INPUTS) or len(net.outputs) < 1:
            raise CheckpointError(f"G2PW: {onnx} takes inputs {net.inputs}, not upstream's {list(INPUTS)}")
        return cls(net, tokenizer, polyphonic, monophonic, bopomofo_to_pinyin, config, opencc.OpenCC("s2tw"))

    def to_pinyin(self, bopomofo: str) -> str | None:
        """_convert_bopomofo_to_pinyin: 'ㄒㄧㄥ2' -> 'xing2'; None (upstream warns) for an unknown syllable."""
        tone = bopomofo[-1]
        if tone not in "12345":
            raise CheckpointError(f"G2PW: phoneme {bopomofo!r} does not end in a tone digit 1-5")
        component = self.bopomofo_to_pinyin.get(bopomofo[:-1])
        if component:
            return component + tone
        log.warning("G2PW: %r cannot convert to pinyin", bopomofo)
        return None

    def __call__(self, sentences: list[str]) -> list[list[str | None]]:
        """Tone-numbered pinyin per character of each sentence; None where upstream gives None."""
        if isinstance(sentences, str):
            sentences = [sentences]
        converted = []
        for sent in sentences:
            traditional = self.s2tw.convert(sent)
            if len(traditional) != len(sent):   # upstream asserts this
                raise ValueError(f"G2PW: OpenCC s2tw changed the length of {sent!r}")
            converted.append(traditional)
        texts, model_query_ids, result_query_ids, sent_ids, results = self._prepare_data(converted)
        if not texts:
            return results
        model_input = self.model_input(texts, model_query_ids)
        if model_input is None:
            return results
        preds = self._predict_with_sentence_dedup(model_input, texts)
        if self.use_char_phoneme:
            preds = [pred.split(" ")[1] for pred in preds]
        for sent_id, query_id, pred in zip(sent_ids, result_query_ids, preds):
            results[sent_id][query_id] = self.to_pinyin(pred)
        return results

    def _prepare_data(self, sentences: list[str]) -> tuple[list[str], list[int], list[int], list[int],
                                                           list[list[str | None]]]:
        texts, model_query_ids, result_query_ids, sent_ids, partial_results = [], [], [], [], []
        for sent_id, sent in enumerate(sentences):
            # upstream indexes pypinyin's items by character position, though pypinyin gives a run of
            # non-Chinese characters one item: kept as is, it is what upstream reads. Past the end of that
            # shorter list upstream raises IndexError (e.g. '他说：“好的”'); we read that character alone.
            simplified = traditional_to_simplified(sent)
            pypinyin_result = pinyin(simplified, neutral_tone_with_five=True, style=Style.TONE3)
            partial: list[str | None] = [None] * len(sent)
            indices: list[int] = []
            for i, char in enumerate(sent):
                if char in self.polyphonic:
                    indices.append(i)
                elif char in self.monophonic:
                    partial[i] = self.to_pinyin(self.monophonic[char])
                elif i < len(pypinyin_result):   # in char_bopomofo_dict or not: pypinyin's reading either way
                    partial[i] = pypinyin_result[i][0]
                else:
                    partial[i] = pinyin(simplified[i], neutral_tone_with_five=True, style=Style.TONE3)[0][0]
            if indices:
                left = max(0, indices[0] - CONTEXT_CHARS)
                right = min(len(sent), indices[-1] + CONTEXT_CHARS + 1)
                for index in indices:
                    texts.append(sent[left:right])
                    model_query_ids.append(index - left)
                    result_query_ids.append(index)
                    sent_ids.append(sent_id)
            partial_results.append(partial)
        return texts, model_query_ids, result_query_ids, sent_ids, partial_results

    def model_input(self, texts: list[str], query_ids: list[int]) -> dict[str, np.ndarray] | None:
        """dataset.prepare_onnx_input (window_size=None, max_len=512): the graph's inputs, rows padded with 0;
        None where upstream gives up on a text (it returns {})."""
        rows: dict[str, list] = {name: [] for name in INPUTS}
        cache: dict[str, tuple] = {}
        for text, query_id in zip(texts, query_ids):
            text = text.lower()
            if text not in cache:
                try:
                    cache[text] = tokenize_and_map(self.tokenizer, text)
                except IndexError:   # a piece longer than its word (upstream catches and gives up)
                    log.warning("G2PW: text %r is invalid", text)
                    return None
            tokens, text2token, token2text = cache[text]
            if len(tokens) > MAX_LEN - 2:
                text, query_id, tokens, text2token = _truncate(text, query_id, tokens, text2token, token2text)
            ids = [self.tokenizer.token_to_id(t) for t in ["[CLS]", *tokens, "[SEP]"]]
            char = text[query_id]
            if self.use_mask:
                mask = np.zeros(len(self.labels), dtype=np.float32)
                mask[self.char2phonemes[char]] = 1
            else:
                mask = np.ones(len(self.labels), dtype=np.float32)
            rows["input_ids"].append(ids)
            rows["token_type_ids"].append([0] * len(ids))
            rows["attention_mask"].append([1] * len(ids))
            rows["phoneme_mask"].append(mask)
            rows["char_ids"].append(self.char2id[char])
            rows["position_ids"].append(text2token[query_id] + 1)   # [CLS] comes first
        width = max(len(r) for r in rows["input_ids"])
        out = {name: np.array([r + [0] * (width - len(r)) for r in rows[name]], dtype=np.int64)
               for name in ("input_ids", "token_type_ids", "attention_mask")}
        out["phoneme_mask"] = np.stack(rows["phoneme_mask"])
        out["char_ids"] = np.array(rows["char_ids"], dtype=np.int64)
        out["position_ids"] = np.array(rows["position_ids"], dtype=np.int64)
        return out

    def probabilities(self, model_input: dict[str, np.ndarray]) -> np.ndarray:
        """The graph's `probs` output for one batch (float32, [rows, labels])."""
        device = next(self.net.parameters()).device
        feed = {name: torch.from_numpy(model_input[name]).to(device) for name in INPUTS}
        with torch.inference_mode():
            (probs, *_) = self.net(*(feed[name] for name in self.net.inputs))
        return probs.float().cpu().numpy()

    def _predict(self, model_input: dict[str, np.ndarray]) -> list[str]:
        return [self.labels[i] for i in np.argmax(self.probabilities(model_input), axis=1).tolist()]

    def _predict_with_sentence_dedup(self, model_input: dict[str, np.ndarray], texts: list[str]) -> list[str]:
        """Queries sharing a text run as one group whose BERT input is a single row (the graph broadcasts it
        over the group's queries), exactly as upstream batches them."""
        if len(texts) <= 1:
            return self._predict(model_input)
        groups: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            groups.setdefault(text, []).append(i)
        if all(len(indices) == 1 for indices in groups.values()):
            return self._predict(model_input)
        preds = [""] * len(texts)
        for indices in groups.values():
            group = {name: value[indices] for name, value in model_input.items()}
            if len(indices) > 1:
                for name in ("input_ids", "token_type_ids", "attention_mask"):
                    group[name] = group[name][:1]
            for i, pred in zip(indices, self._predict(group)):
                preds[i] = pred
        return preds


def read_polyphonic(text_dir: Path) -> dict[str, list[str]]:
    """upstream g2pw.py `read_dict()`: 'word: [pinyins]' lines of polyphonic.rep, then polyphonic-fix.rep
    overriding; values parsed as Python literals (upstream evals them). Files are looked up in `text_dir/g2pw/`
    (upstream's GPT_SoVITS/text/ layout), else in `text_dir` itself."""
    text_dir = Path(text_dir)
    table: dict[str, list[str]] = {}
    for name in REP_FILES:
        path = next((p for p in (text_dir / "g2pw" / name, text_dir / name) if p.is_file()), None)
        if path is None:
            raise ModelFolderError(f"G2PW: {text_dir / 'g2pw' / name} not found (upstream's GPT_SoVITS/text/g2pw/ "
                                   f"file)")
        with io.StringIO(read_text_bounded(path, "G2PW")) as f:   # size-bounded, names the file if not UTF-8
            for number, line in enumerate(f, start=1):
                parts = line.split(":")
                try:
                    if len(parts) != 2:
                        raise ValueError("expected exactly one ':'")
                    value = ast.literal_eval(parts[1].strip())
                    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                        raise ValueError("the value is not a list of strings")
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
                    raise CheckpointError(f"G2PW: {path} line {number}: expected \"word: ['pin1', 'yin1']\", "
                                          f"got {line.strip()[:80]!r} ({e})") from None
                table[parts[0].strip()] = value
    return table


def correct_pronunciation(word: str, pinyins: list[str], table: dict[str, list[str]]) -> list[str]:
    """upstream g2pw.py: the table's reading of the whole word, else each character's first table reading
    replaces G2PW's."""
    if word in table:
        return list(table[word])
    pinyins = list(pinyins)
    for i, char in enumerate(word):
        if char in table:
            pinyins[i] = table[char][0]
    return pinyins
