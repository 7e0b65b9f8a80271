"""Record upstream VibeVoice-Realtime's command-line output for the Speak-pipeline cases (test_pipeline.py): the
tiny recorded model in the published layout with a Qwen-style tokenizer.json (tiny.py), spoken by
upstream_speak.py in the reference venv. Run in the project's venv:

    VIBEVOICE_VENV=<reference venv> VIBEVOICE_SRC=<VibeVoice checkout> python tests/vibevoice/make_pipeline_fixtures.py

writes tests/vibevoice/fixtures/pipeline.safetensors (a few kB).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "fixtures" / "pipeline.safetensors"

# Defaults (5 steps, cfg 1.5) and other settings; numbers, times, currency, abbreviations, typographic quotes,
# newlines and multi-sentence Chinese (the tiny vocabulary reads each Chinese character as <|endoftext|>, so an
# inserted space or a cut between the sentences would show)
CASES = [
    {"text": "Dr. Smith paid $5.99 at 10:30. Then he left!\nSee you in 2024.", "voice": "en-Alice_woman", "seed": 3,
     "steps": 5, "cfg_scale": 1.5},
    {"text": "It’s “quoted” text, said Wayne; 50% of it.", "voice": "en-Wayne_man", "seed": 7, "steps": 3,
     "cfg_scale": 2.0},
    {"text": "今天天气很好。我们去公园散步吧！", "voice": "en-Alice_woman", "seed": 1, "steps": 5, "cfg_scale": 1.5},
]


# The EOS bias holds every stop decision at least 0.3 in logit from the threshold (the recording's -0.15 leaves
# 0.001 on some seeds), and 160 positions let each case read its whole text: every case ends at the context length.
EOS_BIAS = -0.8
MAX_POSITIONS = 160


def write_folder(folder: Path) -> Path:
    sys.path.insert(0, str(HERE.parent))
    from vibevoice.tiny import qwen_char_tokenizer, write_tiny
    return write_tiny(folder, tokenizer=qwen_char_tokenizer, eos_bias=EOS_BIAS, max_positions=MAX_POSITIONS)


def record(out: Path) -> Path:
    """Upstream's audio for CASES into `out` (the reference venv named by $VIBEVOICE_VENV, code by $VIBEVOICE_SRC)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_folder(Path(tmp) / "VibeVoice-Realtime-tiny")
        cases = Path(tmp) / "cases.json"
        cases.write_text(json.dumps(CASES, ensure_ascii=False))
        subprocess.run([str(Path(os.environ["VIBEVOICE_VENV"], "bin", "python")), str(HERE / "upstream_speak.py"),
                        str(folder), str(cases), str(out)], check=True, timeout=600, capture_output=True,
                       env={"VIBEVOICE_SRC": os.environ["VIBEVOICE_SRC"], "PATH": "/usr/bin:/bin",
                            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    return out


if __name__ == "__main__":
    record(OUT)
    print(f"wrote {OUT}")
