"""Upstream IndexTTS 2's user-facing call on the tiny model folder, recorded for tests/indextts2/test_pipeline.py.

    "$REF_VENV"/bin/pip install wetext==0.1.8 WeTextProcessing==1.2.0 librosa==0.11.0
    "$REF_VENV"/bin/python tests/indextts2/make_pipeline_fixtures.py "$INDEXTTS_REPO"   # or the env var

tiny.write_pipeline_folder writes the folder in the published layout (the pack's tiny.py imported from this
checkout); `IndexTTS2(cfg_path, model_dir, device="cpu", use_qwen_emo=False, aux_paths=...)` loads it (every
checkpoint loaded strictly: upstream's own loaders are lenient) and `infer(reference.wav, text,
output_path=None)` runs at its defaults (interval_silence 200, 120-piece segments, beam sampling, 25
diffusion steps, CFG 0.7) on the 44.1 kHz stereo reference tiny.stereo_reference written as a float WAV.

What the script changes, the sizes and the random stream only:
- the widths upstream hard-codes for the real checkpoints (w2v-bert's 1024 in UnifiedVoice, the GPT's 1280
  and 1024 in MyModel's gpt_layer, CAMPPlus's default channels) are the tiny folder's (its source is
  executed with those numbers replaced; each replacement asserted);
- upstream draws all randomness from torch's global generator and takes no seed: the script seeds it once
  with the case's seed before infer (torch.manual_seed), as a user fixing upstream's randomness does, with
  its voice caches emptied (a voice it has not seen: its w2v-bert draws one unused LayerDrop number per
  layer and pass); every segment's sampling and CFM noise continue that stream (the engine's ONE_STREAM);
- the text normaliser is its Mac/Windows one (wetext), the one the engine runs (fixtures/frontend.json
  compares it with the Linux one; the texts here read the same with both, checked below).

Recorded per case: the text's pieces and segments, each segment's codes, the float waveform upstream
joins (PCM scale, before its int16 cast) and the int16 samples infer returns. Written to fixtures/pipeline.pt.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

CASES = [
    {"name": "zh", "seed": 0,
     "text": "今天天气很好，我们去公园散步吧！你好世界。会议定于2024年3月15日下午3点30分开始，票价是25元，"
             "电话是135-4567-8900。他出生于1990年5月20日，今年35岁。我们明天见。"},
    {"name": "en", "seed": 1, "text": "Hello world. It costs $5.99 at 10:30 am on 2024-03-15, 15% off!"},
]


def import_pack() -> types.ModuleType:
    """This checkout as the package `mizuoto` (tiny.write_folder takes its shapes from the pack's modules)."""
    if "mizuoto" not in sys.modules:
        pack = types.ModuleType("mizuoto")
        pack.__path__ = [str(REPO)]
        sys.modules["mizuoto"] = pack
    import tiny
    return tiny


def sized(name: str, path: Path, edits: list[tuple[str, str, int]]) -> None:
    """Upstream module `name` executed from its source with `edits` (old, new, expected count) applied."""
    src = path.read_text()
    for old, new, count in edits:
        assert src.count(old) == count, (name, old, src.count(old))
        src = src.replace(old, new)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(src, str(path), "exec"), module.__dict__)


@contextlib.contextmanager
def strict_loading():
    """Every load_state_dict strict but for computed buffers (upstream's load_checkpoint / load_checkpoint2
    pass strict=False, and load_checkpoint2 also drops tensors whose shape differs): every parameter of
    every module comes from the folder, or the recording fails."""
    original = torch.nn.Module.load_state_dict

    def load(self, state_dict, strict=True, assign=False):
        result = original(self, state_dict, strict=strict, assign=assign)
        if not type(self).__module__.startswith("indextts"):    # transformers loads tensor by tensor (checked below)
            return result
        buffers = {k for k, _ in self.named_buffers()}
        assert not result.unexpected_keys and set(result.missing_keys) <= buffers, result
        return result

    torch.nn.Module.load_state_dict = load
    try:
        yield
    finally:
        torch.nn.Module.load_state_dict = original


def upstream(repo: Path, tiny):
    sys.path.insert(0, str(repo))
    import make_fixtures
    make_fixtures.setup_upstream(repo)
    sys.modules["modelscope"] = types.SimpleNamespace(AutoModelForCausalLM=None)   # QwenEmotion only (not loaded)
    utils = types.ModuleType("indextts.s2mel.modules.bigvgan.utils")   # matplotlib/scipy plotting helpers
    utils.init_weights = lambda m, mean=0.0, std=0.01: None
    utils.get_padding = lambda kernel_size, dilation=1: int((kernel_size * dilation - dilation) / 2)
    sys.modules["indextts.s2mel.modules.bigvgan.utils"] = utils
    import indextts.gpt
    import indextts.s2mel.modules
    width, dim = tiny.E2E_WIDTH, tiny.CONFIG["gpt"]["model_dim"]
    sized("indextts.gpt.model_v2", repo / "indextts/gpt/model_v2.py", [
        ("ConformerEncoder(input_size=1024", f"ConformerEncoder(input_size={width}", 2),
        ("PerceiverResampler(1024,", f"PerceiverResampler({width},", 1),
        ("nn.Linear(1024, model_dim)", f"nn.Linear({width}, model_dim)", 1)])
    sized("indextts.s2mel.modules.commons", repo / "indextts/s2mel/modules/commons.py", [
        ("torch.nn.Linear(1280, 256)", f"torch.nn.Linear({dim}, 256)", 1),
        ("torch.nn.Linear(128, 1024)", f"torch.nn.Linear(128, {width})", 1)])
    from indextts import infer_v2
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    infer_v2.CAMPPlus = functools.partial(CAMPPlus, **{k: v for k, v in tiny.CAMPPLUS.items()
                                                        if k not in ("feat_dim", "embedding_size")})
    return infer_v2


def write_preprocessor(folder: Path) -> None:
    """w2v-bert-2.0's preprocessor_config.json as published (transformers' SeamlessM4TFeatureExtractor reads it)."""
    import json
    (folder / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "SeamlessM4TFeatureExtractor", "feature_size": 80, "num_mel_bins": 80,
        "padding_side": "right", "padding_value": 1, "processor_class": "Wav2Vec2BertProcessor",
        "return_attention_mask": True, "sampling_rate": 16000, "stride": 2}))


def main(repo: Path) -> None:
    import soundfile
    from wetext import Normalizer
    tiny = import_pack()
    infer_v2 = upstream(repo, tiny)
    torch.set_num_threads(1)
    out: dict = {"cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        folder = tiny.write_pipeline_folder(Path(tmp) / "tiny")
        write_preprocessor(folder / "w2v-bert-2.0")
        ref = Path(tmp) / "reference.wav"
        soundfile.write(ref, tiny.stereo_reference().T.numpy(), 44100, subtype="FLOAT")
        aux = {"w2v_bert": str(folder / "w2v-bert-2.0"), "semantic_codec": str(folder / "semantic_codec/model.safetensors"),
               "campplus": str(folder / "campplus/campplus_cn_common.bin"), "bigvgan": str(folder / "bigvgan")}
        with strict_loading():
            tts = infer_v2.IndexTTS2(cfg_path=str(folder / "config.yaml"), model_dir=str(folder), device="cpu",
                                     use_qwen_emo=False, aux_paths=aux)
        from safetensors.torch import load_file
        w2v, published = tts.semantic_model.state_dict(), load_file(folder / "w2v-bert-2.0/model.safetensors")
        assert all(torch.equal(w2v[k], v) for k, v in published.items()), "w2v-bert-2.0 not loaded"
        unused = sorted(set(w2v) - set(published))
        # training-time masking, and the adapter (it runs after the encoder: hidden state 17 never sees it)
        assert all(k == "masked_spec_embed" or k.startswith("adapter.") for k in unused), unused
        linux = {c["name"]: tts.tokenizer.tokenize(c["text"]) for c in CASES}
        tts.normalizer.zh_normalizer = Normalizer(remove_erhua=False, lang="zh", operator="tn")  # load()'s non-Linux branch
        tts.normalizer.en_normalizer = Normalizer(lang="en", operator="tn")
        gpt_call = tts.gpt.inference_speech
        joins = tts.insert_interval_silence
        for case in CASES:
            rec = {**case, "codes": [], "pieces": tts.tokenizer.tokenize(case["text"])}
            assert rec["pieces"] == linux[case["name"]], "the two normalisers read this text differently"
            rec["segments"] = tts.tokenizer.split_segments(rec["pieces"], 120)

            def inference_speech(*a, rec=rec, **k):
                codes, latent = gpt_call(*a, **k)
                rec["codes"].append(codes[0].tolist())
                return codes, latent

            def insert_interval_silence(wavs, rec=rec, **k):
                joined = joins(wavs, **k)
                rec["float"] = torch.cat(joined, dim=1)[0].clone()
                return joined

            tts.gpt.inference_speech = inference_speech
            tts.insert_interval_silence = insert_interval_silence
            tts.cache_spk_cond = tts.cache_emo_cond = None   # each case a voice upstream has not seen: it derives
            tts.cache_spk_audio_prompt = tts.cache_emo_audio_prompt = None   # the conditioning (and draws) afresh
            torch.manual_seed(case["seed"])
            rate, int16 = tts.infer(str(ref), case["text"], output_path=None)
            assert rate == 22050
            rec["int16"] = torch.from_numpy(int16[:, 0].copy())
            out["cases"].append(rec)
            print(case["name"], [len(s) for s in rec["segments"]], [len(c) for c in rec["codes"]], rec["int16"].shape)
    torch.save(out, tiny.FIXTURES / "pipeline.pt")


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INDEXTTS_REPO")
    if not source:
        sys.exit("make_pipeline_fixtures.py needs index-tts's source: pass its folder or set $INDEXTTS_REPO")
    main(Path(source))
