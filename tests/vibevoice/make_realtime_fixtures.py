"""Record VibeVoice-Realtime golden fixtures from upstream's repository code (run in the reference venv, never
in the project's): a tiny random `VibeVoiceStreamingForConditionalGenerationInference` built from a config in
the published layout (config.json of microsoft/VibeVoice-Realtime-0.5B, sizes shrunk), and

- lm: the base LM's and the TTS LM's last hidden states for a prompt and a second window through the KV
  cache, the TTS LM's EOS logits, the acoustic connector's output (upstream forward_lm / forward_tts_lm);
- decoder: the σ-VAE acoustic decoder's audio for given latents, whole (non-streaming) and frame by frame
  through upstream's streaming conv cache;
- generate: upstream's streaming `generate` end to end on a voice preset prefilled by upstream's own LMs,
  seeded, for a text long enough for several text windows (one run ending on EOS, one at max length).

    VIBEVOICE_SRC=/path/to/VibeVoice-checkout $VIBEVOICE_VENV/bin/python tests/vibevoice/make_realtime_fixtures.py [OUT]

OUT defaults to tests/vibevoice/fixtures/realtime.safetensors. The live test runs this into a temporary
folder and compares with torch.equal; the committed file is compared at a float bound (see the tests).
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.environ["VIBEVOICE_SRC"])
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.modeling_outputs import BaseModelOutputWithPast  # noqa: E402

from vibevoice.modular.configuration_vibevoice_streaming import VibeVoiceStreamingConfig  # noqa: E402
from vibevoice.modular.modeling_vibevoice_streaming_inference import (  # noqa: E402
    VibeVoiceStreamingForConditionalGenerationInference as Inference)
from vibevoice.modular.modular_vibevoice_tokenizer import VibeVoiceTokenizerStreamingCache  # noqa: E402

# The published config.json's layout, sizes shrunk (the real one: Qwen2.5-0.5B, 24 layers of which 20 are
# the TTS LM, 64-dim latents, ratios 8-5-5-4-2-2 = 3200 samples a frame).
CONFIG = {
    "model_type": "vibevoice_streaming",
    "tts_backbone_num_hidden_layers": 2,
    "acoustic_vae_dim": 8,
    "decoder_config": {"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 5,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 96,
                       "max_position_embeddings": 64, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                       "tie_word_embeddings": True, "use_sliding_window": False, "hidden_act": "silu"},
    "diffusion_head_config": {"model_type": "vibevoice_diffusion_head", "hidden_size": 32, "head_layers": 2,
                              "head_ffn_ratio": 3.0, "rms_norm_eps": 1e-5, "latent_size": 8,
                              "prediction_type": "v_prediction", "ddpm_num_steps": 1000,
                              "ddpm_num_inference_steps": 5, "ddpm_beta_schedule": "cosine",
                              "diffusion_type": "ddpm", "speech_vae_dim": 8},
    "acoustic_tokenizer_config": {"model_type": "vibevoice_acoustic_tokenizer", "channels": 1, "causal": True,
                                  "vae_dim": 8, "fix_std": 0.5, "std_dist_type": "gaussian",
                                  "mixer_layer": "depthwise_conv", "conv_norm": "none", "pad_mode": "constant",
                                  "disable_last_norm": True, "layernorm": "RMSNorm", "layernorm_eps": 1e-5,
                                  "layernorm_elementwise_affine": True, "conv_bias": True,
                                  "layer_scale_init_value": 1e-6, "weight_init_value": 1e-2,
                                  "encoder_n_filters": 4, "encoder_ratios": [2, 3], "encoder_depths": "1-1-2",
                                  "decoder_n_filters": 4, "decoder_ratios": [2, 3], "decoder_depths": None},
}
NEG_ID = 90          # the tiny vocabulary's "<|image_pad|>" (the negative prompt's only token)
PAD_ID = 91
PROMPT = 9           # voice-prompt positions in the tiny preset
TEXT = [5, 17, 33, 2, 41, 8, 60, 12, 77, 3, 29, 50, 6]   # 13 tokens: text windows of 5, 5, 3
GAIN = 0.7
EOS_BIAS = -0.15
RUNS = {"eos": dict(seed=5, cfg=1.5, steps=5, max_new=None), "max": dict(seed=4, cfg=2.0, steps=3, max_new=None)}


def build() -> Inference:
    torch.manual_seed(0)
    cfg = VibeVoiceStreamingConfig(**copy.deepcopy(CONFIG))
    cfg.decoder_config._attn_implementation = "sdpa"
    model = Inference(cfg).eval()
    with torch.no_grad():   # random everything (upstream zero-initialises some weights and holds NaN scalers)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith("gamma"):
                p.copy_(0.5 + 0.2 * torch.randn_like(p))
            elif p.dim() >= 2:
                # gain below 1 per layer: the frame-to-frame loop is contracting, so a kernel's float32
                # reassociation on another machine stays small instead of growing through the frames
                fan_in = p.shape[1] * (p.shape[2] if p.dim() == 3 else 1)
                p.copy_(torch.randn_like(p) * (GAIN / fan_in ** 0.5))
            else:
                p.copy_(torch.randn_like(p) * 0.1)
        model.model.speech_scaling_factor.fill_(0.75)
        model.model.speech_bias_factor.fill_(-0.2)
        # EOS fires late enough for several windows: bias the classifier towards "continue"
        model.tts_eos_classifier.fc2.bias.fill_(EOS_BIAS)
    return model


def weights(model: Inference) -> dict[str, torch.Tensor]:
    return {f"weight.{k}": v.contiguous() for k, v in model.state_dict().items()}


def cache_tensors(prefix: str, cache: DynamicCache) -> dict[str, torch.Tensor]:
    out = {}
    for i in range(len(cache.key_cache)):
        out[f"{prefix}.k{i}"] = cache.key_cache[i].contiguous()
        out[f"{prefix}.v{i}"] = cache.value_cache[i].contiguous()
    return out


def lm_records(model: Inference) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 90, (1, 7), generator=g)
    b = torch.randint(0, 90, (1, 5), generator=g)
    latent = torch.randn(1, 1, 8, generator=g)
    out = {"lm.ids_a": a, "lm.ids_b": b, "lm.latent": latent}
    with torch.no_grad():
        lm_cache, tts_cache = DynamicCache(), DynamicCache()
        for tag, ids in (("a", a), ("b", b)):
            h = model.forward_lm(input_ids=ids, past_key_values=lm_cache, use_cache=True, return_dict=True)
            t = model.forward_tts_lm(input_ids=ids, past_key_values=tts_cache, use_cache=True, return_dict=True,
                                     lm_last_hidden_state=h.last_hidden_state,
                                     tts_text_masks=torch.ones_like(ids[:, -1:]))
            out[f"lm.hidden_{tag}"] = h.last_hidden_state
            out[f"tts.hidden_{tag}"] = t.last_hidden_state
            out[f"tts.eos_{tag}"] = t.logits
        embed = model.model.acoustic_connector(latent)
        t = model.forward_tts_lm(input_ids=torch.full((1, 1), PAD_ID), past_key_values=tts_cache, use_cache=True,
                                 return_dict=True, lm_last_hidden_state=embed, tts_text_masks=torch.zeros(1, 1))
        out.update({"connector.out": embed, "tts.hidden_speech": t.last_hidden_state, "tts.eos_speech": t.logits})
    return out


def decoder_records(model: Inference) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    latents = torch.randn(1, 8, 7, generator=g)       # (batch, vae_dim, frames)
    tok = model.model.acoustic_tokenizer
    with torch.no_grad():
        whole = tok.decode(latents)
        cache = VibeVoiceTokenizerStreamingCache()
        idx = torch.LongTensor([0])
        frames = [tok.decode(latents[:, :, i:i + 1], cache=cache, sample_indices=idx, use_cache=True)
                  for i in range(latents.shape[-1])]
    return {"decoder.latents": latents, "decoder.whole": whole, "decoder.streamed": torch.cat(frames, dim=-1)}


def prefill(model: Inference, ids: torch.Tensor) -> tuple[dict, dict[str, torch.Tensor]]:
    """A preset part pair (lm, tts_lm) for `ids`, as upstream's presets hold them (BaseModelOutputWithPast)."""
    with torch.no_grad():
        lm_cache, tts_cache = DynamicCache(), DynamicCache()
        h = model.forward_lm(input_ids=ids, past_key_values=lm_cache, use_cache=True, return_dict=True)
        t = model.forward_tts_lm(input_ids=ids, past_key_values=tts_cache, use_cache=True, return_dict=True,
                                 lm_last_hidden_state=h.last_hidden_state, tts_text_masks=torch.ones_like(ids[:, -1:]))
    return (BaseModelOutputWithPast(last_hidden_state=h.last_hidden_state, past_key_values=lm_cache),
            BaseModelOutputWithPast(last_hidden_state=t.last_hidden_state, past_key_values=tts_cache))


def preset(model: Inference) -> tuple[dict, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, 90, (1, PROMPT), generator=g)
    lm, tts_lm = prefill(model, prompt)
    neg_lm, neg_tts_lm = prefill(model, torch.full((1, 1), NEG_ID))
    parts = {"lm": lm, "tts_lm": tts_lm, "neg_lm": neg_lm, "neg_tts_lm": neg_tts_lm}
    tensors = {}
    for name, part in parts.items():
        tensors[f"preset.{name}.hidden"] = part.last_hidden_state.contiguous()
        tensors.update(cache_tensors(f"preset.{name}", part.past_key_values))
    return parts, tensors


def generate_records(model: Inference) -> dict[str, torch.Tensor]:
    parts, out = preset(model)
    tokenizer = SimpleNamespace(bos_token_id=None, eos_token_id=PAD_ID + 1, pad_token_id=PAD_ID, pad_id=PAD_ID,
                                speech_start_id=93, speech_end_id=94, speech_diffusion_id=95,
                                convert_tokens_to_ids=lambda token: {"<|image_pad|>": NEG_ID}[token])
    text = torch.tensor([TEXT])
    for tag, run in RUNS.items():
        model.set_ddpm_inference_steps(run["steps"])
        if tag == "max":    # stop at the context length: the EOS classifier never fires
            saved = model.tts_eos_classifier.fc2.bias.clone()
            model.tts_eos_classifier.fc2.bias.data.fill_(-1e4)
        torch.manual_seed(run["seed"])
        res = model.generate(input_ids=torch.full((1, PROMPT), PAD_ID), attention_mask=torch.ones(1, PROMPT, dtype=torch.long),
                             tts_lm_input_ids=torch.full((1, PROMPT), PAD_ID),
                             tts_lm_attention_mask=torch.ones(1, PROMPT, dtype=torch.long), tts_text_ids=text,
                             max_new_tokens=run["max_new"], cfg_scale=run["cfg"], tokenizer=tokenizer,
                             generation_config={"do_sample": False}, verbose=False, show_progress_bar=False,
                             all_prefilled_outputs=copy.deepcopy(parts))
        if tag == "max":
            model.tts_eos_classifier.fc2.bias.data.copy_(saved)
        out[f"generate.{tag}.audio"] = res.speech_outputs[0]
        out[f"generate.{tag}.sequence_length"] = torch.tensor(res.sequences.shape[1])
        out[f"generate.{tag}.reached_max"] = res.reach_max_step_sample.to(torch.int64)
    return out


def main(out: Path) -> None:
    model = build()
    tensors = weights(model)
    tensors.update(lm_records(model))
    tensors.update(decoder_records(model))
    tensors.update(generate_records(model))
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata={"config": json.dumps(CONFIG), "runs": json.dumps(RUNS),
                                           "text": json.dumps(TEXT), "neg_id": str(NEG_ID), "pad_id": str(PAD_ID),
                                           "torch": torch.__version__})


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "fixtures" / "realtime.safetensors")
