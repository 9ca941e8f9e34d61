"""Kubernetes resource quantities (``100m``, ``0.5``, ``128Mi``, ``1e3``, ``2G``).

Why here: ``resources`` in a package must be checked (valid, positive, limit >= request) before a
pod is ever built, offline in ``nwb plan`` as well as in the controller, and ``lifecycle`` may not
import the Kubernetes client. Values are compared as exact decimals.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+|)$"
)


def parse_quantity(text: str) -> Decimal:
    """Parse a Kubernetes quantity into an exact decimal in base units.

    Raises:
        ValueError: ``text`` is not a Kubernetes quantity.
    """
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f'"{text}" is not a Kubernetes quantity (e.g. 500m, 2, 512Mi, 1Gi)')
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f'"{text}" is not a Kubernetes quantity') from exc
    suffix = match.group("suffix")
    if suffix in _BINARY:
        return number * (Decimal(1024) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))
