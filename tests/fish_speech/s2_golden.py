"""Golden outputs of fish-speech's repository head (Fish Audio S2) on the tiny S2 checkpoint of tiny.py.

fish-speech's S2 code is not on PyPI (0.1.0 is the S1 code), so this script runs the head's own classes in
the reference venv and writes `golden_s2.pt` (token ids, prompts, codes, codec codes and audio), which
`test_s2.py` (default suite) compares our engine against, bit for bit. The tiny checkpoint is regenerated
from seeds by `tiny.write_tiny_s2` on both sides; the head loads it with its own `from_pretrained`
(sharded safetensors, key remap, tokenizer.json through transformers' AutoTokenizer). Recipe: README.md.

    FISH_SPEECH_HEAD=<unpacked head> "$REF_VENV"/bin/python tests/fish_speech/s2_golden.py
"""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "golden_s2.pt"
TEXT = "(excited) Hello there, 你好！ It's a test [laughing] of the voice."
SPEAKERS = "intro dropped <|speaker:0|>First turn here.  <|speaker:1|> Second one, 第二。 "
REF_TEXT = "Reference words, spoken slowly."
# name: (text, clone, sampling options of upstream's generate_long, seed)
CASES = {
    "tts_greedy": (TEXT, False, {"top_k": 1}, 3),
    "tts_sampled": (TEXT, False, {"temperature": 0.7, "top_p": 0.9, "top_k": 30}, 5),
    "clone_greedy": (TEXT, True, {"top_k": 1}, 7),
    "clone_sampled": (TEXT, True, {"temperature": 1.0, "top_p": 0.9, "top_k": 30}, 11),
    "clone_cold": (SPEAKERS, True, {"temperature": 0.2, "top_p": 0.95, "top_k": 8}, 13),  # repeats: RAS fires
}
MAX_NEW = 24
AUDIO_FRAMES = 6
# More than 5 speaker turns: upstream's generate_long makes batches of 5 turns, each later batch seeing the
# earlier batches' text and generated codes as earlier conversation turns, all drawn from one seeded stream.
DIALOGUE = ("opening words dropped <|speaker:0|>One. <|speaker:1|>Two, 二。 <|speaker:0|>Three! "
            "<|speaker:1|>Four? <|speaker:2|>Five. <|speaker:0|>Six, 六。 <|speaker:1|>Seven.")
# name: (text, clone, sampling options, seed, max_new_tokens)
BATCHED = {"dialogue_clone": (DIALOGUE, True, {"temperature": 0.7, "top_p": 0.9, "top_k": 30}, 17, 12)}


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference_wave(seconds: float = 0.6) -> torch.Tensor:
    t = torch.arange(int(44100 * seconds)) / 44100
    return 0.3 * torch.sin(2 * torch.pi * 220 * t) * torch.sin(2 * torch.pi * 3 * t) \
        + 0.05 * torch.sin(2 * torch.pi * 1900 * t)


def upstream_codec(modded_dac, rvq, c):
    """The head's DAC classes with tiny.codec_config()'s sizes (upstream's yaml, shrunk)."""
    def module():
        t = c.pre_module
        return modded_dac.WindowLimitedTransformer(
            causal=True, window_size=t.window, input_dim=t.input_dim,
            config=modded_dac.ModelArgs(block_size=2048, n_layer=t.layers, n_head=t.heads, dim=t.dim,
                                        intermediate_size=t.intermediate, n_local_heads=-1, head_dim=64,
                                        rope_base=10000, norm_eps=1e-5, channels_first=True))

    general = partial(modded_dac.ModelArgs, block_size=8192, n_local_heads=-1, head_dim=64, rope_base=10000,
                      norm_eps=1e-5, dropout_rate=0.1, attn_dropout_rate=0.1, channels_first=True)
    quantizer = rvq.DownsampleResidualVectorQuantize(
        input_dim=c.latent_dim, n_codebooks=c.n_codebooks, codebook_size=c.codebook_size,
        codebook_dim=c.codebook_dim, quantizer_dropout=0.5, downsample_factor=list(c.downsample_factor),
        semantic_codebook_size=c.semantic_codebook_size, pre_module=module(), post_module=module())
    return modded_dac.DAC(encoder_dim=c.encoder_dim, encoder_rates=list(c.encoder_rates), decoder_dim=c.decoder_dim,
                          decoder_rates=list(c.decoder_rates), quantizer=quantizer, sample_rate=44100, causal=True,
                          encoder_transformer_layers=[0, 0, 0, 1], decoder_transformer_layers=[1, 0, 0, 0],
                          transformer_general_config=general)


def main() -> None:
    if not os.environ.get("FISH_SPEECH_HEAD"):
        raise SystemExit("set $FISH_SPEECH_HEAD to fish-speech's head unpacked with an __init__.py "
                         "(recipe: tests/fish_speech/README.md)")
    head = Path(os.environ["FISH_SPEECH_HEAD"])
    tiny = _load("fish_tiny", HERE / "tiny.py")
    stubs = _load("fish_stubs", HERE / "upstream_stubs.py")
    # The head's package first (a scratch copy given an __init__.py, so 0.1.0's installed namespace
    # package cannot mix in), its real transformers, stand-ins for what its codec imports but never runs.
    sys.path.insert(0, str(head))
    stubs.install_stubs(head / "fish_speech", keep_transformers=True)
    import fish_speech
    assert Path(fish_speech.__file__).parent == head / "fish_speech", fish_speech.__file__
    from fish_speech.models.dac import modded_dac, rvq
    from fish_speech.models.text2semantic import inference as inf
    from fish_speech.models.text2semantic.llama import DualARTransformer

    folder = Path(tempfile.mkdtemp()) / "tiny_s2"
    tiny.write_tiny_s2(folder, seed=4)
    lm = DualARTransformer.from_pretrained(str(folder), load_weights=True).eval()
    tok = lm.tokenizer
    # from_pretrained loads with strict=False: every parameter must have come from the file.
    from safetensors import safe_open
    on_disk = {}
    for shard in sorted(folder.glob("model-*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            on_disk.update({k: f.get_tensor(k) for k in f.keys()})
    mapped = {tiny.s2_checkpoint_name(k): v for k, v in lm.state_dict().items()}
    assert set(mapped) == set(on_disk), set(mapped) ^ set(on_disk)
    assert all(torch.equal(mapped[k], on_disk[k]) for k in mapped)

    codec = upstream_codec(modded_dac, rvq, tiny.codec_config())
    missing, unexpected = codec.load_state_dict(torch.load(folder / "codec.pth", weights_only=True), strict=False)
    assert not [k for k in missing if not k.endswith(("freqs_cis", "causal_mask"))] and not unexpected
    codec.eval()

    out: dict = {"texts": list(tiny.TEXTS) + [TEXT, SPEAKERS, REF_TEXT, "<|im_start|>user\n<|voice|><|semantic:7|>"],
                 "semantic": (tok.semantic_begin_id, tok.semantic_end_id),
                 "im_end": tok.get_token_id("<|im_end|>"), "cases": {}}
    out["ids"] = [tok.encode(t) for t in out["texts"]]
    wav = reference_wave()
    with torch.inference_mode():
        ref_codes, _ = codec.encode(wav[None, None], torch.tensor([wav.numel()]))
    ref_codes = ref_codes[0].long()
    out["reference_codes"] = ref_codes

    captured = {}
    real_generate = inf.generate

    def spy(**kw):
        captured["prompt"] = kw["prompt"].clone()
        return real_generate(**kw)
    inf.generate = spy
    for name, (text, clone, options, seed) in CASES.items():
        lm._cache_setup_done = False
        torch.manual_seed(seed)
        responses = list(inf.generate_long(
            model=lm, device="cpu", decode_one_token=inf.decode_one_token_ar, text=text, max_new_tokens=MAX_NEW,
            prompt_text=[REF_TEXT] if clone else None, prompt_tokens=[ref_codes] if clone else None, **options))
        codes = [r.codes for r in responses if r.action == "sample"]
        assert len(codes) == 1, f"{name}: {len(codes)} batches"
        out["cases"][name] = {"prompt": captured["prompt"].long(), "codes": codes[0].long()}
        print(name, "frames:", codes[0].shape[1])
    captured["prompts"] = []

    def spy_all(**kw):
        captured["prompts"].append(kw["prompt"].clone())
        return real_generate(**kw)
    inf.generate = spy_all
    out["batched"] = {}
    for name, (text, clone, options, seed, max_new) in BATCHED.items():
        lm._cache_setup_done = False
        captured["prompts"] = []
        torch.manual_seed(seed)
        responses = list(inf.generate_long(
            model=lm, device="cpu", decode_one_token=inf.decode_one_token_ar, text=text, max_new_tokens=max_new,
            prompt_text=[REF_TEXT] if clone else None, prompt_tokens=[ref_codes] if clone else None, **options))
        samples = [r for r in responses if r.action == "sample"]
        assert len(samples) > 1, f"{name}: {len(samples)} batch"
        out["batched"][name] = {"batches": [r.text for r in samples], "codes": [r.codes.long() for r in samples],
                                "prompts": [p.long() for p in captured["prompts"]]}
        print(name, "batches:", len(samples), "frames:", [r.codes.shape[1] for r in samples])
    inf.generate = real_generate
    with torch.inference_mode():
        codes = out["cases"]["clone_sampled"]["codes"][:, :AUDIO_FRAMES]    # a few frames keep the file small
        out["audio"] = codec.from_indices(codes[None].clone())[0, 0]
    torch.save(out, OUT)
    print("wrote", OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
