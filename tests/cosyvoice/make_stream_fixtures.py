"""Upstream CosyVoice 2's / 3's `inference_zero_shot(..., stream=True)` pieces on the tiny folders, recorded for
tests/cosyvoice/test_stream.py.

    "$REF_VENV"/bin/python tests/cosyvoice/make_stream_fixtures.py "$COSYVOICE_REPO" "$WETEXT_FSTS" [--out FILE]

The same folders, reference, transcripts, seeds and text front end as make_pipeline_fixtures.py (its CASES /
CASES_V3 zh_date and en_numbers), the same stand-ins (Qwen2Encoder from the tiny config, soundfile for
torchaudio.load), and upstream's own code otherwise unchanged, with two things fixed that upstream leaves to
timing or history:

- The LM runs ahead of the hops: upstream's `tts(stream=True)` runs `llm_job` in a thread and polls its
  tokens every 0.1 s; which tokens each hop reads does not depend on the timing (a hop takes a fixed prefix),
  but CosyVoice 2's HiFT draws its NSF noise from the same global torch RNG as the LM's sampling, so the
  draws interleave as the threads happen to run. Here `threading.Thread.start` in cosyvoice.cli.model runs
  the LM to its end at once (and the 0.1 s sleep is skipped): every LM draw comes before every HiFT draw,
  the order the engine takes (its LM phase ends before the first hop). CosyVoice 3's HiFT draws nothing.
- `model.model.token_hop_len` is set back to 25 before each case: upstream doubles this model attribute per
  hop (up to 100) and never resets it, so a segment starts at the hop length the previous one ended at, and a
  request at the one the previous request left (a freshly loaded model starts at 25). The engine starts each
  request at 25 and carries it over between segments, as within one upstream call.

Also writes fixtures/stream_hops_v{2,3}.pt (`hop_loop`: upstream's hop loop alone, from fixed inputs) and
fixtures/stream_parts_v{2,3}.pt (`parts`: each streaming piece of the flow and HiFT alone, float32
and float64). Writes fixtures/stream_v2.pt and stream_v3.pt: per case the segments, prompt text, each segment's tokens
and the pieces upstream yielded, in order (float32 for v2's zh_date, float16 for the others).
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

NAMES = ("zh_date", "en_numbers")
HOP_TOKENS, HOP_SEED = 92, 3     # hop_loop: 92 tokens after 37 prompt tokens make hops of 38 and 50 and a last piece
FULL = ((2, "zh_date"),)    # stored in float32; the others in float16 (<= 2.5e-4 of the audio's scale)


def main(repo: Path, fsts: Path, out_dir: Path | None = None) -> None:
    import make_fixtures
    import make_pipeline_fixtures as pipe
    import make_segment_fixtures
    make_segment_fixtures.wetext_stand_in(fsts)
    make_fixtures.setup_upstream(repo)
    import soundfile
    import torchaudio
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import cosyvoice.cli.model as model_mod
    import cosyvoice.llm.llm as llm_mod
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3
    from cosyvoice.utils.common import set_all_random_seed

    def qwen_init(self, pretrain_path):
        torch.nn.Module.__init__(self)
        self.model = Qwen2ForCausalLM(Qwen2Config.from_pretrained(pretrain_path))

    def load(path, *args, **kwargs):
        data, rate = soundfile.read(path, dtype="float32", always_2d=True)
        return torch.from_numpy(data.T.copy()), rate

    class LMFirst:
        """threading.Thread as cli/model.py uses it, the target run to its end by start()."""

        def __init__(self, target, args=()):
            self.target, self.args = target, args

        def start(self):
            self.target(*self.args)

        def join(self):
            pass

    llm_mod.Qwen2Encoder.__init__ = qwen_init
    torchaudio.load = load
    # only cli/model.py's names: the modules themselves stay as they are for everyone else
    model_mod.threading = types.SimpleNamespace(Thread=LMFirst, Lock=threading.Lock)
    model_mod.time = types.SimpleNamespace(sleep=lambda seconds: None, time=time.time)
    torch.set_num_threads(1)
    for version in (2, 3):
        out: dict[str, dict] = {}
        with tempfile.TemporaryDirectory() as tmp:
            if version == 2:
                folder = tiny.write_folder(Path(tmp) / "tiny-v2", 2, end_bias=pipe.END_BIAS)
            else:
                folder = tiny.write_folder(Path(tmp) / "tiny-v3", 3, real_ids=True)
            wav_path = Path(tmp) / "reference.wav"
            soundfile.write(wav_path, tiny.stereo_reference().T.numpy(), 44100, subtype="FLOAT")
            model = (CosyVoice2 if version == 2 else CosyVoice3)(str(folder))
            model.model.llm.eval(), model.model.flow.eval(), model.model.hift.eval()
            seen: dict[str, list] = {}
            frontend_zero_shot, tts, llm_job = model.frontend.frontend_zero_shot, model.model.tts, model.model.llm_job

            def record_frontend(tts_text, prompt_text, *a, **k):
                seen["segments"].append(tts_text)
                seen["prompt_text"] = prompt_text
                seen["inputs"].append(frontend_zero_shot(tts_text, prompt_text, *a, **k))
                return seen["inputs"][-1]

            def record_llm(text, prompt_text, prompt_speech, embedding, uuid):
                llm_job(text, prompt_text, prompt_speech, embedding, uuid)
                seen["tokens"].append(torch.tensor(model.model.tts_speech_token_dict[uuid]))

            def record_tts(*a, **k):
                seen["pieces"].append([])
                for piece in tts(*a, **k):
                    seen["pieces"][-1].append(piece["tts_speech"][0].clone())
                    yield piece

            model.frontend.frontend_zero_shot, model.model.tts, model.model.llm_job = record_frontend, record_tts, record_llm
            for name, text, transcript, seed in (pipe.CASES if version == 2 else pipe.CASES_V3):
                if name not in NAMES:
                    continue
                seen.update(segments=[], tokens=[], pieces=[], inputs=[])
                prompt_arg = transcript if version == 2 else pipe.V3_SYSTEM + transcript
                model.model.token_hop_len = 25        # a freshly loaded model's
                set_all_random_seed(seed)
                for _ in model.inference_zero_shot(text, prompt_arg, str(wav_path), stream=True):
                    pass
                pieces = [[p if (version, name) in FULL else p.half() for p in seg] for seg in seen["pieces"]]
                out[name] = {"text": text, "reference_text": transcript, "seed": seed,
                             "segments": list(seen["segments"]), "prompt_text": seen["prompt_text"],
                             "tokens": list(seen["tokens"]), "pieces": pieces}
                print(version, name, seen["segments"], [len(t) for t in seen["tokens"]],
                      [[p.numel() for p in seg] for seg in seen["pieces"]])
                if name == "en_numbers":
                    hops = hop_loop(tts, seen["inputs"][0], seen["tokens"][0][:HOP_TOKENS], model.model)
        torch.save(out, (out_dir or tiny.FIXTURES) / f"stream_v{version}.pt")
        torch.save(hops, (out_dir or tiny.FIXTURES) / f"stream_hops_v{version}.pt")
    for version in (2, 3):
        with tempfile.TemporaryDirectory() as tmp:
            parts(version, Path(tmp), out_dir or tiny.FIXTURES)


def hop_loop(tts, inputs: dict, tokens: torch.Tensor, model) -> dict:
    """fixtures/stream_hops_v{2,3}.pt: upstream's `tts(stream=True)` hop loop alone, from upstream's own
    flow prompt (speech tokens, mel, x-vector of the first en_numbers segment) and HOP_TOKENS of its speech
    tokens (given as `source_speech_token`, upstream's voice-conversion entry: no LM runs), the global RNG
    seeded with HOP_SEED just before (v2's HiFT noise starts there), the pieces in float32."""
    prompt = {k: inputs[k] for k in ("flow_prompt_speech_token", "prompt_speech_feat", "flow_embedding")}
    model.token_hop_len = 25
    torch.manual_seed(HOP_SEED)
    pieces = [p["tts_speech"][0].clone() for p in tts(source_speech_token=tokens[None].int(), stream=True, **prompt)]
    print("hops", len(tokens), [p.numel() for p in pieces])
    return {"tokens": tokens.long(), "prompt_token": prompt["flow_prompt_speech_token"].long(),
            "prompt_feat": prompt["prompt_speech_feat"].float(), "embedding": prompt["flow_embedding"].float(),
            "seed": torch.tensor(HOP_SEED), "pieces": pieces}


def parts(version: int, work: Path, out_dir: Path) -> None:
    """fixtures/stream_parts_v{2,3}.pt: upstream's streaming pieces one by one, in float32 and float64
    (make_fixtures.float64_run, the seeded weights of make_fixtures.run_version): a flow hop
    `inference(streaming=True, finalize=False)` over 10 prompt + 60 tokens (chunk masks across 2+ chunks),
    v3's HiFT `inference(finalize=False)`, v2's HiFT `inference(cache_source=...)`."""
    import json

    import make_fixtures
    folder = work / f"v{version}"
    tiny.write_folder(folder, version, keys={"llm": {}, "flow": {}, "hift": {}})
    _, flow, hift = make_fixtures.build_upstream(version, folder / "CosyVoice-BlankEN")
    keys = json.loads((tiny.FIXTURES / f"keys_v{version}.json").read_text())
    flow.load_state_dict(tiny.seeded_state(keys["flow"]), strict=True)
    hift.load_state_dict(tiny.seeded_state(keys["hift"]), strict=True)
    g = torch.Generator().manual_seed(100 + version)
    token = torch.randint(0, 6561, (1, 60), generator=g, dtype=torch.int32)
    prompt_token = torch.randint(0, 6561, (1, 10), generator=g, dtype=torch.int32)
    prompt_feat = torch.randn(1, 20, 80, generator=g)
    embedding = torch.randn(1, 192, generator=g)
    n = lambda t: torch.tensor([t.shape[1]], dtype=torch.int32)     # noqa: E731
    out: dict[str, object] = {"flow.token": token, "flow.prompt_token": prompt_token, "flow.prompt_feat": prompt_feat,
                              "flow.embedding": embedding}
    mel, _ = flow.inference(token=token, token_len=n(token), prompt_token=prompt_token, prompt_token_len=n(prompt_token),
                            prompt_feat=prompt_feat, prompt_feat_len=n(prompt_feat), embedding=embedding,
                            streaming=True, finalize=False)
    flow64 = make_fixtures.to_float64(flow)
    with make_fixtures.float64_run():
        mel64, _ = flow64.inference(token=token, token_len=n(token), prompt_token=prompt_token,
                                    prompt_token_len=n(prompt_token), prompt_feat=prompt_feat.double(),
                                    prompt_feat_len=n(prompt_feat), embedding=embedding.double(),
                                    streaming=True, finalize=False)
    assert mel64.dtype == torch.float64
    frames = mel.shape[2] + prompt_feat.shape[1]
    out.update({"flow.mel": mel, "flow.mel.f64": mel64, "flow.noise": flow.decoder.rand_noise[:, :, :frames].clone()})

    hmel = torch.randn(1, 80, 30, generator=g) * 2 - 4
    seed = 5
    hift64 = make_fixtures.to_float64(hift)
    if version == 3:
        hg = torch.Generator().manual_seed(seed)
        rand_ini = torch.rand((1, 9), generator=hg)
        rand_ini[:, 0] = 0
        sine = hift.m_source.l_sin_gen
        sine.rand_ini, sine.sine_waves = rand_ini, torch.rand((1, 30 * 480, 9), generator=hg)
        speech, _ = hift.inference(speech_feat=hmel, finalize=False)
        sine64 = hift64.m_source.l_sin_gen
        sine64.rand_ini, sine64.sine_waves = sine.rand_ini.clone(), sine.sine_waves.clone()
        with make_fixtures.float64_run():
            speech64, _ = hift64.inference(speech_feat=hmel.double(), finalize=False)
    else:
        cache = torch.randn(1, 1, 8 * 480, generator=g) * 0.1
        out["hift.cache_source"] = cache
        torch.manual_seed(seed)
        speech, source = hift.inference(speech_feat=hmel, cache_source=cache)
        assert torch.equal(source[:, :, :cache.shape[2]], cache)
        torch.manual_seed(seed)
        with make_fixtures.float64_run():
            speech64, _ = hift64.inference(speech_feat=hmel.double(), cache_source=cache.double())
    assert speech64.dtype == torch.float64
    out.update({"hift.mel": hmel, "hift.seed": torch.tensor(seed), "hift.speech": speech, "hift.speech.f64": speech64})
    torch.save(out, out_dir / f"stream_parts_v{version}.pt")
    print(f"parts v{version}:", {k: list(v.shape) for k, v in out.items() if isinstance(v, torch.Tensor)})


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", nargs="?", default=os.environ.get("COSYVOICE_REPO"))
    parser.add_argument("fsts", nargs="?", default=os.environ.get("WETEXT_FSTS"))
    parser.add_argument("--out", type=Path, default=None, help="a folder to write to instead of fixtures/")
    args = parser.parse_args()
    if not args.repo or not args.fsts:
        sys.exit("make_stream_fixtures.py needs CosyVoice's source and wetext 0.1.8's fsts folder: pass them or "
                 "set $COSYVOICE_REPO and $WETEXT_FSTS")
    main(Path(args.repo), Path(args.fsts), args.out)
