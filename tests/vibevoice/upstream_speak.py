"""Speak with upstream VibeVoice-Realtime exactly as its command line does (demo/realtime_model_inference_from_file.py
on the CPU), on a model folder in the published layout: run in the reference venv, never in the project's.

    VIBEVOICE_SRC=<VibeVoice checkout> $VIBEVOICE_VENV/bin/python tests/vibevoice/upstream_speak.py FOLDER CASES OUT

CASES: a JSON list of {"text", "voice", "seed", "steps", "cfg_scale"}; OUT: a safetensors file of each case's audio
("audio.<i>") and the text ids the processor made ("ids.<i>"). The folder's tokenizer.json stands for Qwen/Qwen2.5-0.5B's, which upstream's processor fetches
from the hub: it is copied into a sibling folder Qwen2.5-0.5B/ (the processor requires "qwen" in the name) and a
preprocessor_config.json naming that folder as `language_model_pretrained_name` is written into the model folder
(the published one names the hub repository).
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.environ["VIBEVOICE_SRC"])
from vibevoice.modular.modeling_vibevoice_streaming_inference import (  # noqa: E402
    VibeVoiceStreamingForConditionalGenerationInference as Inference)
from vibevoice.processor.vibevoice_streaming_processor import VibeVoiceStreamingProcessor  # noqa: E402


def main(folder: Path, cases: list[dict], out: Path) -> None:
    torch.set_num_threads(1)
    qwen = folder.parent / "Qwen2.5-0.5B"
    qwen.mkdir(exist_ok=True)
    shutil.copy(folder / "tokenizer.json", qwen / "tokenizer.json")
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"processor_class": "VibeVoiceStreamingProcessor", "speech_tok_compress_ratio": 3200, "db_normalize": True,
         "language_model_pretrained_name": str(qwen)}))
    processor = VibeVoiceStreamingProcessor.from_pretrained(str(folder))
    model = Inference.from_pretrained(str(folder), torch_dtype=torch.float32, device_map="cpu",
                                      attn_implementation="sdpa")
    model.eval()
    # from_pretrained leaves the weights where safetensors maps them, at the file's offsets; a CPU matmul kernel
    # sums a buffer at an odd offset in another order, which alone moves the last bits of upstream's own audio
    # (at most 8.3e-7 here on these cases). In fresh allocations, as our loader places them, it is bit-exact.
    for t in list(model.parameters()) + list(model.buffers()):
        t.data = t.data.clone()
    audio = {}
    for i, case in enumerate(cases):
        model.set_ddpm_inference_steps(num_steps=case["steps"])
        script = case["text"].strip().replace("’", "'").replace("“", '"').replace("”", '"')
        prompt = torch.load(folder / "voices" / f"{case['voice']}.pt", map_location="cpu", weights_only=False)
        inputs = processor.process_input_with_cached_prompt(text=script, cached_prompt=prompt, padding=True,
                                                            return_tensors="pt", return_attention_mask=True)
        torch.manual_seed(case["seed"])
        outputs = model.generate(**inputs, max_new_tokens=None, cfg_scale=case["cfg_scale"],
                                 tokenizer=processor.tokenizer, generation_config={"do_sample": False}, verbose=False,
                                 show_progress_bar=False, all_prefilled_outputs=copy.deepcopy(prompt))
        audio[f"audio.{i}"] = outputs.speech_outputs[0].float().reshape(-1).contiguous()
        audio[f"ids.{i}"] = inputs["tts_text_ids"][0].contiguous()
    save_file(audio, str(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3]))
