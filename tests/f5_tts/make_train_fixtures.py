"""Record F5-TTS fine-tuning's golden fixture: two training steps of upstream's recipe on a tiny random model.

    F5_TTS_REF_SITE=<folder with ema_pytorch> "$F5_TTS_REF_PYTHON" tests/f5_tts/make_train_fixtures.py [OUT]

The reference venv has f5-tts 1.1.22 (and its inference dependencies, as test_parity.py needs); its
training-only imports are stubbed (upstream_stubs.py) except ema_pytorch, which must be real (0.8.x, on
$F5_TTS_REF_SITE or installed). accelerate is not needed: on one CPU process without mixed precision
`Trainer.train`'s iteration is the loop below (accelerator.backward = loss.backward(), clip_grad_norm_ =
torch's, `accumulate` a no-op with grad_accumulation_steps 1), with upstream's own CFM + DiT (dropout
0.1), MelSpec, torchaudio Resample, convert_char_to_pinyin, collate_fn, AdamW(fused=True),
LinearLR/SequentialLR and ema_pytorch.EMA (continued from step 1199, initted: the second update lerps).

Two steps: the first runs at the warmup's 1e-8 x lr, the second at the full rate (`WARMUP` = 1), and
the EMA update at step 1200 (the second) lerps. Written (safetensors, OUT default fixtures/train_step.safetensors):
`init.*` (the DiT's weights), `mel`, `lens`, `text` (the collated batch: prepared data), `losses`,
`lrs`, `after.*` (weights after the two steps), `ema.*` (the EMA's), metadata `texts`.
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import random
import sys
from pathlib import Path

import torch

torch.set_num_threads(1)
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)] + ([os.environ["F5_TTS_REF_SITE"]] if os.environ.get("F5_TTS_REF_SITE") else [])

from f5_tts.upstream_stubs import _Stub, install  # noqa: E402

install()
# a real accelerate (when the venv has one) asks find_spec about the stubbed wandb: give the stubs a spec
for _name, _module in list(sys.modules.items()):
    if isinstance(_module, _Stub):
        _module.__spec__ = importlib.machinery.ModuleSpec(_name, None)

import torchaudio  # noqa: E402
from ema_pytorch import EMA  # noqa: E402
from f5_tts.model import CFM, DiT  # noqa: E402
from f5_tts.model.dataset import collate_fn  # noqa: E402
from f5_tts.model.utils import convert_char_to_pinyin  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from f5_tts.tiny import MEL, randomize, vocab_tokens  # noqa: E402  (tests/f5_tts/tiny.py)
from f5_tts.train_case import (EMA_STEP, LR, SEED, STEPS, TEXTS, TOTAL, TRAIN_ARCH, WARMUP,  # noqa: E402
                               WEIGHT_SEED, clips)

def main() -> None:
    if "ema_pytorch" not in sys.modules or not hasattr(sys.modules["ema_pytorch"], "__file__"):
        sys.exit("ema_pytorch must be the real package (set $F5_TTS_REF_SITE to a folder holding it)")
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures" / "train_step.safetensors"
    tokens = vocab_tokens()
    vocab = {t: i for i, t in enumerate(tokens)}
    dit = DiT(**TRAIN_ARCH, text_num_embeds=len(tokens), mel_dim=MEL["n_mel_channels"])
    cfm = CFM(transformer=dit, mel_spec_kwargs=dict(MEL), vocab_char_map=vocab)
    randomize(cfm, WEIGHT_SEED)
    init = {f"init.{k}": v.detach().clone().contiguous() for k, v in dit.state_dict().items()}

    # CustomDataset.__getitem__ (mono, Resample, MelSpec) + prepare_csv_wavs' pinyin, then collate_fn
    items = []
    for (wav, rate), text in zip(clips(), convert_char_to_pinyin(TEXTS, polyphone=True)):
        if rate != MEL["target_sample_rate"]:
            wav = torchaudio.transforms.Resample(rate, MEL["target_sample_rate"])(wav)
        items.append({"mel_spec": cfm.mel_spec(wav).squeeze(0), "text": text})
    batch = collate_fn(items)
    mel_spec, lens, text_inputs = batch["mel"].permute(0, 2, 1), batch["mel_lengths"], batch["text"]
    from f5_tts.model.utils import list_str_to_idx
    text_ids = list_str_to_idx(text_inputs, vocab)

    optimizer = torch.optim.AdamW(cfm.parameters(), lr=LR, fused=True)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1e-8, end_factor=1.0, total_iters=WARMUP)
    decay = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=1e-8, total_iters=TOTAL - WARMUP)
    scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[warmup, decay], milestones=[WARMUP])
    ema = EMA(cfm, include_online_model=False)
    ema.step.fill_(EMA_STEP)                  # the pretrained EMA state's bookkeeping (load_checkpoint)
    ema.initted.fill_(True)

    cfm.train()
    torch.manual_seed(SEED)
    random.seed(SEED)
    losses, lrs = [], []
    for _ in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        loss, _, _ = cfm(mel_spec, text=text_inputs, lens=lens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(cfm.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        ema.update()
        losses.append(loss.detach())
    ema_dit = ema.ema_model.transformer
    state = {**init, "mel": batch["mel"], "lens": lens, "text": text_ids,
             "losses": torch.stack(losses), "lrs": torch.tensor(lrs, dtype=torch.float64),
             **{f"after.{k}": v.detach().clone().contiguous() for k, v in dit.state_dict().items()},
             **{f"ema.{k}": v.detach().clone().contiguous() for k, v in ema_dit.state_dict().items()}}
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out), metadata={"texts": json.dumps(TEXTS, ensure_ascii=False), "seed": str(SEED),
                                         "lr": str(LR), "warmup": str(WARMUP), "total": str(TOTAL),
                                         "ema_step": str(EMA_STEP)})
    print(f"wrote {out}: losses {[float(x) for x in losses]}, lrs {lrs}")


if __name__ == "__main__":
    main()
