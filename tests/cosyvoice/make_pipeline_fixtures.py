"""Upstream CosyVoice 2's / 3's user-facing call on the tiny folder, recorded for tests/cosyvoice/test_pipeline.py.

    "$REF_VENV"/bin/python tests/cosyvoice/make_pipeline_fixtures.py "$COSYVOICE_REPO" "$WETEXT_FSTS" [--version 3] [--out FILE]

(`--out` writes elsewhere than fixtures/pipeline_v{2,3}.pt, e.g. to compare a re-recording with the committed file.)

`CosyVoice2(folder).inference_zero_shot(text, prompt_text, prompt_wav)` (cosyvoice/cli/cosyvoice.py, fp32
on the CPU, stream=False, speed 1, text_frontend on: wetext 0.0.4 + inflect 7.3.1 as in
make_segment_fixtures.py) on tiny.write_folder's v2 folder (the published layout) with a 44.1 kHz stereo
WAV (tiny.stereo_reference, float32 samples) and its transcript, seeded as upstream's webui seeds a
request: `set_all_random_seed(seed)` once before the call, so every segment's RAS sampling and HiFT noise
continue one global torch stream and the flow's noise is the seed-0 buffer drawn when the model was built
(the engine's ONE_STREAM and FLOW_NOISE_SEED). Upstream's own code runs otherwise unchanged. Qwen2Encoder is built from the tiny config (no pretrained
weights; llm.pt fills it), torchaudio.load reads the WAV with soundfile (torchaudio 2.11 has no backend
here). Writes fixtures/pipeline_v2.pt: per case the segments and prompt text upstream's LM read, the
speech tokens of each segment and the concatenated waveform (none for zh_paragraph, float16 for en_numbers: 5e-4 of the
audio's scale at most, far under the test's bound).

Version 3: `CosyVoice3(folder).inference_zero_shot(text, "You are a helpful assistant.<|endofprompt|>" +
transcript, wav)`, the prompt-text convention of upstream's example.py (cosyvoice3_example), on
tiny.write_folder(..., 3, real_ids=True): its tokenizer pads the tiny BPE to Qwen2's 151643 ids so the
specials get their real ids and upstream's CosyVoice3LM finds `<|endofprompt|>` at its hard-coded 151646.
The v3 LM has no end-of-speech bias: 200 of its 6761 outputs stop it (only the first is masked before the
minimum length), so the random LM ends soon by itself. Writes fixtures/pipeline_v3.pt, audio in float16.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

# (name, text, transcript, seed): multi-sentence Chinese with a date and numbers (default suite); a Chinese
# paragraph and English with numbers, both cut into two segments (--slow, their audio stored in float16).
CASES = [
    ("zh_date", "3月5日。晴！", "我在2023年说过。", 11),
    ("zh_paragraph", "今天是2024年3月15日，气温25℃，湿度60%。我们下午3点出发去公园散步，票价是120元，大家记得带水和雨伞。"
                     "明天是3月16日，预计有小雨，气温降到12℃。", "我在2023年说过。", 12),
    ("en_numbers", "On May 5th, 2024 I paid $19.99 for 3 books. That's 50% off!", "I said it in 2023.", 13),
]
V3_SYSTEM = "You are a helpful assistant.<|endofprompt|>"   # upstream's example.py, cosyvoice3_example
# (name, text, transcript (upstream is given V3_SYSTEM + transcript), seed): Chinese with a date, English with numbers.
CASES_V3 = [
    ("zh_date", "3月5日。晴！", "我在2023年说过。", 21),
    ("en_numbers", "On May 5th, 2024 I paid $19.99 for 3 books. That's 50% off!", "I said it in 2023.", 23),
]
SLOW = ("zh_paragraph", "en_numbers")
TOKENS_ONLY = ("zh_paragraph",)   # 21 s of audio: its segments and tokens are compared, the audio of the others
END_BIAS = 8.0      # tiny.write_folder: sentences end soon after upstream's minimum length


def main(repo: Path, fsts: Path, version: int = 2, out_path: Path | None = None) -> None:
    import make_fixtures
    import make_segment_fixtures
    make_segment_fixtures.wetext_stand_in(fsts)        # before make_fixtures' empty modelscope stand-in
    make_fixtures.setup_upstream(repo)
    import soundfile
    import torchaudio
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import cosyvoice.llm.llm as llm_mod
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3
    from cosyvoice.utils.common import set_all_random_seed

    def qwen_init(self, pretrain_path):
        torch.nn.Module.__init__(self)
        self.model = Qwen2ForCausalLM(Qwen2Config.from_pretrained(pretrain_path))

    def load(path, *args, **kwargs):
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        return torch.from_numpy(data.T.copy()), rate

    llm_mod.Qwen2Encoder.__init__ = qwen_init
    torchaudio.load = load
    torch.set_num_threads(1)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if version == 2:
            folder = tiny.write_folder(Path(tmp) / "tiny-v2", 2, end_bias=END_BIAS)
        else:
            folder = tiny.write_folder(Path(tmp) / "tiny-v3", 3, real_ids=True)
        wav_path = Path(tmp) / "reference.wav"
        soundfile.write(wav_path, tiny.stereo_reference().T.numpy(), 44100, subtype="FLOAT")
        model = (CosyVoice2 if version == 2 else CosyVoice3)(str(folder))
        if version == 3:
            eop = model.frontend.tokenizer.tokenizer.convert_tokens_to_ids("<|endofprompt|>")
            assert eop == 151646, f"<|endofprompt|> has id {eop}, upstream's LM looks for 151646"
        model.model.llm.eval(), model.model.flow.eval(), model.model.hift.eval()
        seen: dict[str, list] = {}
        frontend_zero_shot, token2wav = model.frontend.frontend_zero_shot, model.model.token2wav

        def record_frontend(tts_text, prompt_text, *a, **k):
            seen["segments"].append(tts_text)
            seen["prompt_text"] = prompt_text
            return frontend_zero_shot(tts_text, prompt_text, *a, **k)

        def record_tokens(token, *a, **k):
            seen["tokens"].append(token[0].long().clone())
            return token2wav(token, *a, **k)

        model.frontend.frontend_zero_shot, model.model.token2wav = record_frontend, record_tokens
        for name, text, transcript, seed in (CASES if version == 2 else CASES_V3):
            seen.update(segments=[], tokens=[])
            prompt_arg = transcript if version == 2 else V3_SYSTEM + transcript
            set_all_random_seed(seed)                   # as webui.py does before each generation
            waves = [out_["tts_speech"][0] for out_ in model.inference_zero_shot(text, prompt_arg, str(wav_path),
                                                                                stream=False)]
            out[name] = {"text": text, "reference_text": transcript, "seed": seed, "segments": list(seen["segments"]),
                         "prompt_text": seen["prompt_text"], "tokens": list(seen["tokens"]), "speech": torch.cat(waves)}
            if version == 3:
                out[name]["upstream_prompt_text"] = prompt_arg     # what upstream's call was given
            print(name, seen["segments"], seen["prompt_text"], [len(t) for t in seen["tokens"]], out[name]["speech"].shape)
            if name in SLOW or version == 3:
                out[name]["speech"] = out[name]["speech"].half()
            if name in TOKENS_ONLY:
                del out[name]["speech"]
    torch.save(out, out_path or tiny.FIXTURES / f"pipeline_v{version}.pt")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", nargs="?", default=os.environ.get("COSYVOICE_REPO"))
    parser.add_argument("fsts", nargs="?", default=os.environ.get("WETEXT_FSTS"))
    parser.add_argument("--version", type=int, choices=(2, 3), default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.repo or not args.fsts:
        sys.exit("make_pipeline_fixtures.py needs CosyVoice's source and wetext 0.1.8's fsts folder: pass them or "
                 "set $COSYVOICE_REPO and $WETEXT_FSTS")
    main(Path(args.repo), Path(args.fsts), args.version, args.out)
