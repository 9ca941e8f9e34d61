"""The last lines of each failed attempt, kept by the controller after its pod is gone.

Why: a failed package pod is kept only for a while (``stages.NodeInput.failed_pod_ttl``) and a
real cluster may lose it sooner (node drained, pod garbage-collected); ``nwb logs`` must still say
which task failed and what it printed. The controller keeps one ``FailureTail`` per failed attempt
in a per-node ConfigMap; this module is its bounded bookkeeping (pure).

Bounds: one tail is at most ``MAX_TAIL_BYTES`` of JSON (oldest lines dropped first) and the newest
``KEEP_ATTEMPTS`` tails per (CR, package) are kept. The lines come from the agent's result
(``AgentResult.output``), which the agent redacts (secretVars and no_log vars) before it prints.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pydantic import Field, ValidationError

from lifecycle.wire import WireModel

MAX_TAIL_BYTES = 8192
KEEP_ATTEMPTS = 5
_UNSAFE_KEY = re.compile(r"[^-._a-zA-Z0-9]+")


class FailureTail(WireModel):
    cr: str = Field(description="NodeWright name.")
    package: str = Field(description="Package name.")
    version: str = Field(description="Package version.")
    stage: str = Field(description="Stage that failed.")
    attempt: int = Field(default=0, description="Attempt number within the stage.")
    task: str = Field(default="", description="The failing task.")
    message: str = Field(default="", description="Why it failed.")
    time: str = Field(default="", description="RFC 3339 when the failure was recorded.")
    pod: str = Field(default="", description="The pod that ran the attempt.")
    lines: list[str] = Field(default_factory=list, description="Last lines of the run's log.")


def tail_key(tail: FailureTail) -> str:
    """The ConfigMap data key of ``tail``: unique per (CR, package, version, stage, attempt,
    time), made of the characters a key allows."""
    raw = ".".join((tail.cr, tail.package, tail.version, tail.stage, f"a{tail.attempt}", tail.time))
    return _UNSAFE_KEY.sub("-", raw)[:253]


def _dump(tail: FailureTail) -> str:
    return json.dumps(tail.to_wire(), separators=(",", ":"), ensure_ascii=False)


def bounded(tail: FailureTail) -> str:
    """``tail`` as JSON of at most ``MAX_TAIL_BYTES`` (oldest lines, then the message, cut)."""
    text = _dump(tail)
    lines = list(tail.lines)
    while len(text.encode()) > MAX_TAIL_BYTES and lines:
        lines = lines[1:]
        text = _dump(tail.model_copy(update={"lines": lines}))
    if len(text.encode()) > MAX_TAIL_BYTES:
        text = _dump(tail.model_copy(update={"lines": [], "message": tail.message[:1000]}))
    return text


def parse(text: str) -> FailureTail | None:
    try:
        return FailureTail.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        return None


def merged(data: Mapping[str, str], tail: FailureTail) -> dict[str, str]:
    """``data`` with ``tail`` added and the oldest tails of its (CR, package) beyond
    ``KEEP_ATTEMPTS`` dropped (other CRs' and packages' tails are left alone)."""
    out = dict(data)
    out[tail_key(tail)] = bounded(tail)
    same = sorted(
        (parsed.time, key)
        for key, text in out.items()
        if (parsed := parse(text)) is not None
        and (parsed.cr, parsed.package) == (tail.cr, tail.package)
    )
    for _, key in same[:-KEEP_ATTEMPTS]:
        del out[key]
    return out


def tails_of(data: Mapping[str, str], cr: str, package: str = "") -> list[FailureTail]:
    """The tails of ``cr`` (and ``package`` when given), oldest first."""
    found = [
        t
        for text in data.values()
        if (t := parse(text)) is not None and t.cr == cr and (not package or t.package == package)
    ]
    return sorted(found, key=lambda t: (t.time, t.package, t.attempt))
