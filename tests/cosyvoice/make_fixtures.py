"""Golden fixtures for the CosyVoice 2 / 3 engine, made with the upstream repository (not a PyPI package).

Runs only where the repository and the reference venv exist (see README.md):

    "$REF_VENV"/bin/python tests/cosyvoice/make_fixtures.py "$UPSTREAM_DIR/cosyvoice" "$UPSTREAM_DIR/3dspeaker"

(arguments: a checkout of FunAudioLLM/CosyVoice with third_party/Matcha-TTS, and one of modelscope/3D-Speaker;
or $COSYVOICE_REPO and $SPEAKERLAB_REPO.)

For each version it builds upstream's own classes from the tiny YAML of tiny.py (HyperPyYAML, as
upstream loads its config), fills every parameter with tiny.seeded_state, runs them on fixed inputs and
seeds and writes under fixtures/: keys_v{2,3}.json (upstream state-dict names and shapes, from which the
default suite regenerates the same weights), outputs_v{2,3}.pt (inputs, LM tokens, flow mel, HiFT audio),
frontend.pt (tokenizer ids, log-mel features), the ONNX parity graphs and their onnxruntime outputs, and
real_v{2,3}.json (every tensor name and shape of the published-size models, built on meta).
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))   # a script, never imported by the tests

import tiny  # noqa: E402

FIX = tiny.FIXTURES


def setup_upstream(repo: Path) -> None:
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "third_party" / "Matcha-TTS"))
    sys.path.insert(0, str(HERE.parent / "qwen3_tts"))
    import torchaudio_shim  # the CUDA-linked torchaudio wheel imports on CPU torch (Python parts only)
    torchaudio_shim.install()
    import importlib.machinery
    for name in ("modelscope", "pyworld"):   # imported by upstream modules, never called here
        stub = types.ModuleType(name)
        stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules.setdefault(name, stub)


@contextlib.contextmanager
def float64_run():
    """Upstream's own code run in float64 (its modules `.double()`, its inputs `.double()`), with no float32
    left in it: every `.float()` gives float64 (the casts of results, `solve_euler`'s `sol[-1].float()` and
    `flow.inference`'s `feat.float()`, and the float32 constants made at run time, the timestep embeddings'
    `arange(half).float()` frequencies), so the reference is the float64 value itself and no machine's float32
    exp/sin rounding reaches it. `mask_to_bias`, which asserts a float32/16 dtype, accepts float64 too (its
    body unchanged). Tensors upstream stores in float32 (weights, the noise buffers) are upcast."""
    import cosyvoice.flow.decoder as decoder

    def mask_to_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        assert mask.dtype == torch.bool
        assert dtype in [torch.float32, torch.bfloat16, torch.float16, torch.float64]
        mask = mask.to(dtype)
        mask = (1.0 - mask) * -1.0e+10
        return mask

    cast, bias = torch.Tensor.float, decoder.mask_to_bias

    def keep_float64(self, *args, **kwargs):
        return self.double(*args, **kwargs)

    torch.Tensor.float, decoder.mask_to_bias = keep_float64, mask_to_bias
    try:
        yield
    finally:
        torch.Tensor.float, decoder.mask_to_bias = cast, bias


def to_float64(module: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of an upstream module; the ESPnet relative positional tables, made in float32 at
    construction (`extend_pe`'s explicit float32 aranges), are remade in float64 by the same code."""
    import inspect
    import textwrap

    from cosyvoice.transformer.embedding import EspnetRelPositionalEncoding

    module = copy.deepcopy(module).double()
    src = textwrap.dedent(inspect.getsource(EspnetRelPositionalEncoding.extend_pe))
    for old, new in (("dtype=torch.float32", "dtype=x.dtype"),
                     ("torch.zeros(x.size(1), self.d_model)", "torch.zeros(x.size(1), self.d_model, dtype=x.dtype)")):
        assert old in src, old
        src = src.replace(old, new)
    scope: dict = {}
    exec(src, vars(inspect.getmodule(EspnetRelPositionalEncoding)), scope)
    for m in module.modules():
        if isinstance(m, EspnetRelPositionalEncoding):
            length = (m.pe.size(1) + 1) // 2
            m.pe = None
            scope["extend_pe"](m, torch.zeros(1, length, dtype=torch.float64))
    return module


def build_upstream(version: int, qwen_dir: Path):
    from hyperpyyaml import load_hyperpyyaml
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import cosyvoice.llm.llm as llm_mod

    def qwen_init(self, pretrain_path):
        torch.nn.Module.__init__(self)
        self.model = Qwen2ForCausalLM(Qwen2Config.from_pretrained(pretrain_path))

    llm_mod.Qwen2Encoder.__init__ = qwen_init
    text = tiny.YAMLS[version]
    configs = load_hyperpyyaml(text, overrides={"qwen_pretrain_path": str(qwen_dir)})
    return configs["llm"].eval(), configs["flow"].eval(), configs["hift"].eval()


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def run_version(version: int, work: Path) -> None:
    folder = work / f"v{version}"
    tiny.write_folder(folder, version, keys={"llm": {}, "flow": {}, "hift": {}})
    llm, flow, hift = build_upstream(version, folder / "CosyVoice-BlankEN")
    keys = {"llm": shapes(llm), "flow": shapes(flow), "hift": shapes(hift)}
    (FIX / f"keys_v{version}.json").write_text(json.dumps(keys, sort_keys=True))
    for name, module in (("llm", llm), ("flow", flow), ("hift", hift)):
        module.load_state_dict(tiny.seeded_state(keys[name]), strict=True)

    out: dict[str, object] = {}
    # ---- LM: zero-shot (prompt text + prompt speech) and cross-lingual (no prompt), two seeds
    g = torch.Generator().manual_seed(version)
    eop = [151646] if version == 3 else []
    text = torch.tensor([[300, 301, 302, 303, 304, 305, 306, 307]], dtype=torch.int32)
    prompt_text = torch.tensor([[310, 311, 312] + eop], dtype=torch.int32)
    prompt_speech = torch.randint(0, 6561, (1, 6), generator=g, dtype=torch.int32)
    cases = {"zero_shot": (text, prompt_text, prompt_speech),
             "no_prompt": (torch.cat([torch.tensor([eop], dtype=torch.int32).view(1, -1), text], 1) if eop else text,
                           torch.zeros(1, 0, dtype=torch.int32), torch.zeros(1, 0, dtype=torch.int32))}
    for case, (t, pt, ps) in cases.items():
        for seed in (0, 7):
            torch.manual_seed(seed)
            tokens = list(llm.inference(text=t, text_len=torch.tensor([t.shape[1]], dtype=torch.int32),
                                        prompt_text=pt, prompt_text_len=torch.tensor([pt.shape[1]], dtype=torch.int32),
                                        prompt_speech_token=ps,
                                        prompt_speech_token_len=torch.tensor([ps.shape[1]], dtype=torch.int32),
                                        embedding=torch.zeros(0, 192)))
            out[f"lm.{case}.{seed}"] = torch.tensor(tokens, dtype=torch.int64)
        out[f"lm.{case}.text"], out[f"lm.{case}.prompt_text"], out[f"lm.{case}.prompt_speech"] = t, pt, ps

    # ---- flow (10 Euler steps, CFG), noise: upstream's seed-0 buffer
    token = torch.randint(0, 6561, (1, 15), generator=g, dtype=torch.int32)
    prompt_token = torch.randint(0, 6561, (1, 10), generator=g, dtype=torch.int32)
    prompt_feat = torch.randn(1, 20, 80, generator=g)
    embedding = torch.randn(1, 192, generator=g)
    mel, _ = flow.inference(token=token, token_len=torch.tensor([15], dtype=torch.int32), prompt_token=prompt_token,
                            prompt_token_len=torch.tensor([10], dtype=torch.int32), prompt_feat=prompt_feat,
                            prompt_feat_len=torch.tensor([20], dtype=torch.int32), embedding=embedding,
                            streaming=False, finalize=True)
    out.update({"flow.token": token, "flow.prompt_token": prompt_token, "flow.prompt_feat": prompt_feat,
                "flow.embedding": embedding, "flow.mel": mel})
    # the same weights, inputs and noise in float64 (the noise buffer is upstream's float32 draw, upcast)
    flow64 = to_float64(flow)
    with float64_run():
        mel64, _ = flow64.inference(token=token, token_len=torch.tensor([15], dtype=torch.int32),
                                    prompt_token=prompt_token, prompt_token_len=torch.tensor([10], dtype=torch.int32),
                                    prompt_feat=prompt_feat.double(), prompt_feat_len=torch.tensor([20], dtype=torch.int32),
                                    embedding=embedding.double(), streaming=False, finalize=True)
    assert mel64.dtype == torch.float64
    # the noise it started from (upstream's seed-0 float32 buffer): the float64 test starts from these values, as
    # float32 randn rounds differently on CPUs without AVX2
    frames = mel.shape[2] + prompt_feat.shape[1]
    out.update({"flow.mel.f64": mel64, "flow.noise": flow.decoder.rand_noise[:, :, :frames].clone()})

    # ---- HiFT: v2 draws from the global RNG, v3 from buffers (we put the request's draws there)
    hmel = torch.randn(1, 80, 12, generator=g) * 2 - 4
    seed = 5
    hift64 = to_float64(hift)
    if version == 3:
        hg = torch.Generator().manual_seed(seed)
        rand_ini = torch.rand((1, 9), generator=hg)
        rand_ini[:, 0] = 0
        sine = hift.m_source.l_sin_gen
        sine.rand_ini = rand_ini
        sine.sine_waves = torch.rand((1, 12 * 480, 9), generator=hg)
        speech, _ = hift.inference(speech_feat=hmel, finalize=True)
        sine64 = hift64.m_source.l_sin_gen   # the same float32 draws in its plain (never cast) attributes
        sine64.rand_ini, sine64.sine_waves = sine.rand_ini.clone(), sine.sine_waves.clone()
        with float64_run():
            speech64, _ = hift64.inference(speech_feat=hmel.double(), finalize=True)
    else:
        torch.manual_seed(seed)
        speech, _ = hift.inference(speech_feat=hmel)
        torch.manual_seed(seed)   # the same draws in upstream's order (its randn_like noise is then float64)
        with float64_run():
            speech64, _ = hift64.inference(speech_feat=hmel.double())
    assert speech64.dtype == torch.float64
    out.update({"hift.mel": hmel, "hift.seed": torch.tensor(seed), "hift.speech": speech, "hift.speech.f64": speech64})
    torch.save(out, FIX / f"outputs_v{version}.pt")
    print(f"v{version}:", {k: (list(v.shape) if isinstance(v, torch.Tensor) else v) for k, v in out.items()
                           if k.startswith("lm.") and k[-1].isdigit()})
    print(f"v{version}: lm tokens", [out[f"lm.zero_shot.{s}"].tolist()[:12] for s in (0, 7)])


def frontend(work: Path) -> None:
    """Tokenizer ids (upstream's tokenizer classes on the tiny BPE) and the three reference features."""
    import whisper
    import torchaudio.compliance.kaldi as kaldi
    from matcha.utils.audio import mel_spectrogram

    from cosyvoice.tokenizer.tokenizer import CosyVoice2Tokenizer, CosyVoice3Tokenizer

    folder = work / "tok"
    folder.mkdir()
    tiny.write_tokenizer(folder)
    out: dict[str, object] = {}
    for version, cls in ((2, CosyVoice2Tokenizer), (3, CosyVoice3Tokenizer)):
        tok = cls(str(folder))
        for i, text in enumerate(tiny.TOKENIZER_TEXTS):
            out[f"tok.v{version}.{i}"] = torch.tensor(tok.encode(text), dtype=torch.int64)
    g = torch.Generator().manual_seed(11)
    wav16 = (torch.randn(1, 20800, generator=g) * 0.1).clamp(-1, 1)
    wav24 = (torch.randn(1, 31200, generator=g) * 0.1).clamp(-1, 1)
    out["wav16"], out["wav24"] = wav16, wav24
    out["whisper_mel"] = whisper.log_mel_spectrogram(wav16, n_mels=128)
    out["fbank"] = kaldi.fbank(wav16, num_mel_bins=80, dither=0, sample_frequency=16000)
    for fmax in (8000, None):
        out[f"matcha_mel.{fmax}"] = mel_spectrogram(wav24, n_fft=1920, num_mels=80, sampling_rate=24000, hop_size=480,
                                                    win_size=1920, fmin=0, fmax=fmax, center=False)
    # float64 references: the same audio .double(); the stored float32 filterbanks (Whisper's mel_filters.npz,
    # librosa's float32 mel basis in Matcha) upcast, the Hann windows computed in float64. torchaudio's fbank
    # follows its input's dtype, except its mel banks, made in the default dtype: float64 here.
    import matcha.utils.audio as matcha_audio
    import whisper.audio as whisper_audio
    filters32 = whisper_audio.mel_filters
    whisper_audio.mel_filters = lambda device, n_mels: filters32(device, n_mels).double()
    hann = torch.hann_window
    torch.hann_window = lambda n, *a, **k: hann(n, *a, **{**k, "dtype": k.get("dtype") or torch.float64})
    try:
        out["whisper_mel.f64"] = whisper.log_mel_spectrogram(wav16.double(), n_mels=128)
    finally:
        whisper_audio.mel_filters, torch.hann_window = filters32, hann
    torch.set_default_dtype(torch.float64)
    try:
        out["fbank.f64"] = kaldi.fbank(wav16.double(), num_mel_bins=80, dither=0, sample_frequency=16000)
    finally:
        torch.set_default_dtype(torch.float32)
    device = str(wav24.device)
    for fmax in (8000, None):
        key = f"{fmax}_{device}"   # Matcha's cached basis and window, put there in float64
        matcha_audio.mel_basis[key] = matcha_audio.mel_basis[key].double()
        matcha_audio.hann_window[device] = torch.hann_window(1920, dtype=torch.float64)
        out[f"matcha_mel.{fmax}.f64"] = mel_spectrogram(wav24.double(), n_fft=1920, num_mels=80, sampling_rate=24000,
                                                        hop_size=480, win_size=1920, fmin=0, fmax=fmax, center=False)
    assert all(out[k].dtype == torch.float64 for k in out if k.endswith(".f64"))
    torch.save(out, FIX / "frontend.pt")


class _TokenizerGraph(torch.nn.Module):
    """s3tokenizer's torch S3Tokenizer as CosyVoice's ONNX file is called: (feats, feats_length) -> tokens."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        # The exporter cannot hold complex constants: keep RoPE as (cos, sin) pairs (torch.view_as_real).
        # (256 positions: enough for the fixture, keeps the file small)
        self.register_buffer("freqs", torch.view_as_real(inner.encoder.freqs_cis)[:256].contiguous())

    def forward(self, feats: torch.Tensor, feats_length: torch.Tensor) -> torch.Tensor:
        """AudioEncoderV2/V3.forward (minus its unused view_as_real lines), then FSQ encode."""
        from s3tokenizer.utils import make_non_pad_mask, mask_to_bias
        enc = self.inner.encoder
        x, x_len = feats, feats_length
        T = x.shape[-1]
        mask = make_non_pad_mask(x_len, T).unsqueeze(1)
        x = torch.nn.functional.gelu(enc.conv1(x * mask))
        x_len = (x_len + 2 - 1 * (3 - 1) - 1) // enc.stride + 1
        x_slen = (T + 2 - 1 * (3 - 1) - 1) // enc.stride + 1
        mask = make_non_pad_mask(x_len, x_slen).unsqueeze(1)
        x = torch.nn.functional.gelu(enc.conv2(x * mask))
        x_len = (x_len + 2 - 1 * (3 - 1) - 1) // 2 + 1
        x_slen = (x_slen + 2 - 1 * (3 - 1) - 1) // enc.stride + 1
        mask = make_non_pad_mask(x_len, x_slen).unsqueeze(1)
        x = x.permute(0, 2, 1)
        mask_pad = mask.transpose(1, 2)
        mask = mask_to_bias(mask, x.dtype)
        freqs = self.freqs[:x.size(1)]
        for block in enc.blocks:
            x = block(x, mask.unsqueeze(1), mask_pad, freqs)
        return self.inner.quantizer._codebook.encode(x)


def _rotary_real(xq: torch.Tensor, xk: torch.Tensor, real: torch.Tensor):
    """s3tokenizer's apply_rotary_emb, reading cos/sin from the real view instead of the complex tensor."""
    cos, sin = real[:, :, 0], real[:, :, 1]
    cos = cos.unsqueeze(0).unsqueeze(2).to(xq.dtype)
    sin = sin.unsqueeze(0).unsqueeze(2).to(xq.dtype)
    d = xq.shape[-1]
    xq_r = torch.cat((-xq[:, :, :, d // 2:], xq[:, :, :, :d // 2]), dim=-1)
    xk_r = torch.cat((-xk[:, :, :, d // 2:], xk[:, :, :, :d // 2]), dim=-1)
    return xq * cos + xq_r * sin, xk * cos + xk_r * sin


def _randomize(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            fan_in = max(1, p[0].numel()) if p.dim() > 1 else 16
            p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)
        for name, b in module.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def onnx_graphs(work: Path) -> None:
    """The speech tokenizers (s3tokenizer's torch reimplementation of upstream's v2/v3 ONNX graphs) and
    CAM++ (3D-Speaker's CAMPPlus, the model campplus.onnx was exported from), tiny and random, exported with
    torch's TorchScript-based ONNX exporter as the real files were; their onnxruntime outputs on fixed inputs."""
    import onnxruntime
    import s3tokenizer.model_v2 as m2
    from s3tokenizer.model_v2 import ModelConfig, S3TokenizerV2
    from s3tokenizer.model_v3 import ModelConfigV3, S3TokenizerV3

    sys.path.insert(0, str(upstream_path(2, "SPEAKERLAB_REPO", "a checkout of modelscope/3D-Speaker")))
    from speakerlab.models.campplus.DTDNN import CAMPPlus

    rotary = m2.apply_rotary_emb

    def real_rotary(xq, xk, freqs_cis):   # the same maths on the (cos, sin) pairs
        return rotary(xq, xk, torch.view_as_complex(freqs_cis) if not freqs_cis.is_complex() else freqs_cis) \
            if not torch.onnx.is_in_onnx_export() else _rotary_real(xq, xk, freqs_cis)

    m2.apply_rotary_emb = real_rotary
    out: dict[str, object] = {}
    g = torch.Generator().manual_seed(3)
    mel = torch.randn(1, 128, 203, generator=g)
    for version, cls, config in ((2, S3TokenizerV2, ModelConfig()), (3, S3TokenizerV3, ModelConfigV3())):
        config.n_audio_state, config.n_audio_head, config.n_audio_layer = 64, 1, 2   # RoPE is fixed at 64 per head
        model = _TokenizerGraph(cls(f"speech_tokenizer_v{version}_25hz", config)).eval()
        _randomize(model, 100 + version)
        path = FIX / f"speech_tokenizer_v{version}.onnx"
        length = torch.tensor([mel.shape[2]], dtype=torch.int32)
        with torch.no_grad():
            torch.onnx.export(model, (mel, length), str(path), input_names=["feats", "feats_length"],
                              output_names=["indices"], dynamic_axes={"feats": {2: "T"}, "indices": {1: "T4"}},
                              opset_version=17, dynamo=False)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        out[f"tokens.v{version}"] = torch.from_numpy(session.run(None, {"feats": mel.numpy(),
                                                                         "feats_length": length.numpy()})[0])
        with torch.no_grad():
            out[f"tokens_torch.v{version}"] = model(mel, length)
    camp = CAMPPlus(feat_dim=80, embedding_size=192, growth_rate=4, bn_size=2, init_channels=8).eval()
    _randomize(camp, 7)
    fbank = torch.randn(1, 157, 80, generator=g)
    path = FIX / "campplus.onnx"
    with torch.no_grad():
        torch.onnx.export(camp, (fbank,), str(path), input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {1: "T"}}, opset_version=17, dynamo=False)
        out["campplus_torch"] = camp(fbank)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out["campplus"] = torch.from_numpy(session.run(None, {"input": fbank.numpy()})[0])
    out["mel"], out["fbank"] = mel, fbank
    torch.save(out, FIX / "onnx_outputs.pt")
    print("tokens v2", out["tokens.v2"][0, :12].tolist(), torch.equal(out["tokens.v2"], out["tokens_torch.v2"].to(out["tokens.v2"].dtype)))
    print("tokens v3", out["tokens.v3"][0, :12].tolist(), torch.equal(out["tokens.v3"], out["tokens_torch.v3"].to(out["tokens.v3"].dtype)))
    print("campplus", (out["campplus"] - out["campplus_torch"]).abs().max().item())


# CosyVoice-BlankEN/config.json of the published models (Qwen2.5-0.5B's shape).
REAL_QWEN = {**tiny.QWEN_CONFIG, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768}


def real_structure(repo: Path, work: Path) -> None:
    """Every tensor name and shape of the published-size LM, flow and HiFT (upstream's classes built on meta
    from the repository's cosyvoice2/3.yaml) and the configs our reader takes from the same YAML."""
    from dataclasses import asdict

    from hyperpyyaml import load_hyperpyyaml
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import cosyvoice.llm.llm as llm_mod
    from mizuoto.nodes.cosyvoice.config import (feat_params, flow_config, hift_config, lm_fields, read_hyperpyyaml,
                                                version_of)

    def qwen_init(self, pretrain_path):
        torch.nn.Module.__init__(self)
        self.model = Qwen2ForCausalLM(Qwen2Config(**REAL_QWEN))

    llm_mod.Qwen2Encoder.__init__ = qwen_init
    for version in (2, 3):
        y = repo / "examples" / "libritts" / f"cosyvoice{version}" / "conf" / f"cosyvoice{version}.yaml"
        with torch.device("meta"):
            configs = load_hyperpyyaml(y.read_text(), overrides={"hifigan": None, "qwen_pretrain_path": str(work)})
        data = read_hyperpyyaml(y)
        assert version_of(y, data) == version
        feat_params(y, data)   # the flow prompt's mel settings read from the real YAML too
        out = {"qwen": REAL_QWEN, "lm": lm_fields(y, data), "flow": asdict(flow_config(y, data, version)),
               "hift": asdict(hift_config(y, data)),
               "tensors": {name: shapes(configs[name]) for name in ("llm", "flow", "hift")}}
        (HERE / f"real_v{version}.json").write_text(json.dumps(out, sort_keys=True))
        print(f"real v{version}:", {k: len(v) for k, v in out["tensors"].items()})


def upstream_path(index: int, env: str, what: str) -> Path:
    """Argument `index`, else $`env`: upstream code lives outside the repository, wherever you put it."""
    value = sys.argv[index] if len(sys.argv) > index else os.environ.get(env)
    if not value:
        raise SystemExit(f"make_fixtures.py needs {what}: pass it as argument {index} or set ${env} "
                         f"(tests/cosyvoice/README.md, 'Remaking the fixtures')")
    return Path(value)


def main() -> None:
    repo = upstream_path(1, "COSYVOICE_REPO", "a checkout of FunAudioLLM/CosyVoice")
    setup_upstream(repo)
    torch.set_num_threads(1)
    FIX.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for version in (2, 3):
            run_version(version, Path(tmp))
        frontend(Path(tmp))
        onnx_graphs(Path(tmp))
        real_structure(repo, Path(tmp))


if __name__ == "__main__":
    main()
