"""Golden fixtures for the IndexTTS 2 engine, made with the upstream repository (not a PyPI package).

Runs only where the repository and the reference venv exist (see README.md):

    "$REF_VENV"/bin/python tests/indextts2/make_fixtures.py "$UPSTREAM_DIR/indextts"   # or $INDEXTTS_REPO

It builds upstream's own classes from tiny.CONFIG (OmegaConf, as upstream reads config.yaml), fills every
parameter with tiny.seeded_state, runs them on seeded inputs and writes under fixtures/: keys.json
(parameter names and shapes per checkpoint, from which the default suite regenerates the same weights)
and outputs.pt (inputs and upstream's outputs). Computed buffers (position tables) are not seeded: they
keep the values upstream computes, as in the published files.

Every float output is recorded twice: "<key>" from the float32 run (compared at a stated bound: another
CPU sums in another order) and "<key>.f64" from the same modules `.double()` on the same inputs
`.double()` (compared at tests/golden.py's F64_BOUND). Sampled codes and tokens are recorded from the
float64 run too ("<key>.f64"): float64 logits, cast to float32 for sampling as upstream's generate casts
them. Upstream casts a few activations to float32 whatever the model's dtype (`float64_upstream` lists
them); for the float64 run those casts follow the input's dtype instead, the formulas unchanged (float32
inputs go through the very same operations), and the tables upstream computes in float32 (position
encodings, the DiT's RoPE and timestep frequencies) are computed in float64 (`float64_tables`): float32's
exp/sin/cos differ in the last bit between CPUs' kernels (MKL's exp under MKL_CBWR, for one), which a
float64 comparison would see. BigVGAN's filter taps are recorded and written into the suite's checkpoint
as they are (the published file holds them too); its weight norm is folded after `.double()` there.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402


def setup_upstream(repo: Path) -> None:
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # the CUDA-linked torchaudio wheel imports on CPU torch (Python parts only)
    torchaudio_shim.install()
    # indextts.utils.tokenizer pulls whisper/tiktoken for a language table only the campplus GPT uses
    stub = types.ModuleType("indextts.utils.tokenizer")
    stub.LANGUAGE_DICT = {}
    sys.modules["indextts.utils.tokenizer"] = stub
    # the DAC package (descript-audiotools) is imported for a VectorQuantize the published config turns off
    dac = types.ModuleType("indextts.s2mel.dac.nn.quantize")
    dac.VectorQuantize = None
    sys.modules["indextts.s2mel.dac.nn.quantize"] = dac


def f64(x: torch.Tensor) -> torch.Tensor:
    return x.double() if x.is_floating_point() else x


def upcast(x: torch.Tensor) -> torch.Tensor:
    """`x.float()` as upstream writes it, except that float64 stays float64."""
    return x if x.dtype == torch.float64 else x.float()


@contextlib.contextmanager
def float64_upstream():
    """Upstream's hard-coded float32 casts of activations follow a float64 input (the float64 recording only):
    gpt-fast's RMSNorm and rotary embedding and the DiT's timestep embedding (s2mel), transformers'
    Qwen3RMSNorm (the emotion model). Each replacement is the upstream body with `.float()` -> `upcast`."""
    from indextts.s2mel.modules import diffusion_transformer
    from indextts.s2mel.modules.gpt_fast import model as gf
    from transformers.models.qwen3 import modeling_qwen3 as q3

    def rms_forward(self, x):
        return self._norm(upcast(x)).type_as(x) * self.weight

    def apply_rotary_emb(x, freqs_cis):
        xshaped = upcast(x).reshape(*x.shape[:-1], -1, 2)
        freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
        x_out2 = torch.stack([xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
                              xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1]], -1)
        return x_out2.flatten(3).type_as(x)

    def timestep_embedding(self, t):
        args = self.scale * upcast(t[:, None]) * self.freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if self.frequency_embedding_size % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def qwen3_rms_forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = upcast(hidden_states)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def precompute_freqs_cis(seq_len, n_elem, base=10000, dtype=torch.bfloat16):
        real = torch.float64 if dtype == torch.float64 else torch.float32     # upstream: `.float()`
        freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: (n_elem // 2)].to(real) / n_elem))
        t = torch.arange(seq_len, device=freqs.device)
        freqs = torch.outer(t, freqs)
        freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
        cache = torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1)
        return cache.to(dtype=dtype)

    patches = [(gf.RMSNorm, "forward", rms_forward), (gf, "apply_rotary_emb", apply_rotary_emb),
               (gf, "precompute_freqs_cis", precompute_freqs_cis),
               (diffusion_transformer.TimestepEmbedder, "timestep_embedding", timestep_embedding),
               (q3.Qwen3RMSNorm, "forward", qwen3_rms_forward)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, new in patches:
        setattr(owner, name, new)
    try:
        yield
    finally:
        for owner, name, old in saved:
            setattr(owner, name, old)


def float64_tables(model: torch.nn.Module) -> None:
    """After `.double()`: the tables upstream computed in float32 at construction, computed again in float64
    by upstream's own code (its constructors under the float64 default dtype, precompute_freqs_cis at
    float64 under float64_upstream)."""
    from indextts.gpt.conformer.embedding import PositionalEncoding, RelPositionalEncoding
    from indextts.s2mel.modules import diffusion_transformer
    from indextts.s2mel.modules.gpt_fast import model as gf

    torch.set_default_dtype(torch.float64)
    try:
        for m in model.modules():
            if type(m) in (PositionalEncoding, RelPositionalEncoding):
                m.pe = type(m)(m.d_model, 0.0, m.max_len).pe
            elif isinstance(m, diffusion_transformer.TimestepEmbedder):
                half = m.frequency_embedding_size // 2    # its constructor's formula, at float64 (it asks for float32)
                m.freqs = torch.exp(-math.log(m.max_period) * torch.arange(start=0, end=half, dtype=torch.float64)
                                    / half)
            elif isinstance(m, gf.Transformer) and m.freqs_cis is not None:
                c = m.config
                m.freqs_cis = gf.precompute_freqs_cis(c.block_size, c.head_dim, c.rope_base, torch.float64)
                assert m.freqs_cis.dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def params(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.named_parameters()}


def fill(module: torch.nn.Module, shapes: dict[str, list[int]], state: dict | None = None) -> None:
    missing, unexpected = module.load_state_dict(tiny.seeded_state(shapes) if state is None else state, strict=False)
    buffers = {k for k, _ in module.named_buffers()}
    assert not unexpected and set(missing) <= buffers, (missing, unexpected)


def gpt_fixtures(out: dict, keys: dict) -> None:
    from omegaconf import OmegaConf
    from indextts.gpt.model_v2 import UnifiedVoice

    cfg = OmegaConf.create(tiny.CONFIG)
    gpt = UnifiedVoice(**cfg.gpt)
    keys["gpt"] = params(gpt)
    fill(gpt, keys["gpt"], tiny.gpt_state(keys["gpt"]))
    gpt.eval()
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    g = torch.Generator().manual_seed(1)
    spk = torch.randn(1, 37, 1024, generator=g)
    emo = torch.randn(1, 23, 1024, generator=g)
    text = torch.tensor([[5, 17, 42, 9, 63, 2, 88]], dtype=torch.int32)
    out.update({"gpt.spk": spk, "gpt.emo": emo, "gpt.text": text})
    with torch.no_grad():
        # lengths as upstream's infer_v2 passes them: the feature width (1024), not the frame count
        spk_len = torch.tensor([spk.shape[-1]])
        emo_len = torch.tensor([emo.shape[-1]])
        out["gpt.latents"] = gpt.get_conditioning(spk.transpose(1, 2), spk_len)
        out["gpt.emovec_spk"] = gpt.get_emovec(spk, spk_len)
        for alpha in (1.0, 0.6):
            out[f"gpt.merged.{alpha}"] = gpt.merge_emovec(spk, emo, spk_len, emo_len, alpha=alpha)
        emovec = out["gpt.merged.0.6"]
        for seed in (0, 3):
            torch.manual_seed(seed)
            codes, latent_cond = gpt.inference_speech(
                spk, text, emo, cond_lengths=spk_len, emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=True,
                top_p=0.8, top_k=30, temperature=0.8, num_return_sequences=1, length_penalty=0.0, num_beams=3,
                repetition_penalty=10.0, max_generate_length=60)
            out[f"gpt.codes.{seed}"] = codes
        codes = out["gpt.codes.0"]
        stop = tiny.CONFIG["gpt"]["stop_mel_token"]
        n = int((codes[0] == stop).nonzero()[0, 0]) if (codes[0] == stop).any() else codes.shape[1]
        codes = codes[:, :n]
        out["gpt.latent"] = gpt(latent_cond, text, torch.tensor([text.shape[-1]]), codes.clone(),
                                torch.tensor([codes.shape[-1]]), emo, cond_mel_lengths=spk_len,
                                emo_cond_mel_lengths=emo_len, emo_vec=emovec,
                                use_speed=torch.zeros(1).long())

        # float64: the same calls on the same inputs (the latent for the float32 run's codes)
        gpt.double()
        float64_tables(gpt)
        spk, emo = f64(spk), f64(emo)
        out["gpt.latents.f64"] = gpt.get_conditioning(spk.transpose(1, 2), spk_len)
        out["gpt.emovec_spk.f64"] = gpt.get_emovec(spk, spk_len)
        for alpha in (1.0, 0.6):
            out[f"gpt.merged.{alpha}.f64"] = gpt.merge_emovec(spk, emo, spk_len, emo_len, alpha=alpha)
        emovec = out["gpt.merged.0.6.f64"]
        for seed in (0, 3):
            torch.manual_seed(seed)
            codes64, latent_cond = gpt.inference_speech(
                spk, text, emo, cond_lengths=spk_len, emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=True,
                top_p=0.8, top_k=30, temperature=0.8, num_return_sequences=1, length_penalty=0.0, num_beams=3,
                repetition_penalty=10.0, max_generate_length=60)
            out[f"gpt.codes.{seed}.f64"] = codes64
        out["gpt.latent.f64"] = gpt(latent_cond, text, torch.tensor([text.shape[-1]]), codes.clone(),
                                    torch.tensor([codes.shape[-1]]), emo, cond_mel_lengths=spk_len,
                                    emo_cond_mel_lengths=emo_len, emo_vec=emovec,
                                    use_speed=torch.zeros(1).long())


def s2mel_fixtures(out: dict, keys: dict) -> None:
    from omegaconf import OmegaConf
    from indextts.s2mel.modules.commons import MyModel

    cfg = OmegaConf.create(tiny.CONFIG)
    s2mel = MyModel(cfg.s2mel, use_gpt_latent=True)
    for name in ("cfm", "length_regulator", "gpt_layer"):
        keys[f"s2mel.{name}"] = params(s2mel.models[name])
        fill(s2mel.models[name], keys[f"s2mel.{name}"])
    s2mel.eval()
    s2mel.models["cfm"].estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    g = torch.Generator().manual_seed(2)
    s_ref = torch.randn(1, 9, 1024, generator=g)
    s_infer = torch.randn(1, 13, 1024, generator=g)
    latent = torch.randn(1, 13, 1280, generator=g)
    ref_mel = torch.randn(1, 80, 15, generator=g)
    style = torch.randn(1, 192, generator=g)
    out.update({"s2mel.s_ref": s_ref, "s2mel.s_infer": s_infer, "s2mel.latent": latent, "s2mel.ref_mel": ref_mel,
                "s2mel.style": style})
    with torch.no_grad():
        lr = s2mel.models["length_regulator"]
        prompt = lr(s_ref, ylens=torch.LongTensor([ref_mel.size(2)]), n_quantizers=3, f0=None)[0]
        s = s_infer + s2mel.models["gpt_layer"](latent)
        code_lens = torch.LongTensor([s_infer.size(1)])
        cond = lr(s, ylens=(code_lens * 1.72).long(), n_quantizers=3, f0=None)[0]
        cat = torch.cat([prompt, cond], dim=1)
        out["s2mel.prompt_cond"], out["s2mel.cond"] = prompt, cond
        for steps in (25, 4):
            # the noise CFM.inference draws first (the suite reads it: randn differs in the last bit between CPUs)
            torch.manual_seed(steps)
            out[f"s2mel.noise.{steps}"] = torch.randn([1, s2mel.models["cfm"].in_channels, cat.size(1)])
            torch.manual_seed(steps)
            mel = s2mel.models["cfm"].inference(cat, torch.LongTensor([cat.size(1)]), ref_mel, style, None, steps,
                                                inference_cfg_rate=0.7)
            out[f"s2mel.mel.{steps}"] = mel[:, :, ref_mel.size(-1):]

    # float64. CFM.inference draws its noise and time grid in the default dtype (float32) and hands them to
    # solve_euler: here the same noise in float64 and the grid made in float64.
    s2mel.double()
    with float64_upstream():
        float64_tables(s2mel)
    s_ref, s_infer, latent, ref_mel, style = map(f64, (s_ref, s_infer, latent, ref_mel, style))
    with torch.no_grad(), float64_upstream():
        prompt = lr(s_ref, ylens=torch.LongTensor([ref_mel.size(2)]), n_quantizers=3, f0=None)[0]
        s = s_infer + s2mel.models["gpt_layer"](latent)
        cond = lr(s, ylens=(code_lens * 1.72).long(), n_quantizers=3, f0=None)[0]
        cat = torch.cat([prompt, cond], dim=1)
        out["s2mel.prompt_cond.f64"], out["s2mel.cond.f64"] = prompt, cond
        for steps in (25, 4):
            z = f64(out[f"s2mel.noise.{steps}"] * 1.0)       # inference's `randn(...) * temperature`
            t_span = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
            mel = s2mel.models["cfm"].solve_euler(z, torch.LongTensor([cat.size(1)]), ref_mel, cat, style, None,
                                                  t_span, inference_cfg_rate=0.7)
            out[f"s2mel.mel.{steps}.f64"] = mel[:, :, ref_mel.size(-1):]


def bigvgan_fixtures(out: dict, keys: dict) -> None:
    # bigvgan.utils imports matplotlib/scipy for plotting and saving; only these two helpers are used here
    utils = types.ModuleType("indextts.s2mel.modules.bigvgan.utils")
    utils.init_weights = lambda m, mean=0.0, std=0.01: None
    utils.get_padding = lambda kernel_size, dilation=1: int((kernel_size * dilation - dilation) / 2)
    sys.modules["indextts.s2mel.modules.bigvgan.utils"] = utils
    from indextts.s2mel.modules.bigvgan import bigvgan
    from indextts.s2mel.modules.bigvgan.env import AttrDict

    from indextts.s2mel.modules.bigvgan.alias_free_activation.torch.filter import kaiser_sinc_filter1d

    def build(dtype: torch.dtype):
        model = bigvgan.BigVGAN(AttrDict(dict(tiny.BIGVGAN)), use_cuda_kernel=False)
        keys["bigvgan"] = params(model)
        keys["bigvgan.buffers"] = sorted(k for k, _ in model.named_buffers())
        fill(model, keys["bigvgan"])
        model.to(dtype).remove_weight_norm()     # in float64 the weight norm is folded in float64
        return model.eval()

    model = build(torch.float32)
    # every filter buffer is the same 2x resampling filter (kernel 12), as computed by upstream here: the
    # suite writes these very taps into the checkpoint and checks its own filter against them
    filters = {k: v for k, v in model.named_buffers() if k.endswith(".filter")}
    assert sorted(filters) == keys["bigvgan.buffers"]
    out["bigvgan.filter"] = kaiser_sinc_filter1d(0.25, 0.3, 12)
    assert all(torch.equal(v, out["bigvgan.filter"]) for v in filters.values())
    torch.set_default_dtype(torch.float64)    # upstream's formula evaluated in float64 (it uses the default)
    try:
        out["bigvgan.filter.f64"] = kaiser_sinc_filter1d(0.25, 0.3, 12)
    finally:
        torch.set_default_dtype(torch.float32)
    mel = torch.randn(1, 80, 12, generator=torch.Generator().manual_seed(4))
    out["bigvgan.mel"] = mel
    with torch.no_grad():
        out["bigvgan.wav"] = model(mel)
        out["bigvgan.wav.f64"] = build(torch.float64)(f64(mel))    # with the float32 taps, as the file holds them


def codec_fixtures(out: dict, keys: dict) -> None:
    from omegaconf import OmegaConf
    from indextts.codec.maskgct_codec import build_semantic_codec

    codec = build_semantic_codec(OmegaConf.create(tiny.CONFIG).semantic_codec)
    keys["codec"] = params(codec)
    fill(codec, keys["codec"])
    feats = torch.randn(1, 21, 1024, generator=torch.Generator().manual_seed(5))
    codes = torch.randint(0, 8192, (1, 17), generator=torch.Generator().manual_seed(6))
    out["codec.feats"], out["codec.codes_in"] = feats, codes
    with torch.no_grad():
        out["codec.codes"], out["codec.quantized"] = codec.quantize(feats)
        out["codec.emb"] = codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)
        codec.double()
        out["codec.codes.f64"], out["codec.quantized.f64"] = codec.quantize(f64(feats))
        out["codec.emb.f64"] = codec.quantizer.vq2emb(codes.unsqueeze(1)).transpose(1, 2)


def campplus_fixtures(out: dict, keys: dict) -> None:
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus

    model = CAMPPlus(**tiny.CAMPPLUS)
    keys["campplus"] = {k: list(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(tiny.seeded_state(keys["campplus"]))
    model.eval()
    feat = torch.randn(1, 230, 80, generator=torch.Generator().manual_seed(7))
    feat = feat - feat.mean(dim=1, keepdim=True)
    out["campplus.feat"] = feat
    with torch.no_grad():
        out["campplus.style"] = model(feat)
        out["campplus.style.f64"] = model.double()(f64(feat))


def w2v_bert_fixtures(out: dict, keys: dict) -> None:
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    config = Wav2Vec2BertConfig(**{k: v for k, v in tiny.W2V_BERT.items() if k not in ("model_type", "torch_dtype")})
    model = Wav2Vec2BertModel(config)
    keys["w2v_bert"] = params(model)
    fill(model, keys["w2v_bert"])
    model.eval()
    extract = SeamlessM4TFeatureExtractor()
    for name, n in (("odd", 12320), ("even", 12480)):
        wav = 0.3 * torch.randn(1, n, generator=torch.Generator().manual_seed(n))
        inputs = extract(wav, sampling_rate=16000, return_tensors="pt")
        out[f"w2v.wav.{name}"] = wav
        out[f"w2v.features.{name}"] = inputs["input_features"]
        out[f"w2v.mask.{name}"] = inputs["attention_mask"]
        out[f"w2v.features.{name}.f64"] = seamless_features_f64(extract, wav)
        with torch.no_grad():
            # IndexTTS2.get_emb: hidden state 17 of the model, before the stats normalisation
            out[f"w2v.hidden17.{name}"] = model(input_features=inputs["input_features"],
                                                attention_mask=inputs["attention_mask"],
                                                output_hidden_states=True).hidden_states[17]
    model.double()
    for name in ("odd", "even"):
        with torch.no_grad():    # the float32 features, in float64: the model alone
            out[f"w2v.hidden17.{name}.f64"] = model(input_features=f64(out[f"w2v.features.{name}"]),
                                                    attention_mask=out[f"w2v.mask.{name}"],
                                                    output_hidden_states=True).hidden_states[17]


def seamless_features_f64(extract, wav: torch.Tensor) -> torch.Tensor:
    """SeamlessM4TFeatureExtractor's input_features in float64. Its __call__ casts the audio and its padding
    casts the features to float32; here its own `spectrogram` call (as `_extract_fbank_features` makes it)
    returns float64, then __call__'s per-bin normalisation, zero-frame padding to the stride and stacking.
    The spectrum stays complex64 inside `spectrogram`, as upstream keeps it whatever the dtype."""
    import numpy as np
    from transformers.audio_utils import spectrogram

    x = np.squeeze(wav.numpy().astype(np.float32)) * (2 ** 15)
    feats = spectrogram(x, extract.window, frame_length=400, hop_length=160, fft_length=512, power=2.0,
                        center=False, preemphasis=0.97, mel_filters=extract.mel_filters, log_mel="log",
                        mel_floor=1.192092955078125e-07, remove_dc_offset=True, dtype=np.float64).T
    feats = (feats - np.expand_dims(feats.mean(0), 0)) / np.sqrt(np.expand_dims(feats.var(0, ddof=1), 0) + 1e-7)
    if feats.shape[0] % extract.stride:
        feats = np.concatenate([feats, np.zeros((1, feats.shape[1]))], axis=0)
    assert feats.dtype == np.float64
    return torch.from_numpy(feats.reshape(1, feats.shape[0] // 2, feats.shape[1] * 2).copy())


def qwen_emotion_fixtures(out: dict, keys: dict) -> None:
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    cfg = {k: v for k, v in tiny.QWEN_EMO.items() if k not in ("architectures", "model_type", "torch_dtype")}
    model = Qwen3ForCausalLM(Qwen3Config(**cfg))
    keys["qwen_emo"] = {k: list(v.shape) for k, v in model.state_dict().items() if k != "lm_head.weight"}
    model.load_state_dict(tiny.seeded_state(keys["qwen_emo"]), strict=False)   # lm_head is the tied embedding
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.eval()
    assert model.config._attn_implementation == "sdpa"    # no float32 softmax (eager's) in the float64 run
    prompt = torch.randint(0, 290, (1, 23), generator=torch.Generator().manual_seed(8))
    out["qwen.prompt"] = prompt
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            ids = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                 generation_config=GenerationConfig(**tiny.QWEN_GENERATION, max_new_tokens=16,
                                                                    pad_token_id=299))
        out[f"qwen.tokens.{seed}"] = ids[0, prompt.shape[1]:]
    model.double()
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad(), float64_upstream():
            ids = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                 generation_config=GenerationConfig(**tiny.QWEN_GENERATION, max_new_tokens=16,
                                                                    pad_token_id=299))
        out[f"qwen.tokens.{seed}.f64"] = ids[0, prompt.shape[1]:]


REAL_W2V_BERT = {"hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096, "num_hidden_layers": 24,
                 "feature_projection_input_dim": 160, "conv_depthwise_kernel_size": 31,
                 "position_embeddings_type": "relative_key", "left_max_position_embeddings": 64,
                 "right_max_position_embeddings": 8, "add_adapter": True, "output_hidden_size": 1024,
                 "adapter_kernel_size": 3, "adapter_stride": 2, "num_adapter_layers": 1}


def real_structure(repo: Path) -> dict:
    """Every parameter name and shape of upstream's modules built on meta from the published config.yaml
    (checkpoints/config.yaml of the repository's history), weight-norm pairs folded to one weight."""
    import yaml
    from omegaconf import OmegaConf
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.s2mel.modules.commons import MyModel
    from indextts.codec.maskgct_codec import build_semantic_codec
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertModel

    path = repo / "checkpoints" / "config.yaml"
    cfg = OmegaConf.create(yaml.safe_load(path.read_text()))

    def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
        out = {}
        for k, v in module.named_parameters():
            if k.endswith("weight_g"):
                continue
            out[k[:-len("_v")] if k.endswith("weight_v") else k] = list(v.shape)
        return out

    with torch.device("meta"):
        gpt = UnifiedVoice(**cfg.gpt)
        s2mel = MyModel(cfg.s2mel, use_gpt_latent=True)
        codec = build_semantic_codec(cfg.semantic_codec)
        campplus = CAMPPlus(feat_dim=80, embedding_size=192)
        w2v = Wav2Vec2BertModel(Wav2Vec2BertConfig(**REAL_W2V_BERT))
    return {"config": yaml.safe_load(path.read_text()), "w2v_bert": REAL_W2V_BERT,
            "gpt": shapes(gpt), "s2mel": {n: shapes(s2mel.models[n]) for n in ("cfm", "length_regulator", "gpt_layer")},
            "codec": shapes(codec), "campplus": {k: list(v.shape) for k, v in campplus.state_dict().items()},
            "w2v_bert_params": shapes(w2v)}


def main(repo: Path) -> None:
    setup_upstream(repo)
    torch.set_num_threads(1)
    out: dict[str, torch.Tensor] = {}
    keys: dict[str, dict[str, list[int]]] = {}
    gpt_fixtures(out, keys)
    s2mel_fixtures(out, keys)
    bigvgan_fixtures(out, keys)
    codec_fixtures(out, keys)
    campplus_fixtures(out, keys)
    w2v_bert_fixtures(out, keys)
    qwen_emotion_fixtures(out, keys)
    tiny.FIXTURES.mkdir(exist_ok=True)
    (HERE / "real_indextts2.json").write_text(json.dumps(real_structure(repo), indent=0, sort_keys=True))
    (tiny.FIXTURES / "keys.json").write_text(json.dumps(keys, indent=0, sort_keys=True))
    torch.save(out, tiny.FIXTURES / "outputs.pt")
    for k, v in out.items():
        print(k, tuple(v.shape), v.flatten()[:8].tolist() if not v.is_floating_point() else "")


if __name__ == "__main__":
    source = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("INDEXTTS_REPO")
    if not source:
        sys.exit("make_fixtures.py needs index-tts's source (ee40fa7, with checkpoints/config.yaml): pass its "
                 "folder as the argument or set $INDEXTTS_REPO (tests/indextts2/README.md)")
    main(Path(source))
