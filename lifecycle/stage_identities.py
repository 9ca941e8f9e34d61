"""Hashes, identities and small value helpers the planner records on the node.

What an entry records must stay stable across controller versions: the config hash and per-key
digests of what a config stage applies, the content a package is pinned to, the identity of one
change (``resource_id``), the stages one pod runs (``chain``), the retry back-off and the time
format. Callers import them from ``lifecycle.stages``; they live below its sections so each
section can use them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import memo
from lifecycle.nodestate import Stage
from lifecycle.spec import NodeWright, Package

# First retry after 30 s, doubling, capped at 10 min: a flapping registry or apt mirror gets a
# few minutes to recover without a broken role hammering the node.
BACKOFF_BASE = timedelta(seconds=30)
BACKOFF_MAX = timedelta(minutes=10)
# A node annotation holds every entry; a long Ansible message must not crowd it.
MESSAGE_MAX = 240
# 64 bits are plenty to notice a change; the hash is stored per entry on the node.
CONFIG_HASH_CHARS = 16
KEY_DIGEST_CHARS = 10
RESOURCE_ID_CHARS = 24
# The changed-key name of a secretVars reference change (a configInterrupts glob may match it).
SECRET_VARS_KEY = "secretVars"
# The non-interrupt stages one pod runs from each entry stage (``chain`` adds their checks).
CHAINS: Mapping[Stage, tuple[Stage, ...]] = {
    Stage.APPLY: (Stage.APPLY, Stage.CONFIG),
    Stage.UPGRADE: (Stage.UPGRADE, Stage.CONFIG),
    Stage.CONFIG: (Stage.CONFIG,),
    Stage.POST_INTERRUPT: (Stage.POST_INTERRUPT,),
    Stage.UNINSTALL: (Stage.UNINSTALL,),
}


def stable_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(package: Package, secret_data: str = "") -> str:
    """Hash of what a config stage applies: ``vars``, ``configMap``, the ``secretVars`` refs and
    the data of those Secrets (``secret_data``: a digest the controller reads), and the tag
    selection (``tags``/``skipTags`` change which of the role's tasks run).

    The refs, data and tags join the payload only when set, so the hash of a package without
    them is the one earlier versions recorded (no fleet-wide config run after an upgrade).
    Kept per package object (``lifecycle.memo``): every node of a batch asks for the same one.
    """
    return _config_hash(package, secret_data)


@memo.by_identity
def _config_hash(package: Package, secret_data: str) -> str:
    payload: dict[str, Any] = {"vars": package.vars, "configMap": package.config_map}
    if package.secret_vars:
        payload["secretVars"] = [ref.to_wire() for ref in package.secret_vars]
    if secret_data:
        payload["secretData"] = secret_data
    if package.tags:
        payload["tags"] = package.tags
    if package.skip_tags:
        payload["skipTags"] = package.skip_tags
    return sha(stable_json(payload))[:CONFIG_HASH_CHARS]


def content_id(package: Package) -> str:
    """What the package's image content is pinned to: its digest, or ``-`` for the tag."""
    return package.digest or "-"


def config_digests(package: Package, secret_data: str = "") -> dict[str, str]:
    """Per var name / configMap key digest; ``configInterrupts`` globs match these names."""
    names = set(package.vars) | set(package.config_map)
    out: dict[str, str] = {}
    for name in sorted(names):
        value = {"var": package.vars.get(name), "file": package.config_map.get(name)}
        out[name] = sha(stable_json(value))[:KEY_DIGEST_CHARS]
    if package.secret_vars:
        refs = [ref.to_wire() for ref in package.secret_vars]
        out[SECRET_VARS_KEY] = sha(stable_json([refs, secret_data]))[:KEY_DIGEST_CHARS]
    return out


def resource_id(cr: NodeWright, package: str, version: str, hash_: str) -> str:
    """Stable identity of one change (a cycle), handed to the agent to guard interrupts.

    The generation makes a second cycle with identical content (A -> B -> A) a new identity, so
    the agent's run-once flag of the first cycle does not swallow the second cycle's reboot.
    """
    meta = cr.metadata
    text = "/".join((meta.uid, meta.name, str(meta.generation), package, version, hash_))
    return sha(text)[:RESOURCE_ID_CHARS]


def chain(stage: Stage) -> tuple[str, ...]:
    """The stages one pod runs when the entry is at ``stage``: each non-interrupt stage + check."""
    out: list[str] = []
    for s in CHAINS[stage]:
        out.extend((s.value, f"{s.value}-check"))
    return tuple(out)


def backoff(failed_attempts: int) -> timedelta:
    """Delay before the attempt after ``failed_attempts`` failures."""
    delay = BACKOFF_BASE * (1 << min(max(failed_attempts - 1, 0), 16))
    return min(delay, BACKOFF_MAX)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (``Z`` or an offset; naive means UTC), or None."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def truncate(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
