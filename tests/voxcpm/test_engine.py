"""VoxCPM 2 on tiny random checkpoints in the upstream layout (tiny.py; no voxcpm package): the loader's
errors name the file and field, the engine speaks in every mode with seeded, repeatable results, the
LongRoPE equals upstream's table, and our model built from the published config has exactly upstream's
tensor names and shapes (real_voxcpm2.json)."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from mizuoto.nodes.pack.engine import Chunk, Reference
from mizuoto.nodes.blocks.transformer import LongRoPE, RotaryEmbedding, rotary_embedding
from mizuoto.nodes.voxcpm.audiovae import AudioVAE, AudioVAEConfig
from mizuoto.nodes.voxcpm.generate import Sampling, build_prompt, generate
from mizuoto.nodes.voxcpm.loader import ModelFolderError, is_model_folder, load_voxcpm
from mizuoto.nodes.voxcpm.model import VoxCPM2, VoxCPMConfig
from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
from mizuoto.runtime import DeviceService, ModelManager
from mizuoto.runtime.loading import CheckpointError

HERE = Path(__file__).parent
spec = importlib.util.spec_from_file_location("voxcpm_tiny", HERE / "tiny.py")
tiny = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: one thread is faster


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny.write_tiny_checkpoint(tmp_path_factory.mktemp("voxcpm") / "tiny", seed=0)


@pytest.fixture(scope="module")
def engine(folder):
    torch.set_num_threads(1)
    return VoxCPMEngine(load_voxcpm(folder, torch.float32), ModelManager(DeviceService()), min_unit_bytes=1 << 10,
                        tiny_unit_bytes=1 << 10)


def speak(engine, text="hello world", seed=0, settings=None, **kw):
    chunk = Chunk(text, seed=seed, **kw)
    with engine.manager.request(seed=seed, settings=settings) as ctx:
        return engine.speak_chunk(ctx, chunk), chunk, ctx


def test_real_size_structure():
    """Our modules from openbmb/VoxCPM2's config.json hold exactly upstream's tensors (names, shapes)."""
    data = json.loads((HERE / "real_voxcpm2.json").read_text())
    config = VoxCPMConfig.from_dict(data["config"])
    with torch.device("meta"):
        model = VoxCPM2(config)
        vae = AudioVAE(AudioVAEConfig.from_dict(config.audio_vae))
    assert {k: list(t.shape) for k, t in model.state_dict().items()} == data["model.safetensors"]
    assert {k: list(t.shape) for k, t in vae.state_dict().items()} == data["audiovae.pth"]
    assert len(data["model.safetensors"]) == 577 and config.lm.num_hidden_layers == 28
    assert isinstance(model.base_lm.rope, LongRoPE) and model.residual_lm.rope is None


def test_kv_bytes_per_position_of_the_real_model():
    data = json.loads((HERE / "real_voxcpm2.json").read_text())
    config = VoxCPMConfig.from_dict(data["config"])
    per_layer = 2 * config.lm.num_key_value_heads * config.lm.head_dim * 2          # K + V, bf16
    assert per_layer * (config.lm.num_hidden_layers + config.residual.num_hidden_layers) == 36864


@pytest.mark.parametrize("long", [True, False])
def test_longrope_equals_upstream_table(long):
    """MiniCPM-4 builds cos/sin for every position once (float32) and indexes it; ours computes the rows asked."""
    head, theta, original = 8, 10000.0, 512
    max_pos = 2048 if long else 512
    rope = LongRoPE(head, theta, tiny.SHORT, tiny.LONG, original, max_pos)
    factors = torch.tensor(tiny.LONG if long else tiny.SHORT, dtype=torch.float32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head, 2).float() / head))
    t = torch.arange(max_pos, dtype=torch.float32)
    emb = torch.cat(2 * [torch.mul(torch.outer(t, 1.0 / factors), inv_freq)], dim=-1)
    scale = math.sqrt(1 + math.log(max_pos / original) / math.log(original))
    positions = torch.tensor([0, 1, 7, 100, max_pos - 1])
    cos, sin = rope(positions, torch.float32)
    assert torch.equal(cos[0], emb.cos()[positions] * scale)
    assert torch.equal(sin[0], emb.sin()[positions] * scale)
    assert (scale == 1.0) == (not long)


def test_rope_types():
    assert isinstance(rotary_embedding(None, 8, 1e4), RotaryEmbedding)
    assert isinstance(rotary_embedding({"rope_type": "default"}, 8, 1e4), RotaryEmbedding)
    with pytest.raises(ValueError, match="unsupported RoPE type 'yarn'"):
        rotary_embedding({"type": "yarn", "factor": 4.0}, 8, 1e4, 1024)
    with pytest.raises(ValueError, match="long_factor: expected 4 values"):
        rotary_embedding({"type": "longrope", "short_factor": tiny.SHORT, "long_factor": [1.0],
                          "original_max_position_embeddings": 16}, 8, 1e4, 64)


def test_tokenizer_splits_multichar_chinese(folder):
    from mizuoto.nodes.voxcpm.text import TextTokenizer
    tok = TextTokenizer(folder / "tokenizer.json")
    assert tok.tokens("你好世界") == ["你", "好", "世", "界"]            # "▁你好世界" split, its "▁" dropped
    assert tok.tokens("hello world") == ["▁hello", "▁world"]
    assert tok.tokens(" hello") == ["▁hello"]                            # no second "▁" before a leading space
    assert tok("hello") == [tok.tokenizer.token_to_id("▁hello")]


def test_speaks_repeatably(engine):
    a, _, ctx = speak(engine, "hello world, the tiny voice.", seed=3)
    b, _, _ = speak(engine, "hello world, the tiny voice.", seed=3)
    c, _, _ = speak(engine, "hello world, the tiny voice.", seed=4)
    hop = engine.config.patch_size * engine.bundle.vae.config.decode_hop_length
    assert a.dtype == torch.float32 and a.dim() == 1 and a.numel() % hop == 0 and a.numel() > 0
    assert torch.isfinite(a).all() and torch.equal(a, b) and not torch.equal(a, c)
    assert engine.sample_rate == 48000 and "kv_cache" not in ctx.meta["applied"]


def test_modes(engine):
    ref = Reference(tiny.reference_wave(0.6), 16000)
    cloned, chunk, _ = speak(engine, "speak the test", reference=ref)
    assert [k[1] for k in chunk.prompts] == [False]                        # the reference encoded once
    ultimate, chunk, _ = speak(engine, "speak the test", reference=ref, reference_text="hello")
    assert [k[1] for k in chunk.prompts] == [True]
    designed, _, _ = speak(engine, "speak the test", instruction="a warm voice")
    steered, _, _ = speak(engine, "speak the test", instruction="a warm voice", reference=ref)
    chinese, _, _ = speak(engine, "你好世界，我们说话。")
    for wav in (cloned, ultimate, designed, steered, chinese):
        assert wav.numel() > 0 and torch.isfinite(wav).all()
    with pytest.raises(ValueError, match="instruction"):
        speak(engine, "x", instruction="calm", reference=ref, reference_text="hello")
    with pytest.raises(ValueError, match="16000 Hz"):
        speak(engine, "x", reference=Reference(tiny.reference_wave(0.6, 24000), 24000))
    with pytest.raises(ValueError, match="unknown temperature"):
        speak(engine, "x", options={"temperature": 0.5})
    with pytest.raises(ValueError, match="cfg_value"):
        speak(engine, "x", options={"cfg_value": 0.0})


def test_options_and_frame_limit(engine):
    assert set(VoxCPMEngine.options) == {f.name for f in dataclasses.fields(Sampling)}
    wav, _, _ = speak(engine, "hello", options={"inference_timesteps": 4, "cfg_value": 1.5, "max_len": 3,
                                                "retry_badcase": False})
    hop = engine.config.patch_size * engine.bundle.vae.config.decode_hop_length
    assert wav.numel() <= 3 * hop
    assert Sampling().frame_limit(10) == 70 and Sampling(max_len=20).frame_limit(10) == 20


def test_static_cache_is_named_and_close(engine, folder):
    b = engine.bundle
    tok = b.tokenizer
    prompt = build_prompt(tok("hello world, the tiny voice."), 2, 4)
    outs = [generate(b.model, prompt, Sampling(), torch.Generator().manual_seed(5), 6, kv=kv)
            for kv in ("dynamic", "static")]
    assert outs[0][1] == outs[1][1]
    torch.testing.assert_close(outs[0][0], outs[1][0], atol=1e-4, rtol=1e-4)
    _, _, ctx = speak(engine)       # auto: upstream's static layout, so nothing to name
    assert "kv_cache" not in ctx.meta["applied"]
    _, _, ctx = speak(engine, settings={"compute.kv_cache": "dynamic"})
    assert ctx.meta["applied"]["kv_cache"] == "dynamic"


def _copy(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in folder.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def test_loader_errors_name_the_file(folder, tmp_path):
    with pytest.raises(ModelFolderError, match="not found"):
        load_voxcpm(tmp_path / "nowhere")
    bad = _copy(folder, tmp_path / "no_vae")
    (bad / "audiovae.pth").unlink()
    assert not is_model_folder(bad) and is_model_folder(folder)
    with pytest.raises(ModelFolderError, match="audiovae.safetensors or audiovae.pth"):
        load_voxcpm(bad)

    bad = _copy(folder, tmp_path / "bad_field")
    cfg = tiny.config(lm_hidden_size="big")
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json: lm_config\.hidden_size: expected int"):
        load_voxcpm(bad)
    (bad / "config.json").write_text(json.dumps(tiny.config(lm_rope_scaling={"type": "yarn", "factor": 2.0})))
    with pytest.raises(CheckpointError, match=r"config\.json: lm_config\.rope_scaling: unsupported RoPE type"):
        load_voxcpm(bad)
    cfg = tiny.config()
    cfg["dit_config"]["dit_mean_mode"] = True
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="dit_mean_mode"):
        load_voxcpm(bad)
    (bad / "config.json").write_text(json.dumps(tiny.config(architecture="voxcpm")))
    with pytest.raises(CheckpointError, match="not VoxCPM 2"):
        load_voxcpm(bad)

    bad = _copy(folder, tmp_path / "shapes")         # weights of another size
    (bad / "config.json").write_text(json.dumps(tiny.config(lm_intermediate_size=48)))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match VoxCPM2: shape mismatch"):
        load_voxcpm(bad)

    bad = _copy(folder, tmp_path / "vae_keys")
    state = torch.load(bad / "audiovae.pth", weights_only=True)
    del state["decoder.sr_bin_boundaries"]
    state["decoder.extra"] = torch.zeros(1)
    torch.save(state, bad / "audiovae.pth")
    with pytest.raises(CheckpointError, match=r"audiovae\.pth does not match AudioVAE: missing keys \(1\) "
                                              r"decoder\.sr_bin_boundaries; unexpected keys \(1\) decoder\.extra"):
        load_voxcpm(bad)
    with open(bad / "audiovae.pth", "wb") as f:                              # a pickle holding an object
        pickle.dump({"x": Path("/")}, f)
    with pytest.raises(CheckpointError, match=r"audiovae\.pth: a plain Python pickle \(pickle.dump\), not a torch"):
        load_voxcpm(bad)

    bad = _copy(folder, tmp_path / "missing_tensor")
    from safetensors.torch import load_file
    state = load_file(bad / "model.safetensors")
    del state["stop_head.weight"]
    save_file(state, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors does not match VoxCPM2: missing keys \(1\) stop_head\.weight"):
        load_voxcpm(bad)


def test_units_fixed_part_and_pinned_embedding(engine):
    model = engine.bundle.model
    layout = engine.lm.layout
    names = {u.name for u in layout.units}
    assert {f"base_lm.layers.{i}" for i in range(2)} <= names
    assert {f"feat_decoder.estimator.decoder.layers.{i}" for i in range(2)} <= names
    assert all(u.hot == u.name.startswith("feat_decoder.") for u in layout.units)
    fixed = {id(t) for t in layout.fixed}
    streamed = {id(p) for u in layout.units for p in u.params}
    assert id(model.base_lm.embed_tokens.weight) not in fixed | streamed       # pinned to the CPU
    assert id(model.feat_encoder.special_token) in fixed and id(model.stop_head.weight) in fixed
    speak(engine)
    convs = [m for m in engine.bundle.vae.modules() if hasattr(m, "weight_g")]
    assert convs and all(hasattr(m, "weight_v") and not hasattr(m, "weight") for m in convs)   # normed in forward


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_strided_linear_takes_torchs_linear_path_for_every_layout(dtype):
    """Upstream's nn.Linear: bias fused (addmm) for 2-D and any contiguous input, a GEMM plus an add for a
    strided one. The prompt's contiguous 4-D patches are where a separate add differed in bf16."""
    from mizuoto.nodes.voxcpm.model import StridedLinear

    torch.manual_seed(0)
    layer = StridedLinear(64, 96).to(dtype)
    x4 = torch.randn(2, 5, 4, 64, dtype=torch.float64).to(dtype)
    for x in (x4[0, 0], x4[0], x4, x4.transpose(1, 2), x4[:, :, 1:]):
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias)), (x.shape, x.stride())


def test_the_whole_text_is_one_segment_as_upstream_generates_it():
    from mizuoto.nodes.voxcpm.phases import VoxCPMEngine
    text = "今天天气很好。我们去公园散步吧！\nHello there. " * 30        # 900 characters: still one call upstream
    assert VoxCPMEngine.split_text(None, text) == [text]
