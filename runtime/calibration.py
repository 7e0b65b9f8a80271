"""Per-component corrections of working-memory estimates, learned from measurements.

When a phase's measured working memory exceeds its estimate, the ratio (with a 10 % margin, at most
16) is remembered per `engine:component` and multiplies later estimates. Stored as
`{"version": 2, "factors": {"engine:component": ratio}}`; a file of another version, or one that
cannot be read, is ignored with a warning: calibration only ever makes estimates safer, so losing
it must never stop a request.
"""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import threading
from pathlib import Path

from .paths import cache_dir

log = logging.getLogger(__name__)

VERSION = 2
MARGIN = 1.1
MAX_FACTOR = 16.0


class Calibration:
    """Factors by `engine:component`, loaded at construction, written by `save()`."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else cache_dir() / "memory" / "calibration.json"
        self._lock = threading.Lock()       # phases on several GPU jobs observe concurrently
        self._factors = self._load()

    def factor(self, key: str) -> float:
        """The multiplier for estimates of `key`; 1.0 when never calibrated."""
        return self._factors.get(key, 1.0)

    def observe(self, key: str, estimate_bytes: int, measured_bytes: int) -> float | None:
        """Record a measurement; returns the new factor when it raised the stored one, else None."""
        if measured_bytes <= estimate_bytes:
            return None
        ratio = measured_bytes / estimate_bytes if estimate_bytes > 0 else MAX_FACTOR
        factor = min(ratio * MARGIN, MAX_FACTOR)
        with self._lock:
            if factor <= self.factor(key):
                return None
            self._factors[key] = factor
        return factor

    def save(self) -> None:
        """Write atomically (temporary file, then rename); a failure is logged, not raised."""
        with self._lock:
            data = {"version": VERSION, "factors": dict(sorted(self._factors.items()))}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, indent=1)
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as e:
            log.warning("memory calibration not saved to %s: %s", self.path, e)

    def _load(self) -> dict[str, float]:
        try:
            return self._read()
        except (OSError, ValueError, RecursionError, OverflowError, TypeError) as e:
            log.warning("ignoring memory calibration %s: %s: %s", self.path, type(e).__name__, str(e)[:200])
            return {}

    def _read(self) -> dict[str, float]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        if not isinstance(data, dict) or data.get("version") != VERSION:
            version = data.get("version") if isinstance(data, dict) else None
            log.warning("ignoring memory calibration %s: format version %r, expected %d",
                        self.path, version, VERSION)
            return {}
        factors = data.get("factors")
        if not isinstance(factors, dict) or not all(_is_factor(v) for v in factors.values()):
            log.warning("ignoring memory calibration %s: \"factors\" must map names to numbers >= 1",
                        self.path)
            return {}
        return {str(k): min(float(v), MAX_FACTOR) for k, v in factors.items()}


def _is_factor(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 1)
