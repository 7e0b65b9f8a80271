"""Upstream's English phonemes for the G2P comparison, recorded in the reference venv:

    "$REF_VENV"/bin/python tests/kokoro/g2p_record.py

For every sentence of data/g2p_sentences.txt and both accents: `KPipeline(lang_code='a' | 'b',
model=False)(sentence)` (kokoro 0.9.4, misaki 0.9.4 with spaCy's en_core_web_sm, espeak made unavailable as
in make_fixtures.py, so words outside the lexicons are left out as upstream does without espeak), the
phonemes of its chunks joined by a space. Writes fixtures/g2p_misaki.json; test_g2p.py compares ours.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sentences() -> list[str]:
    lines = (HERE / "data" / "g2p_sentences.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def main() -> None:
    sys.path.insert(0, str(HERE))
    from make_fixtures import no_espeak, spacy_model
    spacy_model()
    no_espeak()
    import kokoro
    import misaki
    from kokoro import KPipeline
    out: dict = {"_versions": {"kokoro": kokoro.__version__, "misaki": misaki.__version__}}
    for code in "ab":
        pipeline = KPipeline(lang_code=code, repo_id="hexgrad/Kokoro-82M", model=False)
        out[code] = [" ".join(r.phonemes for r in pipeline(s)) for s in sentences()]
    (HERE / "fixtures" / "g2p_misaki.json").write_text(json.dumps(out, ensure_ascii=False, indent=0),
                                                       encoding="utf-8")
    print(f"{len(out['a'])} sentences x 2 accents")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
