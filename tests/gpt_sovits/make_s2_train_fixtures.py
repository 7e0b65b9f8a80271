"""Record the SoVITS (s2) training golden fixture from upstream GPT-SoVITS, and check ours against it live.

    GPT_SOVITS_REPO=<upstream checkout at 48b1a01> "$REF_VENV"/bin/python tests/gpt_sovits/make_s2_train_fixtures.py [v2|v2Pro]

The reference venv needs torch==2.13.0, transformers (make_fixtures_env), librosa (module/mel_processing.py's
mel basis) and einops (module/core_vq.py), and this worktree installed with --no-deps. No DDP, no DataLoader:
the body of s2_train.train_and_evaluate for one batch is repeated below line for line (fp16_run false, so
autocast and the GradScaler are no-ops: scaler.scale(x) is x, scaler.step is optimizer.step) with upstream's
SynthesizerTrn, MultiPeriodDiscriminator, losses, mel functions, commons.slice_segments and its optimizer /
scheduler construction from s2_train.run.

From the same weights (s2_tiny), batches and seed, upstream and ours run two batches (two D and two G
updates; dropout on; v2Pro with speaker vectors, `net_g(..., sv_emb)` as s2_train.py calls it). Asserted here: float32 losses, weights and gradients torch.equal (this machine),
float64 within 1e-11 of upstream's scale. For the float64 run upstream's `.float()` calls (losses.py,
MelStyleEncoder.temporal_avg_pool) are made to keep float64 (`Tensor.float` patched to "at least
float32"), as ours does; the float32 run is upstream unchanged. Written: fixtures/s2_train.pt with
upstream's float64 losses and, per tensor, s2_tiny.summary of the weights and gradients after the two
batches; and its float32 losses (tests/gpt_sovits/test_s2_train.py); v2Pro: fixtures/s2_train_v2Pro.pt.
"""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_fixtures_env  # noqa: E402,F401  (upstream on sys.path, import stubs; exits without the repository)

for name in ("librosa", "librosa.filters"):      # the real librosa: mel_processing's filterbank
    sys.modules.pop(name, None)
import librosa.filters  # noqa: E402,F401

import utils as up_utils  # noqa: E402
from module import commons  # noqa: E402
from module.losses import discriminator_loss, feature_loss, generator_loss, kl_loss  # noqa: E402
from module.mel_processing import mel_spectrogram_torch, spec_to_mel_torch  # noqa: E402
from module.models import MultiPeriodDiscriminator as UpMPD, SynthesizerTrn as UpSynth  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import golden  # noqa: E402
from gpt_sovits import s2_tiny, tiny  # noqa: E402
from mizuoto.nodes.gpt_sovits import s2_train  # noqa: E402

STEPS = len(s2_tiny.CLIPS)
_FLOAT = torch.Tensor.float


@contextlib.contextmanager
def float_keeps_float64():
    torch.Tensor.float = lambda self, *a, **k: self if self.dtype == torch.float64 else _FLOAT(self, *a, **k)
    try:
        yield
    finally:
        torch.Tensor.float = _FLOAT


def upstream(dtype: torch.dtype, keep_float64: bool = False, version: str = s2_tiny.VERSION):
    hps = up_utils.HParams(**s2_tiny.config(version))
    torch.manual_seed(hps.train.seed)
    net_g = UpSynth(hps.data.filter_length // 2 + 1, hps.train.segment_size // hps.data.hop_length,
                    n_speakers=hps.data.n_speakers, **hps.model)
    net_d = UpMPD(hps.model.use_spectral_norm, version=hps.model.version)
    assert not net_g.load_state_dict(s2_tiny.generator_weights(version), strict=True).missing_keys
    assert not net_d.load_state_dict(s2_tiny.discriminator_weights(version), strict=True).missing_keys
    net_g, net_d = net_g.to(dtype), net_d.to(dtype)
    te_p = list(map(id, net_g.enc_p.text_embedding.parameters()))
    et_p = list(map(id, net_g.enc_p.encoder_text.parameters()))
    mrte_p = list(map(id, net_g.enc_p.mrte.parameters()))
    base_params = filter(lambda p: id(p) not in te_p + et_p + mrte_p and p.requires_grad, net_g.parameters())
    optim_g = torch.optim.AdamW(
        [{"params": base_params, "lr": hps.train.learning_rate},
         {"params": net_g.enc_p.text_embedding.parameters(), "lr": hps.train.learning_rate * hps.train.text_low_lr_rate},
         {"params": net_g.enc_p.encoder_text.parameters(), "lr": hps.train.learning_rate * hps.train.text_low_lr_rate},
         {"params": net_g.enc_p.mrte.parameters(), "lr": hps.train.learning_rate * hps.train.text_low_lr_rate}],
        hps.train.learning_rate, betas=hps.train.betas, eps=hps.train.eps)
    optim_d = torch.optim.AdamW(net_d.parameters(), hps.train.learning_rate, betas=hps.train.betas, eps=hps.train.eps)
    scheduler_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=hps.train.lr_decay, last_epoch=-1)
    scheduler_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=hps.train.lr_decay, last_epoch=-1)
    for _ in range(1):          # epoch_str = 1
        scheduler_g.step()
        scheduler_d.step()
    net_g.train()
    net_d.train()
    losses = []
    data_all = s2_tiny.batches(version=version)       # drawn before the patch: tiny.randn rounds with .float()
    with float_keeps_float64() if keep_float64 else contextlib.nullcontext():
        steps(net_g, net_d, optim_g, optim_d, hps, dtype, data_all, losses)
    return losses, net_g, net_d


def steps(net_g, net_d, optim_g, optim_d, hps, dtype, data_all, losses) -> None:
    torch.manual_seed(s2_tiny.SEED)
    for data in data_all:
        ssl, spec, y, text = (data[k].to(dtype) if data[k].is_floating_point() else data[k]
                              for k in ("ssl", "spec", "wav", "text"))
        spec_lengths, text_lengths = data["spec_lengths"], data["text_lengths"]
        ssl.requires_grad = False
        sv = (data["sv_emb"].to(dtype),) if "sv_emb" in data else ()
        (y_hat, kl_ssl, ids_slice, x_mask, z_mask, (z, z_p, m_p, logs_p, m_q, logs_q), stats_ssl) = net_g(
            ssl, spec, spec_lengths, text, text_lengths, *sv)
        mel = spec_to_mel_torch(spec, hps.data.filter_length, hps.data.n_mel_channels, hps.data.sampling_rate,
                                hps.data.mel_fmin, hps.data.mel_fmax)
        y_mel = commons.slice_segments(mel, ids_slice, hps.train.segment_size // hps.data.hop_length)
        y_hat_mel = mel_spectrogram_torch(y_hat.squeeze(1), hps.data.filter_length, hps.data.n_mel_channels,
                                          hps.data.sampling_rate, hps.data.hop_length, hps.data.win_length,
                                          hps.data.mel_fmin, hps.data.mel_fmax)
        y = commons.slice_segments(y, ids_slice * hps.data.hop_length, hps.train.segment_size)
        y_d_hat_r, y_d_hat_g, _, _ = net_d(y, y_hat.detach())
        loss_disc, losses_disc_r, losses_disc_g = discriminator_loss(y_d_hat_r, y_d_hat_g)
        loss_disc_all = loss_disc
        optim_d.zero_grad()
        loss_disc_all.backward()
        optim_d.step()
        y_d_hat_r, y_d_hat_g, fmap_r, fmap_g = net_d(y, y_hat)
        loss_mel = F.l1_loss(y_mel, y_hat_mel) * hps.train.c_mel
        loss_kl = kl_loss(z_p, logs_q, m_p, logs_p, z_mask) * hps.train.c_kl
        loss_fm = feature_loss(fmap_r, fmap_g)
        loss_gen, losses_gen = generator_loss(y_d_hat_g)
        loss_gen_all = loss_gen + loss_fm + loss_mel + kl_ssl * 1 + loss_kl
        optim_g.zero_grad()
        loss_gen_all.backward()
        optim_g.step()
        losses.append([x.item() for x in (loss_disc, loss_gen, loss_fm, loss_mel, kl_ssl, loss_kl)])


def ours(dtype: torch.dtype, version: str = s2_tiny.VERSION):
    hps = s2_tiny.config(version)
    hp = s2_train.S2Hparams.from_config(hps)
    net_g = s2_train.training_generator(tiny.sovits_config(version))
    net_g.load_state_dict(s2_tiny.generator_weights(version), strict=True)
    net_d = s2_train.MultiPeriodDiscriminator(version)
    net_d.load_state_dict(s2_tiny.discriminator_weights(version), strict=True)
    net_g, net_d = net_g.to(dtype).train(), net_d.to(dtype).train()
    optim_g, optim_d = s2_train.make_optimizers(net_g, net_d, hp)
    s2_train.make_schedulers((optim_g, optim_d), hp)
    torch.manual_seed(s2_tiny.SEED)
    losses = [s2_train.train_step(net_g, net_d, optim_g, optim_d, s2_train.S2Batch(**b).to("cpu", dtype), hp).as_list()
              for b in s2_tiny.batches(version=version)]
    return losses, net_g, net_d


def tensors(net_g, net_d) -> dict[str, torch.Tensor]:
    out = {}
    for prefix, net in (("g", net_g), ("d", net_d)):
        for k, p in net.named_parameters():
            out[f"{prefix}.{k}"] = p.detach()
            out[f"{prefix}.{k}.grad"] = p.grad.detach() if p.grad is not None else torch.zeros(0)
    return out


def main(version: str) -> None:
    fixture: dict[str, torch.Tensor] = {}
    up32 = upstream(torch.float32, version=version)
    our32 = ours(torch.float32, version)
    assert up32[0] == our32[0], (up32[0], our32[0])
    t_up, t_our = tensors(*up32[1:]), tensors(*our32[1:])
    assert set(t_up) == set(t_our), sorted(set(t_up) ^ set(t_our))[:8]
    bad = [k for k in t_up if not torch.equal(t_up[k], t_our[k])]
    assert not bad, f"float32: {len(bad)} tensors differ, e.g. {bad[:5]}"
    fixture["losses.float32"] = torch.tensor(up32[0], dtype=torch.float64)
    up64 = upstream(torch.float64, keep_float64=True, version=version)
    our64 = ours(torch.float64, version)
    golden.assert_close(torch.tensor(our64[0], dtype=torch.float64), torch.tensor(up64[0], dtype=torch.float64),
                        1e-11, "float64 losses")
    t_up, t_our = tensors(*up64[1:]), tensors(*our64[1:])
    worst = max((golden.relative_error(t_our[k], t_up[k]), k) for k in t_up if t_up[k].numel())
    assert worst[0] <= 1e-11, worst
    fixture["losses.float64"] = torch.tensor(up64[0], dtype=torch.float64)
    for k, t in t_up.items():
        if t.is_floating_point() and t.numel():
            fixture[f"summary.{k}"] = s2_tiny.summary(t)
    none = sorted(k for k, t in t_up.items() if k.endswith(".grad") and not t.numel())
    fixture["no_grad"] = torch.tensor([len(none)])
    print("parameters without a gradient (frozen path):", none)
    print("float32 losses", up32[0])
    print("float64 worst relative difference", worst)
    path = HERE / "fixtures" / FIXTURE[version]
    torch.save(fixture, path)
    print("wrote", path, len(fixture), "entries")


FIXTURE = {"v2": "s2_train.pt", "v2Pro": "s2_train_v2Pro.pt"}

if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "v2")
