"""docs/models.md, generated from the engine registry: what to download for each known model, where it
goes and under which licence. tests/test_model_docs.py fails when the committed file differs, so the
page follows the registry; regenerate it after changing an EngineSpec's models or licence:

    python -m mizuoto.nodes.pack.model_docs            # rewrites docs/models.md of this checkout
    python -m mizuoto.nodes.pack.model_docs --check    # exit status 1 if it is stale

What the Download entries cannot say (gated repositories, files that come from elsewhere) is in NOTES.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import MappingProxyType

from ..formats.download import layout
from .registry import Download, EngineSpec, discover

# spacy-pkuseg's model for Chatterbox Multilingual's Chinese (the pack layer never imports an engine:
# tests/test_model_docs.py checks these equal nodes/chatterbox/text.py's)
PKUSEG_URL = "https://github.com/explosion/spacy-pkuseg/releases/download/v0.0.26/spacy_ontonotes.zip"
PKUSEG_SHA256 = "b216e7f92de7ae285aeab8feba2faa8ea8216e5995ff6fb3d391cc8356db1bfe"

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"
GPT_SOVITS_COMMIT = "48b1a0169a28582a8984402f82cf438d3bfa6aca"   # the upstream commit tests/gpt_sovits/ checks
_GPT_SOVITS_TEXT = f"https://github.com/RVC-Boss/GPT-SoVITS/tree/{GPT_SOVITS_COMMIT}/GPT_SoVITS/text"

# Hand-written notes per engine id, placed under the engine's heading (read-only: module state stays constant).
NOTES: MappingProxyType[str, str] = MappingProxyType({
    "chatterbox": (
        "The five files of https://huggingface.co/ResembleAI/chatterbox as published (about 3.2 GB: "
        "t3_cfg.safetensors 2,129,653,744 B, s3gen.safetensors 1,056,484,620 B, ve.safetensors 5,695,784 B, "
        "conds.pt 107,374 B, tokenizer.json 25,470 B; sizes as a third party lists them, not checked here; the "
        "download checks each file against the hub's own sha256). `conds.pt` is the built-in voice: without it "
        "every request needs reference audio. **Outputs are not watermarked**: upstream embeds an inaudible "
        "Perth watermark (`resemble-perth`) in every output; this engine does not.\n\n"
        "`chatterbox_multilingual` is Chatterbox Multilingual from the same repository (the files "
        "`ChatterboxMultilingualTTS.from_pretrained` takes: t3_mtl23ls_v2.safetensors, s3gen.pt, ve.pt, "
        "grapheme_mtl_merged_expanded_v1.json, conds.pt, Cangjie5_TC.json; sizes not checked here, the download "
        "checks each file against the hub's sha256). Pick the language on Speak (23 codes; `auto` = no "
        "language tag, as upstream without `language_id`). Japanese needs `pip install pykakasi` and Chinese "
        "`pip install spacy-pkuseg` (both upstream dependencies; a clear error names them otherwise). Chinese "
        "also needs spacy-pkuseg's word segmentation model, which upstream downloads on first use and this "
        "pack does not (it is a zip on GitHub releases, which the downloads above cannot fetch): unpack the "
        f"files of {PKUSEG_URL} (sha256 {PKUSEG_SHA256}) into `spacy_ontonotes/` inside the model folder "
        "(as spacy-pkuseg's own download does; it reads `features.msgpack` and `weights.npz` from it); a "
        "`spacy_ontonotes/` that upstream already downloaded into `~/.pkuseg/` (or `$PKUSEG_HOME`) is used "
        "too, and without either Chinese is an error naming it. Hebrew "
        "diacritics and Russian stress marks are skipped, as upstream does without its optional dicta-onnx and "
        "russian-text-stresser."),
    "vibevoice": (
        "The model repository holds no voices: Microsoft publishes the Realtime model's voice presets (prefilled "
        "caches of a spoken prompt, not audio, so the model cannot clone an arbitrary recording) in the VibeVoice "
        "GitHub repository. The loader downloads them from the pinned commit into `voices/` and checks each against "
        "its git blob id (13 also against a pinned sha256); any `voices/<name>.pt` in upstream's format works, "
        "named `<name>` in the voice list. The tokenizer is Qwen2.5-0.5B's, as upstream's processor loads it. "
        "VibeVoice-1.5B (the long-form model; Large in the same layout works as a folder of its own) clones up to "
        "four speakers from reference audio (a Script node's native dialogue, or one reference_audio) and reads the "
        "whole script in one pass, never cut into sentences; lines are `Speaker 1: ...` (Speaker 1 speaks in the "
        "first voice). Its tokenizer is Qwen2.5-1.5B's, as upstream's processor loads it."),
    "hibari": (
        "Nothing to download: the weights (ONNX) and G2P lexicons ship inside the PyPI package `hibari-tts`, "
        "which `install.py` installs (ComfyUI-Manager runs it). The loader takes no model folder."),
    "fish_speech": (
        "**The hub repository is gated**: open https://huggingface.co/fishaudio/openaudio-s1-mini while logged "
        "in and accept its terms (the same for https://huggingface.co/fishaudio/s2-pro if its page asks), then "
        "give "
        "this machine a token: `hf auth login` (older huggingface_hub: `huggingface-cli login`) or the "
        "environment variable `HF_TOKEN` in the environment ComfyUI starts from. Without it the download stops "
        "with \"Hugging Face repository ... could not be listed\" (401 / 403)."),
    "gpt_sovits": (
        "A voice folder holds exactly one GPT `*.ckpt` and one SoVITS `*.pth` (the pretrained pair below, or "
        "your own fine-tuned pair). The shared models (`chinese-hubert-base/`, `chinese-roberta-wwm-ext-large/`, "
        "`sv/`, `text/`, `G2PWModel/`) are read from the voice folder itself if there, else from "
        "`models/TTS/gpt_sovits/pretrained_models/` beside it; the known models below download them into the "
        "voice folder.\n\n"
        "**English needs three files no hub repository holds**: `cmudict.rep`, `cmudict-fast.rep` and "
        "`engdict-hot.rep` (the lexicon upstream's `text/english.py` reads), from `GPT_SoVITS/text/` of the "
        f"GitHub repository RVC-Boss/GPT-SoVITS ({_GPT_SOVITS_TEXT}; any recent checkout of "
        "https://github.com/RVC-Boss/GPT-SoVITS has them). Put them in `text/` of the voice folder or of "
        "`pretrained_models/`:\n\n"
        "```\n"
        "models/TTS/gpt_sovits/pretrained_models/text/\n"
        "|-- cmudict.rep          <- RVC-Boss/GPT-SoVITS: GPT_SoVITS/text/cmudict.rep\n"
        "|-- cmudict-fast.rep     <- RVC-Boss/GPT-SoVITS: GPT_SoVITS/text/cmudict-fast.rep\n"
        "|-- engdict-hot.rep      <- RVC-Boss/GPT-SoVITS: GPT_SoVITS/text/engdict-hot.rep\n"
        "`-- g2pw/                   (only with G2PWModel/)\n"
        "    |-- polyphonic.rep      <- RVC-Boss/GPT-SoVITS: GPT_SoVITS/text/g2pw/polyphonic.rep\n"
        "    `-- polyphonic-fix.rep  <- RVC-Boss/GPT-SoVITS: GPT_SoVITS/text/g2pw/polyphonic-fix.rep\n"
        "```\n\n"
        "Without them English text (and English words inside Chinese text) is an error naming the missing "
        "files. Optional, for Chinese polyphones as upstream reads them: `G2PWModel/`, upstream's G2PW folder "
        "unchanged (`g2pW.onnx`, `config.py`, ...; upstream downloads it as "
        "https://www.modelscope.cn/models/kamiorinn/g2pw/resolve/master/G2PWModel_1.1.zip, unpacked and renamed "
        "to `G2PWModel/`), with the two `g2pw/*.rep` files above; without it Chinese uses pypinyin, as upstream "
        "does. `chinese-roberta-wwm-ext-large/` is needed for Chinese only."),
    "indextts2": (
        "Five hub repositories make one model folder: IndexTTS-2's own files at the top, the speaker model "
        "(`campplus/`), the vocoder (`bigvgan/`), the semantic codec (`semantic_codec/`, from amphion/MaskGCT) "
        "and the speech encoder (`w2v-bert-2.0/`) in subfolders."),
    "f5_tts": (
        "The files of `F5TTS_v1_Base/` in SWivid/F5-TTS land at the top of the model folder; the Vocos vocoder "
        "goes into `vocos/`."),
})


def _files(d: Download) -> str:
    return ", ".join(f"`{p}`" for p in d.include) if d.include != ("*",) else "every file"


def _lands(d: Download) -> str:
    where = f"`{d.into.strip('/')}/`" if d.into else "the top of the model folder"
    return where + (f" (`{d.strip.rstrip('/')}/` removed from the paths)" if d.strip else "")


def engine_section(spec: EngineSpec) -> list[str]:
    """The Markdown lines of one engine: notes, licence, then each known model's downloads and tree."""
    lines = [f"## {spec.display_name} (`{spec.engine_id}`)", "",
             f"Loader node: **{spec.loader_title}**. Licence: {spec.license or 'see the model cards'}.", ""]
    if spec.engine_id in NOTES:
        lines += [NOTES[spec.engine_id], ""]
    if spec.embedded:
        return lines
    lines += [f"Model folders: `models/TTS/{spec.engine_id}/<model>/`. Known models (the loader downloads a "
              "missing one):", ""]
    for name, downloads in spec.models.items():
        lines += [f"### {name}", "", "| repository | files | they go to |", "|---|---|---|"]
        lines += [f"| [{d.label}]({d.url}) | {_files(d)} | {_lands(d)} |" for d in downloads]
        lines += ["", "```", layout(downloads, f"models/TTS/{spec.engine_id}/{name}/"), "```", ""]
    return lines


HEADER = """\
# Models: what to download and where it goes

<!-- Generated from the engine registry by `python -m mizuoto.nodes.pack.model_docs`; do not edit by
hand (tests/test_model_docs.py fails when this file differs from what the registry produces). -->

A loader downloads a known model the first time it is used (every file checked against the hub's
sha256). This page is for installing by hand, offline, or checking a folder.

## Where model folders go

A model is a folder `<TTS folder>/<engine>/<model>/`; the model name is the folder's name. The TTS
folders are (`nodes/formats/folders.py`):

- **Inside ComfyUI**: every folder ComfyUI registers for `TTS`: `models/TTS/` in ComfyUI's models
  directory (this pack registers it at start-up) and any `TTS:` entry of `extra_model_paths.yaml`.
  A model name is looked up in each in turn; a missing known model downloads into the first one
  ComfyUI lists (an `extra_model_paths.yaml` entry, read before custom nodes load, comes before
  `models/TTS/`). `$MIZUOTO_MODELS_DIR` is not used inside ComfyUI.
- **Outside ComfyUI** (`python -m mizuoto speak`, the tests): `$MIZUOTO_MODELS_DIR` if set (the TTS
  folder itself: it holds `<engine>/<model>/`), else `~/.cache/mizuoto/models/TTS/`.

Symbolic links placed inside a TTS folder (models kept on another drive) are followed. Downloads come
from the Hugging Face hub (through `huggingface_hub`, which ComfyUI ships) and, for the few files a model
card points to on GitHub, from that repository at a pinned commit (each file checked against its git blob
id); `$MIZUOTO_HUB_MIRROR` names a local mirror folder instead. They land in a hidden
`.<model>.partial-*` folder and are renamed into place only when every file is complete and verified.

In the trees below, `<- repository: path` names the hub file each entry comes from
(`github.com/<owner>/<name>@<commit>` for GitHub); `*` matches any file name (`*` alone: every file of
the repository).

"""


def render(specs: list[EngineSpec] | None = None) -> str:
    """The text of docs/models.md for the registered engines."""
    lines: list[str] = []
    for spec in discover() if specs is None else specs:
        lines += engine_section(spec)
    return HEADER + "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/models.md from the engine registry.")
    parser.add_argument("--output", type=Path, default=DOC, help=f"file to write (default {DOC})")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            print(f"{args.output} is stale; run python -m mizuoto.nodes.pack.model_docs", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8", newline="\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
