"""Record golden fixtures from the upstream GPT-SoVITS repository, and check ours against it live.

Runs only where the repository is unpacked (named by $GPT_SOVITS_REPO) in the reference venv
(tests/gpt_sovits/README.md):

    "$REF_VENV"/bin/python tests/gpt_sovits/make_fixtures.py

Upstream's classes are built from tiny configs (tiny.py), given the weights `tiny.random_state` draws for
their own parameter names, and run on seeded inputs exactly as TTS_infer_pack/TTS.py does. The script
asserts that our modules, given the same tensors through our loader (the files tiny.py writes in
upstream's format), give `torch.equal` outputs, then writes fixtures/outputs.pt (inputs + outputs, no
weights) for the default suite.

Every float output is recorded a second time from upstream's modules `.double()` on the inputs `.double()`
(tests/golden.py: the comparison that travels between machines), beside the float32 one as
`<name>.f64-f32`, the float32 difference `f64 - f32` (tiny.f64_reference adds it back: the float32 output
plus its correction carry the float64 value to < 1e-12 of its scale, at half the size of float64). In the
float64 run, what upstream computes in float32 whatever the model's dtype is computed in float64: the
Kaldi mel banks and the Hann window (torch's default dtype float64 around the call), SinePositionalEmbedding's
table and MelStyleEncoder's pooling cast (replaced methods below). Transcendental float32 kernels differ
between CPUs (measured here: the sinusoid table and the mel banks under MKL_CBWR=COMPATIBLE, the povey window
under ATEN_CPU_CAPABILITY=default), which a 1e-9 float64 bound would see; our engine does the same for a
float64 model. The T2S is compared on its logits, teacher-forced along the recorded tokens
(`tiny.t2s_forced_logits`; upstream's own loop with its draw replaced by the recorded token): float64 draws
are other numbers than float32 ones. The SoVITS float64 run takes the float32 run's prior noise (recorded).
"""
from __future__ import annotations

import contextlib
import copy
import os
import math
import pickletools
import shutil
import sys
import types
import zipfile
from pathlib import Path

import torch
from torch import nn

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402,F401  (upstream on sys.path, import stubs; exits without the repository)

from transformers import BertConfig as HFBertConfig, BertForMaskedLM, HubertConfig as HFHubertConfig, HubertModel  # noqa: E402
from AR.models.t2s_model import Text2SemanticDecoder  # noqa: E402
from module.models import SynthesizerTrn as UpSynth  # noqa: E402
from module.mel_processing import spectrogram_torch  # noqa: E402
import utils as up_utils  # noqa: E402
import process_ckpt  # noqa: E402
from ERes2NetV2 import ERes2NetV2 as UpERes2NetV2  # noqa: E402
import kaldi as up_kaldi  # noqa: E402
import AR.models.utils as up_ar_utils  # noqa: E402
from AR.modules.embedding import SinePositionalEmbedding  # noqa: E402
from module.modules import MelStyleEncoder as UpMelStyleEncoder  # noqa: E402

from gpt_sovits import tiny  # noqa: E402
import golden  # noqa: E402  (tests/golden.py)
from mizuoto.nodes.gpt_sovits import loader as our_loader  # noqa: E402
from mizuoto.nodes.gpt_sovits.sovits import linear_spectrogram  # noqa: E402
from mizuoto.nodes.gpt_sovits.speaker import fbank  # noqa: E402
from mizuoto.nodes.gpt_sovits.t2s import T2SSampling, generate  # noqa: E402
from mizuoto.runtime.lm.cache import DynamicCache  # noqa: E402

SAMPLING = [T2SSampling(top_k=5, top_p=1.0, temperature=1.0, repetition_penalty=1.35),
            T2SSampling(top_k=15, top_p=0.8, temperature=0.7, repetition_penalty=1.0)]
out: dict[str, torch.Tensor] = {}


def load_into(model: nn.Module, weights: dict[str, torch.Tensor], allow_missing: str = "") -> None:
    """Our random tensors into upstream's module, as TTS.py loads a checkpoint (fp16 files upcast)."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not (allow_missing and k.startswith(allow_missing))]
    assert not missing and not unexpected, (missing[:5], unexpected[:5])


LOGIT_ROWS = tiny.T2S_LOGIT_ROWS


def record_f64(name: str, ref64: torch.Tensor, ours64: torch.Tensor) -> None:
    """upstream's float64 output for out[name] (recorded as its float32 correction), after checking ours."""
    assert ref64.dtype == torch.float64 and ours64.dtype == torch.float64, (ref64.dtype, ours64.dtype)
    err = golden.relative_error(ours64, ref64)
    print(f"  f64 {name}: ours vs upstream {err:.3g}; fp32 vs f64 {golden.relative_error(out[name], ref64):.3g}")
    assert err <= golden.F64_BOUND * 1e-2, f"{name}: float64 ours vs upstream {err:.3g}"
    out[name + ".f64-f32"] = (ref64 - out[name].double()).float()
    back = tiny.f64_reference(out, name)
    assert golden.relative_error(back, ref64) < 1e-12, "the float32 correction does not carry the float64 value"


@contextlib.contextmanager
def float64_constants():
    """Upstream's float64 run: constants made in the default dtype (Kaldi mel banks, Hann windows) in float64."""
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(torch.float32)


def extend_pe_f64(self, x):
    """SinePositionalEmbedding.extend_pe (AR/modules/embedding.py) with its float32 aranges in x's dtype."""
    if self.pe is not None and self.pe.size(1) >= x.size(1):
        self.pe = self.pe.to(dtype=x.dtype, device=x.device)
        return
    pe = torch.zeros(x.size(1), self.embedding_dim, dtype=x.dtype)
    assert not self.reverse
    position = torch.arange(0, x.size(1), dtype=x.dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, self.embedding_dim, 2, dtype=x.dtype) * -(math.log(10000.0) / self.embedding_dim))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    self.pe = pe.unsqueeze(0).to(device=x.device, dtype=x.dtype).detach()


def temporal_avg_pool_f64(self, x, mask=None):
    """MelStyleEncoder.temporal_avg_pool (module/modules.py) without its float32 cast (float64 run)."""
    len_ = (~mask).sum(dim=1).unsqueeze(1)
    x = x.masked_fill(mask.unsqueeze(-1), 0)
    return torch.div(x, len_.unsqueeze(1)).sum(dim=1)


def to_f64(module: nn.Module, copy_first: bool = True) -> nn.Module:
    """A float64 copy of an upstream module, with the float32 constants above made in float64."""
    module = (copy.deepcopy(module) if copy_first else module).double()
    for m in module.modules():
        if isinstance(m, SinePositionalEmbedding):
            length = m.pe.size(1)       # upstream's constructor makes 4000 rows
            m.pe = None
            m.extend_pe = types.MethodType(extend_pe_f64, m)
            m.extend_pe(torch.zeros(1, length, dtype=torch.float64))
        if isinstance(m, UpMelStyleEncoder):
            m.temporal_avg_pool = types.MethodType(temporal_avg_pool_f64, m)
    return module


def same_names(upstream: dict, ours: dict, what: str) -> None:
    a = {k: tuple(v.shape) for k, v in upstream.items()}
    b = {k: tuple(v[0]) if isinstance(v, tuple) else tuple(v.shape) for k, v in ours.items()}
    assert a == b, f"{what}: upstream {sorted(set(a) - set(b))[:6]} / ours {sorted(set(b) - set(a))[:6]} / shapes " \
                   f"{[k for k in a if k in b and a[k] != b[k]][:6]}"


root = Path(os.environ.get("TMPDIR", "/tmp")) / "gpt_sovits_fixtures"
shutil.rmtree(root, ignore_errors=True)      # tiny.write_shared keeps a folder it finds: never last run's weights
folders = {v: tiny.write_folder(root, v) for v in ("v2", "v2Pro")}
ours = {v: our_loader.load_gpt_sovits(f, torch.float32) for v, f in folders.items()}
ours64 = {v: our_loader.load_gpt_sovits(f, torch.float64) for v, f in folders.items()}

# ---- the SoVITS file format -------------------------------------------------------------------------------
# upstream's own savee (process_ckpt.py) with upstream's utils.HParams; our loader reads it, and tiny.py's
# writer produces the same pickle globals.
for version in ("v2", "v2Pro"):
    hps = up_utils.HParams(**tiny.s2_config(version))
    hps.save_weight_dir = str(root)
    weights = tiny.sovits_weights(version)
    msg = process_ckpt.savee(weights, f"upstream_{version}", 8, 200, hps,
                             model_version=None if version == "v2" else version)
    assert msg == "Success.", msg
    path = root / f"upstream_{version}.pth"
    head = path.read_bytes()[:2]
    assert head == (b"PK" if version == "v2" else b"05"), head
    assert our_loader.sovits_version(path) == version
    model = our_loader.load_sovits(path, torch.float32)
    ref = dict(ours[version].sovits.state_dict())
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items()), "upstream-written file loads differently"

    def globals_of(p: Path) -> list[str]:
        data = bytearray(p.read_bytes())
        data[:2] = b"PK"
        import io
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
            pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
        return sorted({str(arg) for op, arg, _ in pickletools.genops(pkl) if op.name == "GLOBAL"})
    assert globals_of(path) == globals_of(folders[version] / "s2Gtiny_e8_s200.pth"), "pickle globals differ"
print("s2G format: upstream savee files load; same pickle globals as tiny.py's")

# ---- T2S ------------------------------------------------------------------------------------------------------
up_t2s = Text2SemanticDecoder(config=tiny.T2S_CONFIG).eval()
t2s_w = {k[len("model."):]: v.half().float() for k, v in tiny.t2s_weights().items()}
same_names({k: v for k, v in up_t2s.state_dict().items()}, t2s_w, "T2S")
load_into(up_t2s, t2s_w)
inp = tiny.fixture_inputs()
phones, bert, prompt = inp["t2s.phones"], inp["t2s.bert"], inp["t2s.prompt"]
L = phones.numel()
captured: list[torch.Tensor] = []
up_t2s64 = to_f64(up_t2s)      # before the hook: a deep copy would copy it
up_t2s.ar_predict_layer.register_forward_hook(lambda m, a, o: captured.append(o.detach().clone()))
up_t2s64.ar_predict_layer.register_forward_hook(lambda m, a, o: captured.append(o.detach().clone()))
upstream_draw = up_ar_utils.multinomial_sample_one_no_sync


def forced_draw(tokens: list[int]):
    """upstream's draw replaced by the recorded tokens in order, then EOS (the end either way: a sampled EOS,
    or past the length limit, where upstream drops the last token)."""
    it = iter(tokens)
    return lambda probs: torch.tensor([[next(it, up_t2s.EOS)]], dtype=torch.int)


for i, s in enumerate(SAMPLING):
    for seed in (0, 3):
        kw = dict(top_k=s.top_k, top_p=s.top_p, temperature=s.temperature, repetition_penalty=s.repetition_penalty)
        with torch.no_grad():
            torch.manual_seed(seed)
            y_list, idx_list = up_t2s.infer_panel_batch_infer([phones], torch.tensor([L]), prompt, [bert],
                                                              early_stop_num=50 * 1, max_len=L, **kw)
            batch = y_list[0][-idx_list[0]:]
            torch.manual_seed(seed)
            y, idx = next(up_t2s.infer_panel_naive(phones[None], torch.tensor([L]), prompt, bert[None],
                                                   early_stop_num=50 * 1, **kw))
            naive = y[0, -idx:]
            captured.clear()
            torch.manual_seed(seed)
            y_list, idx_list = up_t2s.infer_panel_batch_infer([phones], torch.tensor([L]), prompt, [bert],
                                                              early_stop_num=50 * 1, max_len=L, **kw)
            assert torch.equal(y_list[0][-idx_list[0]:], batch)
            up_logits = torch.cat(captured)[:batch.numel()]
            mine = generate(ours["v2"].t2s, phones[None], bert[None], prompt, s, torch.Generator().manual_seed(seed),
                            DynamicCache())
        print(f"T2S sampling {i} seed {seed}: batch {batch.tolist()}\n  naive {naive.tolist()}\n  ours  {mine.tolist()}")
        assert torch.equal(mine, batch.long()), "T2S tokens differ from infer_panel_batch_infer"
        out[f"t2s.tokens.{i}.{seed}"] = batch.long()
        # the logits along these tokens: upstream's (captured) = ours teacher-forced, then both in float64
        with torch.no_grad():
            assert torch.equal(tiny.t2s_forced_logits(ours["v2"].t2s, phones, bert, prompt, batch.long()), up_logits)
            captured.clear()
            up_ar_utils.multinomial_sample_one_no_sync = forced_draw(batch.tolist())
            try:
                with float64_constants():
                    y_list, idx_list = up_t2s64.infer_panel_batch_infer([phones], torch.tensor([L]), prompt,
                                                                        [bert.double()], early_stop_num=50 * 1,
                                                                        max_len=L, **kw)
            finally:
                up_ar_utils.multinomial_sample_one_no_sync = upstream_draw
            assert torch.equal(y_list[0][-idx_list[0]:].long(), batch.long()), "the forced float64 run stopped early"
            up64 = torch.cat(captured)[:batch.numel()]
            mine64 = tiny.t2s_forced_logits(ours64["v2"].t2s, phones, bert.double(), prompt, batch.long())
        name = f"t2s.logits.{i}.{seed}"
        out[name] = up_logits[LOGIT_ROWS]
        record_f64(name, up64[LOGIT_ROWS], mine64[LOGIT_ROWS])
        print(f"  f64 all {batch.numel()} rows: {golden.relative_error(mine64, up64):.3g}")

# EOS rules (masked for 11 steps, argmax of the penalised scores or a sampled EOS stops, EOS dropped): the
# same weights with the EOS row of the output layer pointed along the last layer's norm bias.
with torch.no_grad():
    tiny.eos_likely(up_t2s.ar_predict_layer.weight, up_t2s.h.layers[-1].norm2.bias)
    tiny.eos_likely(ours["v2"].t2s.ar_predict_layer.weight, ours["v2"].t2s.h.layers[-1].norm2.bias)
for seed in (0, 3, 4):
    with torch.no_grad():
        torch.manual_seed(seed)
        y_list, idx_list = up_t2s.infer_panel_batch_infer([phones], torch.tensor([L]), prompt, [bert],
                                                          early_stop_num=50 * 1, max_len=L, top_k=15,
                                                          repetition_penalty=1.35)
        batch = y_list[0][-idx_list[0]:]
        mine = generate(ours["v2"].t2s, phones[None], bert[None], prompt, T2SSampling(top_k=15),
                        torch.Generator().manual_seed(seed), DynamicCache())
    print(f"T2S with EOS seed {seed}: {batch.tolist()}")
    assert 11 <= batch.numel() < 50, "EOS did not end this sequence"
    assert torch.equal(mine, batch.long()), "T2S tokens differ at EOS"
    out[f"t2s.eos.{seed}"] = batch.long()

# ---- HuBERT, extract_latent -----------------------------------------------------------------------------------
hf_hubert = HubertModel(HFHubertConfig(**tiny.HUBERT_CONFIG)).eval()
print("HuBERT attention:", hf_hubert.config._attn_implementation)
hub_w = tiny.hubert_weights()
same_names(hf_hubert.state_dict(), hub_w, "HuBERT")
load_into(hf_hubert, hub_w)
wav16k = inp["hubert.wav"]
with torch.no_grad():
    feats = hf_hubert(wav16k[None])["last_hidden_state"]
    mine = ours["v2"].hubert(wav16k[None])[-1]
assert torch.equal(mine, feats), f"HuBERT differs: {(mine - feats).abs().max()}"
out["hubert.features"] = feats
with torch.no_grad():
    feats64 = to_f64(hf_hubert)(wav16k[None].double())["last_hidden_state"]
    record_f64("hubert.features", feats64, ours64["v2"].hubert(wav16k[None].double())[-1])

# ---- BERT -----------------------------------------------------------------------------------------------------
hf_bert = BertForMaskedLM(HFBertConfig(**tiny.BERT_CONFIG)).eval()
print("BERT attention:", hf_bert.config._attn_implementation)
bert_w = {k: v.half().float() for k, v in tiny.bert_weights().items()}
load_into(hf_bert, bert_w, allow_missing="cls.")
ids = inp["bert.ids"]
with torch.no_grad():
    hidden = hf_bert(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                     output_hidden_states=True)["hidden_states"][-3]
    our_bert, _ = our_loader.load_bert(root / "pretrained_models" / "chinese-roberta-wwm-ext-large", torch.float32)
    mine = our_bert(ids)
assert torch.equal(mine, hidden), f"BERT differs: {(mine - hidden).abs().max()}"
out["bert.hidden"] = hidden
with torch.no_grad():
    hidden64 = to_f64(hf_bert)(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids),
                                output_hidden_states=True)["hidden_states"][-3]
    our_bert64, _ = our_loader.load_bert(root / "pretrained_models" / "chinese-roberta-wwm-ext-large", torch.float64)
    record_f64("bert.hidden", hidden64, our_bert64(ids))

# ---- speaker model (v2Pro) --------------------------------------------------------------------------------------
k = tiny.SV_KWARGS
up_sv = UpERes2NetV2(baseWidth=k["base_width"], scale=k["scale"], expansion=k["expansion"], m_channels=k["m_channels"],
                     num_blocks=list(k["num_blocks"])).eval()
sv_w = tiny.sv_weights()
same_names(up_sv.state_dict(), sv_w, "ERes2NetV2")
load_into(up_sv, sv_w)
sv_wav = inp["sv.wav"]
with torch.no_grad():
    feat = torch.stack([up_kaldi.fbank(w0.unsqueeze(0), num_mel_bins=80, sample_frequency=16000, dither=0) for w0 in sv_wav])
    emb = up_sv.forward3(feat.clone())
    my_feat = fbank(sv_wav[0])[None]
    my_emb = ours["v2Pro"].speaker(my_feat)
assert torch.equal(my_feat, feat), "fbank differs"
assert torch.equal(my_emb, emb), f"ERes2NetV2 differs: {(my_emb - emb).abs().max()}"
out.update({"sv.fbank": feat, "sv.embedding": emb})
with torch.no_grad(), float64_constants():
    feat64 = torch.stack([up_kaldi.fbank(w0.unsqueeze(0), num_mel_bins=80, sample_frequency=16000, dither=0)
                          for w0 in sv_wav.double()])
    emb64 = to_f64(up_sv).forward3(feat64.clone())
with torch.no_grad():
    my_feat64 = fbank(sv_wav[0].double())[None]
    record_f64("sv.fbank", feat64, my_feat64)
    record_f64("sv.embedding", emb64, ours64["v2Pro"].speaker(my_feat64))

# ---- SoVITS (v2, v2Pro) -----------------------------------------------------------------------------------------
ref32k = inp["sovits.ref32k"]
spec = spectrogram_torch(ref32k, 2048, 32000, 640, 2048, center=False)
assert torch.equal(linear_spectrogram(ref32k, 2048, 640, 2048), spec), "spectrogram differs"
out["sovits.spec"] = spec
with float64_constants():
    spec64 = spectrogram_torch(ref32k.double(), 2048, 32000, 640, 2048, center=False)
record_f64("sovits.spec", spec64, linear_spectrogram(ref32k.double(), 2048, 640, 2048))
codes, text = inp["sovits.codes"], inp["sovits.text"]


def upstream_sovits(version: str) -> nn.Module:
    hps = tiny.s2_config(version)
    kwargs = dict(hps["model"], version=version)
    up = UpSynth(hps["data"]["filter_length"] // 2 + 1, hps["train"]["segment_size"] // hps["data"]["hop_length"],
                 n_speakers=hps["data"]["n_speakers"], **kwargs).eval()
    if version == "v2Pro":       # upstream hard-codes the published speaker model's 20480; the tiny one is narrower
        up.sv_emb = nn.Linear(tiny.sv_dim(), hps["model"]["gin_channels"])
    w = {k: v.half().float() for k, v in tiny.sovits_weights(version).items()}
    up_names = {k: v for k, v in up.state_dict().items() if not k.startswith("enc_q.")}
    same_names(up_names, w, f"SoVITS {version}")
    load_into(up, w, allow_missing="enc_q.")
    return up


for version in ("v2", "v2Pro"):
    up = upstream_sovits(version)
    mine_model = ours[version].sovits
    # a second instance for float64 (torch.nn.utils.weight_norm modules cannot be deep-copied)
    up64, mine64 = to_f64(upstream_sovits(version), copy_first=False), ours64[version].sovits
    with torch.no_grad():
        latent = up.extract_latent(feats.transpose(1, 2))[0, 0]
        assert torch.equal(mine_model.extract_latent(feats.transpose(1, 2))[0], latent), "extract_latent differs"
        out[f"sovits.{version}.latent"] = latent
        # the codes are an argmin over distances: from the float64 features too, where no rounding is near a tie
        latent64 = up64.extract_latent(feats64.transpose(1, 2))[0, 0]
        assert torch.equal(mine64.extract_latent(feats64.transpose(1, 2))[0], latent64), "float64 extract_latent differs"
        assert torch.equal(latent64, latent), "the float32 codes sit at a float32 tie"
        sv = [emb] if version == "v2Pro" else None
        for speed in (1.0, 1.3):
            torch.manual_seed(5)
            audio = up.decode(codes, text, [spec], speed=speed, sv_emb=sv)
            ge = mine_model.style(spec, emb if version == "v2Pro" else None)
            mine = mine_model(codes[0], text, ge, speed=speed, generator=torch.Generator().manual_seed(5))
            assert torch.equal(mine, audio), f"SoVITS {version} speed {speed} differs: {(mine - audio).abs().max()}"
            out[f"sovits.{version}.audio.{speed}"] = audio
            # float64: the same prior noise as the float32 run (a float64 draw would be other numbers)
            torch.manual_seed(5)
            draw = torch.randn_like
            torch.randn_like = lambda t: draw(t, dtype=torch.float32).to(t.dtype)
            try:
                with float64_constants():
                    audio64 = up64.decode(codes, text, [spec64], speed=speed,
                                          sv_emb=[emb64] if version == "v2Pro" else None)
            finally:
                torch.randn_like = draw
            ge64 = mine64.style(linear_spectrogram(ref32k.double(), 2048, 640, 2048),
                                ours64["v2Pro"].speaker(my_feat64) if version == "v2Pro" else None)
            noise = tiny.prior_noise(mine64.cfg, codes.shape[-1], speed)
            out[f"sovits.noise.{speed}"] = noise
            record_f64(f"sovits.{version}.audio.{speed}", audio64,
                       mine64(codes[0], text, ge64, noise=noise.double(), speed=speed))
            assert torch.equal(mine_model(codes[0], text, ge, noise=noise, speed=speed), audio), "noise differs"
    print(f"SoVITS {version}: audio {list(audio.shape)} equal")

FIXTURES = HERE / "fixtures"
FIXTURES.mkdir(exist_ok=True)
torch.save(out, FIXTURES / "outputs.pt")
print("all equal; wrote", FIXTURES / "outputs.pt", (FIXTURES / "outputs.pt").stat().st_size, "bytes")
