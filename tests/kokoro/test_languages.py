"""Kokoro's non-English languages go through misaki as KPipeline's do; without misaki (or its extras) the
request fails with a ValueError naming the language and the `pip install` that brings it."""
import sys

import pytest

from mizuoto.nodes.kokoro.text import OPTIONAL, other


@pytest.mark.parametrize("language", sorted(OPTIONAL))
def test_a_missing_misaki_is_named_with_its_install_command(language, monkeypatch):
    for name in ("misaki", "misaki.ja", "misaki.zh", "misaki.espeak"):
        monkeypatch.setitem(sys.modules, name, None)        # import fails as if not installed
    with pytest.raises(ValueError) as e:
        other(language)
    assert repr(language) in str(e.value) and f"pip install {OPTIONAL[language][1]}" in str(e.value)
