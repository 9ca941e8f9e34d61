"""The status patch a kubelet sends: only what changed since its last report.

A real kubelet sends a two-way strategic merge patch of the status it last saw and the one it
has now. Sending the whole status each time makes the API server merge and compare fields that
did not move; with one simulator serving thousands of nodes on a small machine, that is CPU the
control plane under test does not get.

Pod status fields, as ``k8s.io/api/core/v1`` declares them: ``conditions`` merge by ``type``;
``hostIPs`` and ``podIPs`` merge by ``ip``; every other list (the container statuses) is atomic,
so a changed one is sent whole. A key that is gone is sent as ``null``.

A kubelet that starts reporting on a pod the API already has a status for (it forgot the pod,
for example when a relist did not show it, and then saw it again) has sent nothing yet, but the
merging lists it patches are the API's: it diffs those against what the API shows
(:func:`merging_lists`), as a real kubelet diffs against the pod it reads. Sent whole, an address
list would merge into the old one, and two pod IPs of one family are refused (422) on every
report after.
"""

from __future__ import annotations

from nodewright_bridge.sandbox.kubelet.api import Obj

# status lists that merge by a key (the rest are replaced whole)
_MERGE_KEYS = {"conditions": "type", "hostIPs": "ip", "podIPs": "ip"}


def merging_lists(status: Obj) -> Obj:
    """The lists of ``status`` that a patch merges into (the base of a first report)."""
    return {key: status[key] for key in _MERGE_KEYS if isinstance(status.get(key), list)}


def status_patch(old: Obj | None, new: Obj) -> Obj:
    """The patch that turns ``old`` (the last status sent; ``None``: none yet) into ``new``.

    Empty when nothing changed."""
    if old is None:
        return dict(new)
    patch: Obj = {}
    for key, value in new.items():
        before = old.get(key)
        if before == value:
            continue
        merge_key = _MERGE_KEYS.get(key)
        if merge_key is not None and isinstance(before, list) and isinstance(value, list):
            patch.update(_merged_list(key, merge_key, before, value))
        else:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def _merged_list(key: str, merge_key: str, before: list[Obj], after: list[Obj]) -> Obj:
    """The entries of a merging list that changed, each with the fields it dropped as ``null``;
    a changed order or set of entries also sends ``$setElementOrder`` and deletes the gone ones."""
    old_by_key = {item[merge_key]: item for item in before}
    changed: list[Obj] = []
    for item in after:
        prior = old_by_key.get(item[merge_key])
        if prior == item:
            continue
        entry = dict(item)
        for field in prior or ():
            if field not in item:
                entry[field] = None
        changed.append(entry)
    out: Obj = {}
    order = [item[merge_key] for item in after]
    if order != [item[merge_key] for item in before]:
        kept = set(order)
        changed += [{merge_key: k, "$patch": "delete"} for k in old_by_key if k not in kept]
        out[f"$setElementOrder/{key}"] = [{merge_key: k} for k in order]
    if changed:
        out[key] = changed
    return out
