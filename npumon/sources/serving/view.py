"""The serving figures as one line of text, for `npumon check`'s table and `npumon top`: from a Snapshot's host
or a /status document alike (plain values and the figures' dict). Pure."""

import math
from typing import Any, Callable, List, Mapping, Optional, Tuple

from .engines import ENGINES, Engine

def _duration(seconds: float) -> str:
    return "{:.0f}ms".format(seconds * 1000) if seconds < 1 else "{:.2f}s".format(seconds)


# (figure, label, format, whether the engine exports it)
_SHOWN: Tuple[Tuple[str, str, Callable[[float], str], Callable[[Engine], bool]], ...] = (
    ("batch_size", "batch", "{:.1f}".format, lambda e: e.running is not None or e.batch is not None),
    ("request_latency_seconds", "latency", _duration, lambda e: e.e2e is not None),
    ("time_to_first_token_seconds", "first token", _duration, lambda e: e.ttft is not None),
    ("requests_per_second", "requests/s", "{:.1f}".format, lambda e: e.completed is not None),
    ("generation_tokens_per_second", "tokens/s", "{:.0f}".format, lambda e: e.generation_tokens is not None),
    ("model_load_seconds", "model load", "{:.0f}s".format, lambda e: e.model_load is not None),
)


def serving_text(queue_depth: Optional[float], figures: Optional[Mapping[str, Any]]) -> Optional[str]:
    """"vllm: queue 62, batch 4.0, latency 14.00s, ..." with each figure the engine exports ("-" until known:
    the rates need a second poll); None where no serving source ran."""
    figures = figures or {}
    engine = ENGINES.get(figures.get("engine") or "")
    if queue_depth is None and engine is None:
        return None
    parts: List[str] = ["queue {}".format("-" if queue_depth is None else "{:.0f}".format(queue_depth))]
    for name, label, shown, exported in _SHOWN:
        if engine is not None and exported(engine):
            value = figures.get(name)
            known = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            parts.append("{} {}".format(label, shown(value) if known else "-"))
    return "{}: {}".format(engine.name if engine is not None else "server", ", ".join(parts))
