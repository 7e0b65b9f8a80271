"""Record the long-form VibeVoice (1.5B / Large layout) golden fixture from transformers' own implementation (run
in the reference venv, never in the project's: transformers >= 5.3, diffusers for the noise scheduler):

- a tiny random `VibeVoiceForConditionalGeneration` (Qwen2 LM of 3 layers at width 32, 8-dim acoustic latents,
  16-dim semantic features, tokenizer ratios 2-3 = 6 samples a frame, a 2-layer diffusion head), its weights
  saved under the published microsoft/VibeVoice-1.5B checkpoint's names and its config in that config.json's
  layout (model_type "vibevoice", decoder_config / acoustic_tokenizer_config / semantic_tokenizer_config /
  diffusion_head_config);
- per case (one speaker; two speakers with clips of different lengths): the script, the reference clips at
  24 kHz mono, the prompt upstream's processor builds (the original VibeVoice prompt layout: system prompt,
  ` Voice input:` with one ` Speaker N:` + `<|vision_start|>` + one `<|vision_pad|>` per latent frame +
  `<|vision_end|>` per voice, ` Text input:` with the script's lines, ` Speech output:` + `<|vision_start|>`),
  transformers' `VibeVoiceProcessor` ids and audio tensors, and `generate` seeded once: the generated token
  ids, each frame's sampled latent, and the audio.

The LM head is untied here (as in the Large model; the 1.5B ties it to the embedding), so its rows can make each
step a speech frame or the end: a tiny random model otherwise wanders among the four allowed tokens.

    $VIBEVOICE_HF_VENV/bin/python tests/vibevoice/make_longform_fixtures.py [OUT]

OUT defaults to tests/vibevoice/fixtures/longform.safetensors.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers
from diffusers import DPMSolverMultistepScheduler
from safetensors.torch import save_file
from transformers import PreTrainedTokenizerFast, VibeVoiceConfig, VibeVoiceForConditionalGeneration, VibeVoiceProcessor
from transformers.models.vibevoice_acoustic_tokenizer import VibeVoiceAcousticTokenizerFeatureExtractor

sys.path.insert(0, str(Path(__file__).parent))
from make_longform_tokenizer_fixtures import ACOUSTIC, DEPTHS, RATIOS, SEMANTIC, upstream_name  # noqa: E402

HERE = Path(__file__).parent
TOKENIZER = HERE / "fixtures" / "tokenizer.json"
HOP = 6
SYSTEM = (" Transform the text provided by various speakers into speech output, utilizing the distinct voice of "
          "each respective speaker.\n")
SPEECH_BIAS = 1.0   # chosen so case "one" runs to max_new_tokens and case "two" ends on <|endoftext|>
BOS, EOS_AUDIO, PAD_AUDIO, EOS = 3, 4, 5, 0      # the tiny tokenizer's <|vision_start|>, _end|>, _pad|>, <|endoftext|>
CONFIG = {
    "model_type": "vibevoice", "acoustic_vae_dim": 8, "semantic_vae_dim": 16, "tie_word_embeddings": False,
    "decoder_config": {"model_type": "qwen2", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 400,
                       "max_position_embeddings": 512, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                       "tie_word_embeddings": False, "use_sliding_window": False, "hidden_act": "silu"},
    "diffusion_head_config": {"model_type": "vibevoice_diffusion_head", "hidden_size": 32, "head_layers": 2,
                              "head_ffn_ratio": 3.0, "rms_norm_eps": 1e-5, "latent_size": 8,
                              "prediction_type": "v_prediction", "ddpm_num_steps": 1000,
                              "ddpm_num_inference_steps": 20, "ddpm_beta_schedule": "cosine",
                              "diffusion_type": "ddpm", "speech_vae_dim": 8},
    "acoustic_tokenizer_config": ACOUSTIC,
    "semantic_tokenizer_config": SEMANTIC,
}
CASES = {
    "one": {"script": "Speaker 1: Hello there, this is a test.", "clips": [40], "seed": 11, "steps": 5, "cfg": 1.3,
            "max_new_tokens": 40},
    "two": {"script": "Speaker 1: Hi, how are you?\nSpeaker 2: Fine, thanks!\n\nSpeaker 1: Good.",
            "clips": [52, 29], "seed": 5, "steps": 3, "cfg": 2.0, "max_new_tokens": 12},
}


def head_name(name: str) -> str:
    """transformers' diffusion head parameter name -> upstream's `prediction_head` one."""
    for a, b in (("timestep_proj.fc1.", "t_embedder.mlp.0."), ("timestep_proj.fc2.", "t_embedder.mlp.2."),
                 ("final_layer.linear_1.", "final_layer.adaLN_modulation.1."),
                 ("final_layer.linear_2.", "final_layer.linear.")):
        if name.startswith(a):
            return b + name[len(a):]
    parts = name.split(".")
    if parts[0] == "layers" and parts[2] == "linear":
        return f"layers.{parts[1]}.adaLN_modulation.1.{parts[-1]}"
    return name


def checkpoint_name(name: str) -> str | None:
    """transformers' parameter name -> the published checkpoint's (None: not stored, the tied LM head)."""
    connector = {"linear_1": "fc1", "act": "norm", "linear_2": "fc2"}
    if name == "lm_head.weight":
        return None if CONFIG["tie_word_embeddings"] else name
    if name.startswith("model.language_model."):
        return name
    for side in ("encoder", "decoder"):
        if name.startswith(f"model.audio_tower.{side}."):
            return "model.acoustic_tokenizer." + upstream_name(name[len(f"model.audio_tower.{side}."):], side)
    if name.startswith("model.semantic_tokenizer_encoder."):
        return "model.semantic_tokenizer." + upstream_name(name[len("model.semantic_tokenizer_encoder."):], "encoder")
    for ours, theirs in (("multi_modal_projector", "acoustic_connector"), ("semantic_connector", "semantic_connector")):
        if name.startswith(f"model.{ours}."):
            a, b = name[len(f"model.{ours}."):].split(".")
            return f"model.{theirs}.{connector[a]}.{b}"
    if name.startswith("model.diffusion_head."):
        return "model.prediction_head." + head_name(name[len("model.diffusion_head."):])
    return {"model.latent_scaling_factor": "model.speech_scaling_factor",
            "model.latent_bias_factor": "model.speech_bias_factor"}[name]


def build() -> VibeVoiceForConditionalGeneration:
    q = CONFIG["decoder_config"]
    common = dict(channels=1, kernel_size=7, num_filters=4, downsampling_ratios=RATIOS, depths=DEPTHS,
                  rms_norm_eps=1e-5, layer_scale_init_value=1e-6)
    config = VibeVoiceConfig(
        text_config={k: v for k, v in q.items() if k != "use_sliding_window"},
        audio_config={"model_type": "vibevoice_acoustic_tokenizer", "hidden_size": 8, "vae_std": 0.625, **common},
        semantic_model_config={"model_type": "vibevoice_acoustic_tokenizer_encoder", "hidden_size": 16, **common},
        diffusion_head_config={"num_hidden_layers": 2, "intermediate_size": 96, "rms_norm_eps": 1e-5},
        audio_bos_token_id=BOS, audio_eos_token_id=EOS_AUDIO, audio_token_id=PAD_AUDIO, eos_token_id=EOS,
        pad_token_id=EOS, tie_word_embeddings=False)
    model = VibeVoiceForConditionalGeneration(config).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "model.latent_scaling_factor":
                p.fill_(1.7)
            elif name == "model.latent_bias_factor":
                p.fill_(-0.2)
            elif name.endswith(("norm.weight", ".act.weight")) or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if name.endswith("gamma") else 0.2))
        # the LM head reads one axis: `<|vision_pad|>` +, `<|endoftext|>` -, the other two allowed tokens 0, so each
        # step is a speech frame or the end; a speech frame's input and the prompt's last token lean along that
        # axis (the connectors' output bias), so speech runs several frames before the sign turns
        head = model.lm_head.weight
        head[[BOS, EOS_AUDIO, PAD_AUDIO, EOS]] = 0.0
        head[PAD_AUDIO, 0] = 1.0
        head[EOS, 0] = -1.0
        model.model.language_model.embed_tokens.weight[BOS, 0] += SPEECH_BIAS
        for connector in (model.model.multi_modal_projector, model.model.semantic_connector):
            connector.linear_2.bias[0] += SPEECH_BIAS
    assert model.lm_head.weight.data_ptr() != model.model.language_model.embed_tokens.weight.data_ptr()
    return model


def prompt(script: str, clips: int) -> str:
    """The prompt string upstream's processor tokenizes (one `<|vision_pad|>` per clip; the processor expands it)."""
    lines = [line.strip() for line in script.strip().split("\n") if line.strip()]
    parsed = []
    for line in lines:
        head, text = line.split(":", 1)
        parsed.append((int(head.split()[1]), " " + text.strip()))
    low = min(s for s, _ in parsed)
    parsed = [(s - 1 if low > 0 else s, t) for s, t in parsed]
    voices = "".join(f" Speaker {k}:<|vision_start|><|vision_pad|><|vision_end|>\n" for k in range(clips))
    text = "".join(f" Speaker {s}:{t}\n" for s, t in parsed)
    return SYSTEM + " Voice input:\n" + voices + " Text input:\n" + text + " Speech output:\n<|vision_start|>"


def main(out: Path) -> None:
    model = build()
    tensors: dict[str, torch.Tensor] = {}
    for name, p in model.state_dict().items():
        key = checkpoint_name(name)
        if key is not None:
            tensors["weight." + key] = p.detach().clone()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    processor = VibeVoiceProcessor(VibeVoiceAcousticTokenizerFeatureExtractor(pad_to_multiple_of=HOP), tokenizer)
    meta = {"config": json.dumps(CONFIG), "transformers": transformers.__version__, "torch": torch.__version__}

    sampled: list[torch.Tensor] = []
    original = model._sample_audio_latent

    def record(*args, **kwargs):  # each frame's latent, as generate samples it
        latent = original(*args, **kwargs)
        sampled.append(latent.detach().clone())
        return latent

    model._sample_audio_latent = record
    gen = torch.Generator().manual_seed(21)
    for tag, case in CASES.items():
        clips = [torch.sin(torch.arange(n) * (0.3 + 0.2 * i)) * 0.4 + 0.05 * torch.randn(n, generator=gen)
                 for i, n in enumerate(case["clips"])]
        text = prompt(case["script"], len(clips))
        inputs = processor(text=text, audio=[c.numpy() for c in clips], sampling_rate=24000, return_tensors="pt")
        sampled.clear()
        torch.manual_seed(case["seed"])
        with torch.no_grad():
            result = model.generate(**inputs, max_new_tokens=case["max_new_tokens"], guidance_scale=case["cfg"],
                                    num_diffusion_steps=case["steps"], return_dict_in_generate=True,
                                    noise_scheduler=DPMSolverMultistepScheduler(
                                        beta_schedule="squaredcos_cap_v2", prediction_type="v_prediction"))
        prompt_len = inputs["input_ids"].shape[1]
        tokens = result.sequences[0, prompt_len:]
        print(tag, "prompt", prompt_len, "tokens", tokens.tolist(), "frames", len(sampled))
        for i, clip in enumerate(clips):
            tensors[f"{tag}.clip{i}"] = clip
        tensors[f"{tag}.input_ids"] = inputs["input_ids"][0]
        tensors[f"{tag}.input_values"] = inputs["input_values"]
        tensors[f"{tag}.padding_mask"] = inputs["padding_mask"].to(torch.int64)
        tensors[f"{tag}.tokens"] = tokens
        tensors[f"{tag}.latents"] = torch.cat(sampled, 1)[0] if sampled else torch.zeros(0, 8)
        tensors[f"{tag}.audio"] = result.audio[0] if result.audio[0] is not None else torch.zeros(1, 0)
        meta[f"{tag}.case"] = json.dumps(case)
        meta[f"{tag}.prompt"] = text
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out), metadata=meta)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "fixtures" / "longform.safetensors")
