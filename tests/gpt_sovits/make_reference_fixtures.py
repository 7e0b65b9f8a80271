"""Record librosa.load(path, sr=16000) (upstream's TTS._set_prompt_semantic) on a 44.1 kHz stereo PCM file
whose samples test_reference.py regenerates from a seed (integers: the same on every CPU).

    "$REF_VENV"/bin/pip install librosa soundfile
    "$REF_VENV"/bin/python tests/gpt_sovits/make_reference_fixtures.py

Writes fixtures/reference_44k.json: every 97th sample of the 16 kHz result and its length.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import librosa
import soundfile as sf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_reference import RATE, STEP, stereo_pcm  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "ref.wav"
    sf.write(path, stereo_pcm().T, RATE, subtype="PCM_16")
    wav16, _ = librosa.load(path, sr=16000)
(HERE / "fixtures" / "reference_44k.json").write_text(json.dumps(
    {"librosa": librosa.__version__, "length": int(wav16.shape[0]), "every_97th": wav16[::STEP].tolist()}))
print(wav16.shape)
