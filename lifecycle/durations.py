"""Go duration strings (``30s``, ``5m``, ``1h30m``, ``1.5h``) as used in timeouts and drain.

Why Go's syntax: the fields sit in Kubernetes objects next to other Go durations and operators
write them the same way everywhere. The regular expression below is also emitted as the CRD's
OpenAPI ``pattern``, so the API server and ``nwb plan`` accept exactly the same strings. A sign is
not accepted: every duration here is a deadline or a grace period.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from functools import lru_cache

# One "<number><unit>" segment; Go accepts "1.", ".5" and "1.5" as the number.
_SEGMENT = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)"
GO_DURATION_PATTERN = rf"^(0|({_SEGMENT})+)$"
_GO_DURATION = re.compile(GO_DURATION_PATTERN)
_SEGMENTS = re.compile(_SEGMENT)

_UNIT_SECONDS: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),  # U+00B5 micro sign
    "μs": Decimal("1e-6"),  # U+03BC greek mu
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def is_go_duration(text: str) -> bool:
    """True when ``text`` is an unsigned Go duration."""
    return _GO_DURATION.fullmatch(text) is not None


@lru_cache(maxsize=256)  # the same few timeouts, parsed for every node of a batch
def parse_duration(text: str) -> timedelta:
    """Parse an unsigned Go duration.

    Raises:
        ValueError: ``text`` is not a Go duration.
    """
    if not is_go_duration(text):
        raise ValueError(f'"{text}" is not a Go duration (e.g. 30s, 5m, 1h30m)')
    seconds = sum(
        (Decimal(m.group(1)) * _UNIT_SECONDS[m.group(3)] for m in _SEGMENTS.finditer(text)),
        Decimal(0),
    )
    return timedelta(seconds=float(seconds))
