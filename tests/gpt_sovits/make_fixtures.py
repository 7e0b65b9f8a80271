"""Record golden fixtures from the upstream GPT-SoVITS repository, and check ours against it live.

Runs only where the repository is unpacked (default /work/upstream-gpt-sovits, or $GPT_SOVITS_REPO) in the
reference venv (tests/gpt_sovits/README.md):

    /work/venv-gpt-sovits/bin/python tests/gpt_sovits/make_fixtures.py

Upstream's classes are built from tiny configs (tiny.py), given the weights `tiny.random_state` draws for
their own parameter names, and run on seeded inputs exactly as TTS_infer_pack/TTS.py does. The script
asserts that our modules, given the same tensors through our loader (the files tiny.py writes in
upstream's format), give `torch.equal` outputs, then writes fixtures/outputs.pt (inputs + outputs, no
weights) for the default suite.
"""
from __future__ import annotations

import os
import pickletools
import sys
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

from gpt_sovits import tiny  # noqa: E402
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


def same_names(upstream: dict, ours: dict, what: str) -> None:
    a = {k: tuple(v.shape) for k, v in upstream.items()}
    b = {k: tuple(v[0]) if isinstance(v, tuple) else tuple(v.shape) for k, v in ours.items()}
    assert a == b, f"{what}: upstream {sorted(set(a) - set(b))[:6]} / ours {sorted(set(b) - set(a))[:6]} / shapes " \
                   f"{[k for k in a if k in b and a[k] != b[k]][:6]}"


root = Path(os.environ.get("TMPDIR", "/tmp")) / "gpt_sovits_fixtures"
folders = {v: tiny.write_folder(root, v) for v in ("v2", "v2Pro")}
ours = {v: our_loader.load_gpt_sovits(f, torch.float32) for v, f in folders.items()}

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
            mine = generate(ours["v2"].t2s, phones[None], bert[None], prompt, s, torch.Generator().manual_seed(seed),
                            DynamicCache())
        print(f"T2S sampling {i} seed {seed}: batch {batch.tolist()}\n  naive {naive.tolist()}\n  ours  {mine.tolist()}")
        assert torch.equal(mine, batch.long()), "T2S tokens differ from infer_panel_batch_infer"
        out[f"t2s.tokens.{i}.{seed}"] = batch.long()

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

# ---- SoVITS (v2, v2Pro) -----------------------------------------------------------------------------------------
ref32k = inp["sovits.ref32k"]
spec = spectrogram_torch(ref32k, 2048, 32000, 640, 2048, center=False)
assert torch.equal(linear_spectrogram(ref32k, 2048, 640, 2048), spec), "spectrogram differs"
out["sovits.spec"] = spec
codes, text = inp["sovits.codes"], inp["sovits.text"]
for version in ("v2", "v2Pro"):
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
    mine_model = ours[version].sovits
    with torch.no_grad():
        latent = up.extract_latent(feats.transpose(1, 2))[0, 0]
        assert torch.equal(mine_model.extract_latent(feats.transpose(1, 2))[0], latent), "extract_latent differs"
        out[f"sovits.{version}.latent"] = latent
        sv = [emb] if version == "v2Pro" else None
        for speed in (1.0, 1.3):
            torch.manual_seed(5)
            audio = up.decode(codes, text, [spec], speed=speed, sv_emb=sv)
            ge = mine_model.style(spec, emb if version == "v2Pro" else None)
            mine = mine_model(codes[0], text, ge, speed=speed, generator=torch.Generator().manual_seed(5))
            assert torch.equal(mine, audio), f"SoVITS {version} speed {speed} differs: {(mine - audio).abs().max()}"
            out[f"sovits.{version}.audio.{speed}"] = audio
    print(f"SoVITS {version}: audio {list(audio.shape)} equal")

FIXTURES = HERE / "fixtures"
FIXTURES.mkdir(exist_ok=True)
torch.save(out, FIXTURES / "outputs.pt")
print("all equal; wrote", FIXTURES / "outputs.pt", (FIXTURES / "outputs.pt").stat().st_size, "bytes")
