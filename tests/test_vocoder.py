"""The shared Vocos blocks (nodes/blocks/vocoder.py) and their safe, strict loading:
the "same"-padded inverse STFT reconstructs what a matching STFT analysed, mel features follow
torchaudio's definitions, configs are read as plain data with errors naming file and field, and
checkpoints load strictly. Where torchaudio / vocos are installed (the F5-TTS parity venv), the
features and audio equal theirs bit for bit."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from mizuoto.nodes.blocks.vocoder import (ISTFT, ConvNeXtBlock, ISTFTHead, MelSpectrogram, MelSpectrogramFeatures,
                                          Vocos, VocosConfig, VocosConfigError, hz_to_mel, load_vocos, mel_filterbank)
from mizuoto.runtime.loading import CheckpointError

TINY = {
    "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                          "init_args": {"sample_rate": 24000, "n_fft": 256, "hop_length": 64, "n_mels": 20,
                                        "padding": "center"}},
    "backbone": {"class_path": "vocos.models.VocosBackbone",
                 "init_args": {"input_channels": 20, "dim": 16, "intermediate_dim": 32, "num_layers": 2}},
    "head": {"class_path": "vocos.heads.ISTFTHead", "init_args": {"dim": 16, "n_fft": 256, "hop_length": 64,
                                                                  "padding": "same"}},
}


def signal(n: int = 4000, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n) / 24000
    return torch.sin(2 * torch.pi * 440 * t) * 0.3 + 0.01 * torch.randn(n, generator=g)


def test_same_padded_istft_inverts_a_matching_stft():
    n_fft, hop = 256, 64
    y = signal(64 * 50)[None]
    pad = (n_fft - hop) // 2
    window = torch.hann_window(n_fft)
    spec = torch.stft(torch.nn.functional.pad(y, (pad, pad)), n_fft, hop, window=window, center=False,
                      return_complex=True)
    out = ISTFT(n_fft, hop, n_fft, "same")(spec)
    assert out.shape[-1] == spec.shape[-1] * hop
    assert torch.allclose(out[:, : y.shape[-1]], y, atol=1e-5)
    centre = ISTFT(n_fft, hop, n_fft, "center")(torch.stft(y, n_fft, hop, window=window, return_complex=True))
    assert torch.allclose(centre, y, atol=1e-5)
    with pytest.raises(ValueError, match="padding"):
        ISTFT(n_fft, hop, n_fft, "valid")


def test_mel_filterbank_follows_the_htk_definition():
    fb = mel_filterbank(513, 0.0, 12000.0, 100, 24000)
    assert fb.shape == (513, 100) and fb.dtype == torch.float32 and bool((fb >= 0).all())
    assert bool((fb.max(dim=0).values > 0).all()) and fb.max() <= 1
    assert abs(hz_to_mel(1000.0) - 2595 * torch.log10(torch.tensor(1 + 1000 / 700)).item()) < 1e-3
    slaney = mel_filterbank(513, 0.0, 12000.0, 80, 24000, norm="slaney", mel_scale="slaney")
    assert slaney.shape == (513, 80) and not torch.equal(slaney[:, :80], fb[:, :80])
    with pytest.raises(ValueError):
        mel_filterbank(513, 0.0, 12000.0, 80, 24000, norm="area")


def test_mel_features_shapes_and_floor():
    wav = signal(24000)[None]
    mel = MelSpectrogram(24000, 1024, None, 256, 100)(wav)
    assert mel.shape == (1, 100, 24000 // 256 + 1)
    feats = MelSpectrogramFeatures(24000, 1024, 256, 100, "center", floor=1e-5)(torch.zeros(1, 2560))
    assert torch.allclose(feats, torch.full_like(feats, torch.log(torch.tensor(1e-5)).item()))
    same = MelSpectrogramFeatures(24000, 1024, 256, 100, "same")(wav)
    assert same.shape[-1] == 24000 // 256


def test_convnext_block_is_residual():
    block = ConvNeXtBlock(8, 16, 0.5)
    torch.nn.init.zeros_(block.pwconv2.weight)
    torch.nn.init.zeros_(block.pwconv2.bias)
    x = torch.randn(2, 8, 11)
    assert torch.equal(block(x), x)
    assert ConvNeXtBlock(8, 16, None).gamma is None


def test_head_and_model_shapes():
    voc = Vocos(VocosConfig.from_dict(TINY))
    mel = torch.randn(1, 20, 30)
    with torch.inference_mode():
        assert voc.decode(mel).shape == (1, 30 * 64) and voc(mel).shape == (1, 30 * 64)
    head = ISTFTHead(16, 256, 64)
    assert head.out.out_features == 258


def test_config_is_plain_data_with_errors_naming_file_and_field(tmp_path):
    path = tmp_path / "config.yaml"
    for broken, field in (
        ({**TINY, "backbone": {"class_path": "os.system", "init_args": {}}}, "backbone.class_path"),
        ({**TINY, "head": {"class_path": "vocos.heads.ISTFTHead", "init_args": {"dim": 16, "n_fft": "x",
                                                                                "hop_length": 64}}},
         "head.init_args.n_fft"),
        ({**TINY, "backbone": {"class_path": "vocos.models.VocosBackbone",
                               "init_args": {**TINY["backbone"]["init_args"], "adanorm_num_embeddings": 4}}},
         "backbone.init_args.adanorm_num_embeddings"),
        ({k: v for k, v in TINY.items() if k != "head"}, "head.class_path"),
    ):
        path.write_text(yaml.safe_dump(broken))
        with pytest.raises(VocosConfigError, match=f"{path}: {field}"):
            VocosConfig.from_yaml(path)
    path.write_text("feature_extractor: [unclosed")
    with pytest.raises(VocosConfigError, match="not valid YAML"):
        VocosConfig.from_yaml(path)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        VocosConfig.from_yaml(tmp_path / "nowhere.yaml")


def write_vocos(folder: Path) -> Vocos:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(TINY))
    voc = Vocos(VocosConfig.from_dict(TINY))
    torch.save(voc.state_dict(), folder / "pytorch_model.bin")
    return voc


def test_load_vocos_strict_and_safe(tmp_path):
    voc = write_vocos(tmp_path / "v")
    loaded = load_vocos(tmp_path / "v")
    assert all(torch.equal(a, b) for a, b in zip(voc.state_dict().values(), loaded.state_dict().values()))
    assert not loaded.training and load_vocos(tmp_path / "v", torch.float16).head.out.weight.dtype == torch.float16
    state = torch.load(tmp_path / "v" / "pytorch_model.bin", weights_only=True)
    state.pop("head.out.bias")
    state["backbone.embed.weight"] = state["backbone.embed.weight"][:1]
    torch.save(state, tmp_path / "v" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin.*missing keys.*head\.out\.bias.*shape mismatch.*"
                                              r"backbone\.embed\.weight"):
        load_vocos(tmp_path / "v")


def test_vocos_pickle_with_objects_or_garbage_is_refused(tmp_path):
    write_vocos(tmp_path / "v")
    path = tmp_path / "v" / "pytorch_model.bin"
    torch.save({"a": Path("/")}, path)
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin: not loaded.*pathlib"):
        load_vocos(tmp_path / "v")
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"pytorch_model\.bin"):
        load_vocos(tmp_path / "v")


def test_mel_equals_torchaudio():
    """Where torchaudio imports (the parity venv), the same numbers as transforms.MelSpectrogram."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from qwen3_tts.torchaudio_shim import install
    install()
    torchaudio = pytest.importorskip("torchaudio")
    wav = signal(9000, seed=2)[None]
    for kw in ({}, {"norm": "slaney", "mel_scale": "slaney", "n_mels": 80}, {"power": 2.0, "center": False}):
        want = torchaudio.transforms.MelSpectrogram(24000, n_fft=1024, hop_length=256, **{"n_mels": 100, "power": 1.0, **kw})(wav)
        got = MelSpectrogram(24000, 1024, None, 256, **{"n_mels": 100, "power": 1.0, **kw})(wav)
        assert torch.equal(got, want)


def test_vocos_equals_upstream(tmp_path):
    """Where vocos imports (the parity venv): features and audio of a random Vocos equal upstream's."""
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from f5_tts.upstream_stubs import available, install
    if not available():
        pytest.skip("needs vocos 0.1.0 (the F5-TTS parity venv)")
    install()
    import vocos
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    up = vocos.Vocos.from_hparams(str(tmp_path / "config.yaml"))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in up.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    torch.save(up.state_dict(), tmp_path / "pytorch_model.bin")
    ours = load_vocos(tmp_path)
    wav = signal(6400, seed=1)[None]
    with torch.inference_mode():
        assert torch.equal(ours.feature_extractor(wav), up.feature_extractor(wav))
        mel = up.feature_extractor(wav)
        assert torch.equal(ours.decode(mel), up.decode(mel))
