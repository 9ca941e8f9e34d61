"""Turn an Ansible playbook into NodeWright CRs and DeploymentPolicies (``nwb import playbook``).

Why: teams already encode their rollout intent in playbooks — which groups, which roles in which
order, ``serial`` canaries and ``max_fail_percentage``. Importing keeps that intent instead of
asking people to re-type it, and says out loud what it could not carry over (a node-side package
cannot ``delegate_to`` a load balancer) instead of dropping it.

One play becomes one NodeWright and one DeploymentPolicy of the same name:

============================  ================================================================
play                          NodeWright / DeploymentPolicy
============================  ================================================================
``hosts`` (groups)            ``spec.nodeSelectors`` via ``--group-label GROUP=LABELSEL``;
                              ``a:&b`` merges selectors, ``a:!b`` negates a single-label ``b``,
                              a union ``a,b`` works when both select values of one label key.
``roles`` (in order)          ``spec.packages``: each depends on the previous one (``dependsOn``);
                              name/version/interrupt from the role's ``nodewright-package.yaml``,
                              else what ``nwb package init`` would detect, else
                              ``--default-version``; image ``<image-prefix>/<name>``.
``pre_tasks``, ``tasks``,     generated packages, in the chain where Ansible runs them (below);
``post_tasks``, ``handlers``  each a role made by ``playroles`` and written by the command.
``tags`` (play, role entry)   folded with ``--tags``/``--skip-tags`` (the ones the playbook is run
and ``--tags``/``--skip-tags``  with) into the packages' ``tags``/``skipTags`` (below).
group_vars, play ``vars``,    every package's ``vars`` (later wins: group vars by Ansible's
``vars_files``, role ``vars``  group precedence, then play vars, vars_files, the role entry's vars).
                              A group var whose value differs between targeted hosts cannot be
                              one CR value and is reported. ``ansible_*`` connection vars are
                              dropped (the agent connects to its node itself).
``serial``                    budget = the last entry (count or percent: Ansible repeats it);
                              strategy from the strictly growing leading entries (percents
                              resolved against the inventory's host count): one size -> fixed;
                              growing -> the better fit of linear (constant delta) and
                              exponential (integer factor), ties to exponential because Ansible
                              jumps to the last size as soon as the list ends. No ``serial``
                              -> 100 % (Ansible runs all hosts at once). Example: ``[1, 2,
                              "50%"]`` on 10 hosts is batches 1, 2, 5, 5, ...: exponential from
                              1 by x2 (1, 2, 4 fits as well as linear 1, 3, 5; ties go to
                              exponential), budget ``percent: 50`` caps every batch at 5.
``max_fail_percentage``       ``batchThreshold = 100 - max_fail_percentage`` (min 1) and
                              ``failureThreshold: 1`` (Ansible aborts the play).
``any_errors_fatal``          ``batchThreshold: 100``, ``failureThreshold: 1``.
(neither)                     ``batchThreshold: 1``, ``failureThreshold: 1``: Ansible stops only
                              when every host of a batch failed.
always                        ``safetyLimit: 100`` (Ansible judges every batch, late ones too).
============================  ================================================================

A play's own tasks. Ansible runs a play as pre_tasks -> flush handlers -> roles -> tasks ->
flush -> post_tasks -> flush. The roles are packages already, so the order is kept by the
``dependsOn`` chain: the ``pre_tasks`` become a package ``<cr>-pre-tasks`` that the first role
depends on, ``tasks`` + ``post_tasks`` a package ``<cr>-tasks`` that depends on the last role
(with ``meta: flush_handlers`` between the two sections), and a play without roles one package
``<cr>-tasks`` holding all three sections with a flush between each. Each generated role gets the
play's ``handlers`` (they run at the end of its package, which is the flush that follows its
sections in Ansible), the play's ``collections``, and the files its tasks name relative to the
playbook. Its package gets the same CR ``vars`` as the role packages (group vars, play vars,
vars_files): editable in the CR, and a change is paced like any vars change. Kept as in Ansible
but differing in detail, and so reported: a role that notifies one of the play's handlers (the
role's package has only the role's handlers; Ansible flushes role handlers with the tasks', here
at the end of the role's package); a ``set_fact``/``register`` of a var that is also a CR var
(extra vars win over both). The version is ``--default-version``, else 1.0.0; the command warns
when a generated role changed but kept its version.

Tags. A ``tags`` keyword on a play or role entry does not select anything in Ansible: it is added
to each task under it, and only ``ansible-playbook --tags/--skip-tags`` select. So without
``--tags``/``--skip-tags`` every task runs and no package gets a selection (a note says so); with
them, ``select_tags`` folds the inherited tags into the package's ``tags``/``skipTags`` so that the
agent, which sees only the tasks' own tags, runs exactly the tasks Ansible would, and a package
that the run skips entirely is left out of the chain (a note says so).

Not translated, and reported with ``file:line``: ``delegate_to`` / ``run_once`` /
``local_action`` (in the play's tasks or a role's task files; the task is kept and the note says
what it does on a node), ``when`` on roles, ``strategy`` other than linear, host_vars,
vault-encrypted values, templated tags, files a play's task names that cannot be carried into its
role, and any play keyword not listed above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lifecycle.errors import SpecError
from lifecycle.spec import LabelSelector, LabelSelectorRequirement, SelectorOperator
from lifecycle.validation import load_nodewright, load_policy
from playbook_adapter import introspection, playroles
from playbook_adapter.errors import BadInputError, PackageError
from playbook_adapter.manifest import MANIFEST_FILE, load_manifest
from playbook_adapter.playroles import GeneratedRole, Tagged, Unsafe

API_VERSION = "bridge.nodewright.io/v1alpha1"
DEFAULT_IMAGE_PREFIX = "localhost/nodewright"
MAX_CR_NAME = 50
_PACKAGE_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z]$")
# Play keywords that are translated (or harmless on a node) and so never reported.
_HANDLED_PLAY_KEYS = frozenset(
    {
        "name",
        "hosts",
        "roles",
        "vars",
        "vars_files",
        "serial",
        "max_fail_percentage",
        "any_errors_fatal",
        "gather_facts",
        "collections",
        "become",
        "strategy",
        "become_user",
        "become_method",
        "tags",
    }
)
_TASK_SECTIONS = ("pre_tasks", "tasks", "post_tasks", "handlers")
_NODE_LOCAL_KEYS = ("delegate_to", "run_once", "local_action", "delegate_facts")
# What a node-local keyword means once the task runs in a package on its node.
_NODE_LOCAL_MEANING = {
    "delegate_to": "the task is kept and runs from the node's own pod, not the control machine",
    "run_once": "the task is kept, and as every node runs its own play it runs once per node",
    "local_action": "the task is kept and runs in the node's pod, not on the control machine",
    "delegate_facts": "the task is kept; the facts land on the delegated host of the node's play",
}
# Version of a generated role when --default-version is not given.
GENERATED_VERSION = "1.0.0"
_SET_FACT = ("set_fact", "ansible.builtin.set_fact", "ansible.legacy.set_fact")


class PlaybookImportError(BadInputError):
    """The playbook, inventory or mapping cannot be imported (exit 2, one line per problem)."""


@dataclass(frozen=True)
class Note:
    """Something that was not translated; ``where`` is ``file:line`` when known."""

    where: str
    message: str
    untranslated: bool = True

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


@dataclass
class ImportResult:
    """The generated documents (policy then CR, per play, as wire dicts), the roles generated
    from plays' own tasks (to be written with ``playroles.write_role``) and the notes."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    roles: list[GeneratedRole] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class ImportOptions:
    """How groups map to labels, where package images and roles are found, and the
    ``--tags``/``--skip-tags`` the playbook is run with (empty: a plain run)."""

    group_labels: Mapping[str, LabelSelector]
    image_prefix: str = DEFAULT_IMAGE_PREFIX
    default_version: str | None = None
    roles_paths: tuple[Path, ...] = ()
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# YAML with line numbers
# --------------------------------------------------------------------------------------------


class _LineDict(dict[str, Any]):
    line = 0


class _LineList(list[Any]):
    line = 0


class _Loader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping and sequence."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> Iterator[_LineDict]:
    data = _LineDict()
    data.line = node.start_mark.line + 1
    yield data
    data.update({str(k): v for k, v in loader.construct_mapping(node).items()})


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> Iterator[_LineList]:
    data = _LineList()
    data.line = node.start_mark.line + 1
    yield data
    data.extend(loader.construct_sequence(node))


def _construct_unsafe(loader: _Loader, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return Unsafe(loader.construct_scalar(node))
    return Tagged(node.tag)


def _construct_other(loader: _Loader, suffix: str, node: yaml.Node) -> Tagged:
    if isinstance(node, yaml.ScalarNode):
        return Tagged("!" + suffix, str(loader.construct_scalar(node)))
    return Tagged("!" + suffix)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
_Loader.add_constructor("!unsafe", _construct_unsafe)
_Loader.add_multi_constructor("!", _construct_other)


def _load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlaybookImportError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader derives from SafeLoader
    except yaml.YAMLError as exc:
        raise PlaybookImportError(f"{path}: not valid YAML: {exc}") from exc


def _line(value: object) -> int:
    return int(getattr(value, "line", 0))


def _plain(value: Any) -> Any:
    """Deep copy into plain JSON types (drops line bookkeeping and ansible's str subclasses)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _has_tagged(value: Any) -> bool:
    if isinstance(value, Tagged):
        return True
    if isinstance(value, Mapping):
        return any(_has_tagged(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_tagged(v) for v in value)
    return False


# --------------------------------------------------------------------------------------------
# Label selectors: `k=v,k2 in (a,b),!k3`
# --------------------------------------------------------------------------------------------

_SET_EXPR = re.compile(r"^([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)$")
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")


def _checked(key: str, values: Sequence[str] = ()) -> str:
    if not _LABEL_KEY.match(key):
        raise ValueError(f"{key!r} is not a valid label key")
    for value in values:
        if not _LABEL_VALUE.match(value):
            raise ValueError(f"{value!r} is not a valid label value (for {key})")
    return key


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return parts


def parse_label_selector(text: str) -> LabelSelector:
    """Parse kubectl's selector syntax into a LabelSelector.

    Raises:
        ValueError: naming the requirement that does not parse.
    """
    labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    if not text.strip():
        raise ValueError("empty selector")
    for part in _split_top_level(text):
        set_match = _SET_EXPR.match(part)
        if set_match:
            key, op, raw = set_match.groups()
            values = [v.strip() for v in raw.split(",") if v.strip()]
            if not values:
                raise ValueError(f"{part!r}: empty value list")
            operator = SelectorOperator.IN if op == "in" else SelectorOperator.NOT_IN
            expressions.append(LabelSelectorRequirement(key=key, operator=operator, values=values))
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            expressions.append(
                LabelSelectorRequirement(
                    key=_checked(key, [value]), operator=SelectorOperator.NOT_IN, values=[value]
                )
            )
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            if labels.get(key, value) != value:
                raise ValueError(f"{part!r}: conflicting value for {key}")
            labels[_checked(key, [value])] = value
        elif re.fullmatch(r"!\s*[^\s!=(),]+", part):
            key = part[1:].strip()
            expressions.append(
                LabelSelectorRequirement(
                    key=_checked(key), operator=SelectorOperator.DOES_NOT_EXIST
                )
            )
        elif re.fullmatch(r"[^\s!=(),]+", part):
            expressions.append(
                LabelSelectorRequirement(key=_checked(part), operator=SelectorOperator.EXISTS)
            )
        else:
            raise ValueError(f"{part!r}: not a label requirement (k=v, k!=v, k in (a,b), k, !k)")
    return LabelSelector(match_labels=labels, match_expressions=expressions)


def parse_group_labels(pairs: Sequence[str]) -> dict[str, LabelSelector]:
    """``GROUP=LABELSEL`` options into a mapping.

    Raises:
        PlaybookImportError: one problem per malformed option.
    """
    mapping: dict[str, LabelSelector] = {}
    problems = []
    for pair in pairs:
        group, sep, selector = pair.partition("=")
        if not sep or not group.strip():
            problems.append(f"--group-label {pair!r}: expected GROUP=LABELSELECTOR")
            continue
        try:
            mapping[group.strip()] = parse_label_selector(selector)
        except ValueError as exc:
            problems.append(f"--group-label {group.strip()}: {exc}")
    if problems:
        raise PlaybookImportError("invalid --group-label", problems)
    return mapping


def _merge_selectors(selectors: Sequence[LabelSelector]) -> LabelSelector | None:
    """AND of selectors; None when two of them pin one key to different values."""
    labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    for selector in selectors:
        for key, value in selector.match_labels.items():
            if labels.get(key, value) != value:
                return None
            labels[key] = value
        expressions += [e for e in selector.match_expressions if e not in expressions]
    return LabelSelector(match_labels=labels, match_expressions=expressions)


def _negate(selector: LabelSelector) -> LabelSelector | None:
    """NOT of a selector with exactly one requirement, else None."""
    if len(selector.match_labels) == 1 and not selector.match_expressions:
        ((key, value),) = selector.match_labels.items()
        return LabelSelector(
            match_expressions=[
                LabelSelectorRequirement(key=key, operator=SelectorOperator.NOT_IN, values=[value])
            ]
        )
    if len(selector.match_expressions) == 1 and not selector.match_labels:
        req = selector.match_expressions[0]
        opposite = {
            SelectorOperator.IN: SelectorOperator.NOT_IN,
            SelectorOperator.NOT_IN: SelectorOperator.IN,
            SelectorOperator.EXISTS: SelectorOperator.DOES_NOT_EXIST,
            SelectorOperator.DOES_NOT_EXIST: SelectorOperator.EXISTS,
        }[req.operator]
        return LabelSelector(
            match_expressions=[
                LabelSelectorRequirement(key=req.key, operator=opposite, values=req.values)
            ]
        )
    return None


def _union(selectors: Sequence[LabelSelector]) -> LabelSelector | None:
    """OR of selectors when each pins the same single key (``k=a`` | ``k in (b,c)``), else None."""
    key: str | None = None
    values: list[str] = []
    for selector in selectors:
        if len(selector.match_labels) == 1 and not selector.match_expressions:
            ((k, v),) = selector.match_labels.items()
            vs = [v]
        elif (
            len(selector.match_expressions) == 1
            and not selector.match_labels
            and selector.match_expressions[0].operator == SelectorOperator.IN
        ):
            k, vs = selector.match_expressions[0].key, list(selector.match_expressions[0].values)
        else:
            return None
        if key not in (None, k):
            return None
        key = k
        values += [v for v in vs if v not in values]
    if key is None:
        return None
    return LabelSelector(
        match_expressions=[
            LabelSelectorRequirement(key=key, operator=SelectorOperator.IN, values=values)
        ]
    )


# --------------------------------------------------------------------------------------------
# Inventory and group vars
# --------------------------------------------------------------------------------------------


@dataclass
class _Inventory:
    """Groups, hosts and inline vars read through Ansible's own inventory parser."""

    groups: dict[str, Any]
    manager: Any
    dirs: list[Path]

    def hosts(self, pattern: str) -> list[Any]:
        return list(self.manager.get_hosts(pattern=pattern))


def _load_inventory(path: Path | None, playbook_dir: Path) -> _Inventory:
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 - heavy, lazy
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    sources = [str(path)] if path is not None else []
    if path is not None and not path.exists():
        raise PlaybookImportError(f"--inventory {path}: no such file or directory")
    manager = InventoryManager(loader=DataLoader(), sources=sources)
    if path is not None and not manager.hosts and set(manager.groups) <= {"all", "ungrouped"}:
        raise PlaybookImportError(f"--inventory {path}: no groups or hosts could be parsed")
    dirs = [playbook_dir]
    if path is not None:
        inv_dir = path if path.is_dir() else path.parent
        dirs.insert(0, inv_dir.resolve())
    unique_dirs = list(dict.fromkeys(d.resolve() for d in dirs))
    return _Inventory(groups=dict(manager.groups), manager=manager, dirs=unique_dirs)


def _vars_files_in(directory: Path, name: str) -> list[Path]:
    """Ansible's group_vars/host_vars lookup: ``name``, ``name.yml|yaml|json`` or ``name/*``."""
    found: list[Path] = []
    for candidate in (
        directory / name,
        directory / f"{name}.yml",
        directory / f"{name}.yaml",
        directory / f"{name}.json",
    ):
        if candidate.is_file():
            found.append(candidate)
        elif candidate.is_dir():
            found += sorted(
                p
                for p in candidate.rglob("*")
                if p.is_file() and p.suffix in ("", ".yml", ".yaml", ".json")
            )
    return found


def _read_vars_file(path: Path, notes: list[Note]) -> dict[str, Any]:
    text_head = path.read_bytes()[:20]
    if text_head.startswith(b"$ANSIBLE_VAULT"):
        notes.append(Note(str(path), "vault-encrypted vars file skipped; use secretVars"))
        return {}
    data = _load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise PlaybookImportError(f"{path}: a vars file must be a mapping")
    return dict(data)


def _group_order(group: Any) -> tuple[int, int, str]:
    return (int(group.depth), int(group.priority), str(group.name))


def _host_group_vars(
    inventory: _Inventory, groups: Sequence[Any], notes: list[Note], cache: dict[Path, Any]
) -> dict[str, Any]:
    """Ansible's precedence for one host's groups: inline group vars (all groups), then
    ``group_vars/all`` (inventory dir, playbook dir), then ``group_vars/<group>`` by depth."""

    def files(group_name: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for directory in inventory.dirs:
            for path in _vars_files_in(directory / "group_vars", group_name):
                if path not in cache:
                    cache[path] = _read_vars_file(path, notes)
                merged.update(cache[path])
        return merged

    ordered = sorted(groups, key=_group_order)
    merged: dict[str, Any] = {}
    for group in ordered:
        merged.update(group.get_vars())
    merged.update(files("all"))
    for group in ordered:
        if group.name != "all":
            merged.update(files(group.name))
    return merged


# --------------------------------------------------------------------------------------------
# serial / max_fail_percentage -> strategy
# --------------------------------------------------------------------------------------------


def _serial_entries(serial: Any) -> list[int | str]:
    """Normalise ``serial`` to a list of counts (int) and percents (``"20%"``)."""
    raw = serial if isinstance(serial, list) else [serial]
    entries: list[int | str] = []
    for item in raw:
        if isinstance(item, bool):
            raise ValueError(f"serial entry {item!r} is not a number or percent")
        if isinstance(item, int):
            entries.append(item if item > 0 else "100%")
            continue
        text = str(item).strip()
        if re.fullmatch(r"\d+(\.\d+)?%", text):
            percent = float(text[:-1])
            entries.append(f"{min(100, int(percent)) if percent > 0 else 100}%")
        elif text.isdigit():
            entries.append(int(text) if int(text) > 0 else "100%")
        else:
            raise ValueError(f"serial entry {item!r} is not a number or percent")
    return entries or ["100%"]


def _resolve(entry: int | str, host_count: int) -> int:
    # Ansible's pct_to_int: floor of the percentage of the play's hosts, at least 1.
    if isinstance(entry, int):
        return entry
    return max(1, int(int(entry[:-1]) / 100.0 * host_count))


@dataclass(frozen=True)
class StrategyFit:
    """A DeploymentPolicy ``default`` (budget + strategy) and how it was derived."""

    budget: dict[str, int]
    kind: str
    params: dict[str, int]
    explanation: str

    def to_wire(self) -> dict[str, Any]:
        return {"budget": self.budget, "strategy": {self.kind: self.params}}


def fit_strategy(
    serial: Any,
    *,
    host_count: int,
    max_fail_percentage: float | None = None,
    any_errors_fatal: bool = False,
) -> StrategyFit:
    """Map ``serial`` / ``max_fail_percentage`` / ``any_errors_fatal`` to budget and strategy
    (the table in this module's docstring).

    Raises:
        ValueError: an entry of ``serial`` is neither a number nor a percent.
    """
    entries = _serial_entries(serial if serial is not None else "100%")
    count_base = host_count if host_count > 0 else 100
    sizes = [max(1, _resolve(e, count_base)) for e in entries]
    last = entries[-1]
    budget = {"percent": int(last[:-1])} if isinstance(last, str) else {"count": int(last)}

    kind, params, shape = "fixed", {"initialBatch": sizes[0]}, f"fixed batches of {sizes[0]}"
    # Fit the growth on the longest strictly growing prefix: a trailing percent that resolves to
    # the previous count or below (a small inventory) is the ceiling being reached, which the
    # budget already expresses, not a plateau or a shrink to fit.
    prefix = [sizes[0]]
    for size in sizes[1:]:
        if size <= prefix[-1]:
            break
        prefix.append(size)
    if len(prefix) > 1 and prefix[-1] > prefix[0]:
        steps = len(prefix) - 1
        delta = max(1, round((prefix[-1] - prefix[0]) / steps))
        factor = max(2, round((prefix[-1] / prefix[0]) ** (1 / steps)))
        linear = [prefix[0] + delta * i for i in range(len(prefix))]
        exponential = [prefix[0] * factor**i for i in range(len(prefix))]
        linear_error = sum(abs(p - s) for p, s in zip(linear, prefix, strict=True))
        exp_error = sum(abs(p - s) for p, s in zip(exponential, prefix, strict=True))
        if linear_error < exp_error:
            kind, params = "linear", {"initialBatch": sizes[0], "delta": delta}
            shape = f"linear from {sizes[0]} by +{delta}"
            error = linear_error
        else:
            kind, params = "exponential", {"initialBatch": sizes[0], "growthFactor": factor}
            shape = f"exponential from {sizes[0]} by x{factor}"
            error = exp_error
        if error:
            shape += f" (approximates {prefix})"
    elif len(set(prefix)) == 1 and len(set(sizes)) > 1 and sizes[-1] < sizes[0]:
        shape += f" (serial {sizes} shrinks; the ceiling caps batches at the last size)"

    if any_errors_fatal:
        batch_threshold, why = 100, "any_errors_fatal: one failed node stops the rollout"
    elif max_fail_percentage is not None:
        batch_threshold = max(1, min(100, 100 - math.floor(float(max_fail_percentage))))
        why = f"max_fail_percentage {max_fail_percentage}: a batch fails below {batch_threshold}%"
    else:
        batch_threshold, why = 1, "Ansible default: stop only when a whole batch failed"
    params = {**params, "batchThreshold": batch_threshold, "failureThreshold": 1}
    params["safetyLimit"] = 100
    percents = [e for e in entries if isinstance(e, str)]
    resolved = (
        f"; percents resolved against {count_base} hosts"
        + (" (no inventory hosts: assumed 100)" if host_count <= 0 else "")
        if percents and len(entries) > 1
        else ""
    )
    explanation = f"{shape}, ceiling {budget}{resolved}; {why}"
    return StrategyFit(budget=budget, kind=kind, params=params, explanation=explanation)


# --------------------------------------------------------------------------------------------
# Plays
# --------------------------------------------------------------------------------------------


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].strip("-")


@dataclass
class _Context:
    options: ImportOptions
    inventory: _Inventory
    result: ImportResult
    names: set[str] = field(default_factory=set)
    generated_names: set[str] = field(default_factory=set)  # packages made from play tasks
    vars_cache: dict[Path, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def note(self, path: Path, line: int, message: str, *, untranslated: bool = True) -> None:
        shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
        where = f"{shown}:{line}" if line else str(shown)
        self.result.notes.append(Note(where, message, untranslated))


def _hosts_pattern(hosts: Any) -> list[str]:
    if isinstance(hosts, list):
        return [str(h).strip() for h in hosts]
    return [p.strip() for p in re.split(r"[,:]", str(hosts)) if p.strip()] if hosts else []


def _selector_for(ctx: _Context, hosts: Any, where: str) -> tuple[LabelSelector | None, list[str]]:
    """The node selector of a ``hosts:`` pattern and the inventory groups it names."""
    parts = _hosts_pattern(hosts)
    included, intersected, excluded = [], [], []
    for part in parts:
        if part.startswith("&"):
            intersected.append(part[1:])
        elif part.startswith("!"):
            excluded.append(part[1:])
        else:
            included.append(part)
    names = [*included, *intersected, *excluded]
    mapping = ctx.options.group_labels
    unmapped = [n for n in names if n not in mapping and n not in ("all", "*")]
    if unmapped:
        for name in unmapped:
            kind = "group" if name in ctx.inventory.groups else "hosts entry"
            ctx.problems.append(
                f"{where}: {kind} {name!r} has no --group-label mapping "
                f"(add --group-label {name}=LABEL=VALUE)"
            )
        return None, names
    if any(re.search(r"[*?\[{]", n) for n in names if n != "*"):
        ctx.problems.append(f"{where}: hosts pattern {hosts!r} uses wildcards or templates")
        return None, names

    def sel(name: str) -> LabelSelector:
        return mapping.get(name, LabelSelector())

    union = (
        sel(included[0])
        if len(included) == 1
        else (LabelSelector() if "all" in included else _union([sel(n) for n in included]))
    )
    if union is None:
        ctx.problems.append(
            f"{where}: hosts {hosts!r} is a union of groups whose selectors differ in more than "
            "one label value; map them to values of one label key or split the play"
        )
        return None, names
    negated = [_negate(sel(n)) for n in excluded]
    if any(n is None for n in negated):
        ctx.problems.append(
            f"{where}: cannot exclude a group whose selector has more than one requirement"
        )
        return None, names
    merged = _merge_selectors([union, *[sel(n) for n in intersected], *[n for n in negated if n]])
    if merged is None:
        ctx.problems.append(f"{where}: hosts {hosts!r} selects no node (contradicting labels)")
    return merged, names


def _find_role(ctx: _Context, name: str, playbook_dir: Path) -> Path | None:
    if name.count(".") >= 2:
        namespace, collection, role = name.split(".", 2)
        for root in introspection.collection_roots():
            candidate = root / "ansible_collections" / namespace / collection / "roles" / role
            if candidate.is_dir():
                return candidate
        return None
    search = [playbook_dir / "roles", *ctx.options.roles_paths, playbook_dir]
    for root in search:
        if (root / name).is_dir():
            return root / name
    return None


@dataclass(frozen=True)
class _RoleInfo:
    name: str
    version: str
    interrupt: dict[str, Any] | None


def _role_info(ctx: _Context, role: str, role_dir: Path | None, where: str) -> _RoleInfo | None:
    default_name = _slug(role.rsplit(".", 1)[-1].replace("_", "-"), 43)
    if role_dir is not None and (role_dir / MANIFEST_FILE).is_file():
        try:
            manifest = load_manifest(role_dir)
        except PackageError as exc:
            ctx.problems += [f"{where}: role {role}: {p}" for p in exc.problems]
            return None
        interrupt = manifest.interrupt.to_wire() if manifest.interrupt else None
        return _RoleInfo(manifest.name, manifest.version, interrupt)
    if role_dir is not None:
        try:
            manifest = introspection.introspect_role(role_dir, version=ctx.options.default_version)
            interrupt = manifest.interrupt.to_wire() if manifest.interrupt else None
            return _RoleInfo(manifest.name, manifest.version, interrupt)
        except PackageError:
            pass
    if ctx.options.default_version:
        return _RoleInfo(default_name, ctx.options.default_version, None)
    found = "found but has no version" if role_dir else "not found"
    ctx.problems.append(
        f"{where}: role {role!r} {found}; run `nwb package init` on it or pass --default-version"
    )
    return None


def _all_tasks(tasks: Any) -> Iterator[Mapping[str, Any]]:
    """Every task of a task list, the tasks of its blocks included."""
    if not isinstance(tasks, list):
        return
    for task in tasks:
        if isinstance(task, Mapping):
            yield task
            for nested in ("block", "rescue", "always"):
                yield from _all_tasks(task.get(nested))


def _label(task: Mapping[str, Any]) -> str:
    return str(task.get("name") or next((k for k in task if k not in ("when", "tags")), "task"))


def _scan_tasks(ctx: _Context, tasks: Any, path: Path, section: str) -> set[str]:
    """Report node-local keywords (delegate_to, run_once, ...) in a task list, blocks included;
    return the handler names the tasks notify (static names only)."""
    notified: set[str] = set()
    for task in _all_tasks(tasks):
        for key in _NODE_LOCAL_KEYS:
            if key in task:
                detail = f" {task[key]}" if key == "delegate_to" else ""
                ctx.note(
                    path,
                    _line(task),
                    f"{section}: task {_label(task)!r} uses {key}{detail}: a package runs on "
                    f"its own node, so this is not translated — {_NODE_LOCAL_MEANING[key]}",
                )
        notify = task.get("notify")
        names = notify if isinstance(notify, list) else [notify] if notify else []
        notified |= {str(n) for n in names if "{{" not in str(n)}
    return notified


def _scan_role(ctx: _Context, role_dir: Path) -> set[str]:
    """Report node-local keywords in the role's task files; return the handlers they notify
    that the role does not define itself."""
    notified: set[str] = set()
    tasks_dir = role_dir / "tasks"
    for path in sorted(tasks_dir.rglob("*.y*ml")) if tasks_dir.is_dir() else []:
        try:
            tasks = _load_yaml(path)
        except PlaybookImportError:
            continue
        notified |= _scan_tasks(ctx, tasks, path, f"role {role_dir.name}")
    handlers_dir = role_dir / "handlers"
    for path in sorted(handlers_dir.rglob("*.y*ml")) if handlers_dir.is_dir() else []:
        try:
            notified -= _handler_names(_load_yaml(path))
        except PlaybookImportError:
            continue
    return notified


def _handler_names(handlers: Any) -> set[str]:
    """Names and ``listen`` topics a handler list answers to."""
    names: set[str] = set()
    for handler in _all_tasks(handlers):
        if handler.get("name"):
            names.add(str(handler["name"]))
        listen = handler.get("listen")
        names |= {str(t) for t in (listen if isinstance(listen, list) else [listen]) if t}
    return names


# --------------------------------------------------------------------------------------------
# Tags
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TagSelection:
    """A package's ``tags``/``skipTags``: what the agent passes as --tags/--skip-tags."""

    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()


def select_tags(
    inherited: Sequence[str], tags: Sequence[str], skip_tags: Sequence[str]
) -> TagSelection | None:
    """The package selection equal to ``ansible-playbook --tags TAGS --skip-tags SKIP_TAGS``
    for a role or task list whose tasks inherit ``inherited`` (play and role-entry ``tags``);
    None when that run skips every task of it.

    Why not just copy the tags: in Ansible a role entry's ``tags`` select nothing by
    themselves - they are added to each task of the role, and only the command line's --tags /
    --skip-tags select. The agent sees the tasks' own tags only, so the inherited ones are folded
    into the selection. ``tests/unit/playbook_adapter/test_import_tags.py`` checks the result
    against Ansible's own evaluation.
    """
    own = set(inherited)
    only = set(tags) or {"all"}
    skip = set(skip_tags)
    if not own:
        return TagSelection(tuple(dict.fromkeys(tags)), tuple(dict.fromkeys(skip_tags)))
    # --skip-tags, in Ansible's order: all, then the named tags, then tagged.
    if "all" in skip:
        kept_skip = () if "always" in own and "always" not in skip else tuple(skip_tags)
    elif own & skip or "tagged" in skip:
        return None
    else:
        kept_skip = _ordered(skip_tags, skip - {"untagged"})  # inheriting, no task is untagged
    # --tags
    if "always" in own or own & only:
        selected: tuple[str, ...] = ("all", "never")  # every task, even those tagged never
    elif only & {"all", "tagged"} and "never" not in own:
        wanted = (only - {"tagged", "untagged"}) | {"all"}
        selected = () if wanted == {"all"} else ("all", *_ordered(tags, wanted - {"all"}))
    else:
        named = _ordered(tags, only - {"all", "tagged", "untagged"})
        selected = named or ("always",)
    return TagSelection(selected, kept_skip)


def _ordered(given: Sequence[str], keep: set[str]) -> tuple[str, ...]:
    return tuple(t for t in dict.fromkeys(given) if t in keep)


def _tag_names(ctx: _Context, value: Any, path: Path, line: int, what: str) -> list[str]:
    """A ``tags`` keyword as Ansible reads it: a list, or a comma-separated string."""
    if value is None:
        return []
    raw = [str(t) for t in value] if isinstance(value, list) else str(value).split(",")
    names = [t.strip() for t in raw if t.strip()]
    templated = [t for t in names if "{{" in t]
    if templated:
        ctx.note(path, line, f"{what}: templated tags {templated} cannot be evaluated; ignored")
    return [t for t in names if "{{" not in t]


def _apply_tags(
    ctx: _Context,
    package: dict[str, Any],
    inherited: Sequence[str],
    label: str,
    where: tuple[Path, int],
) -> bool:
    """Set the package's tags/skipTags; False when the run would skip all of it."""
    options = ctx.options
    path, line = where
    selection = select_tags(inherited, options.tags, options.skip_tags)
    if selection is None:
        ctx.note(
            path,
            line,
            f"{label}: tagged {list(inherited)}, which --skip-tags {list(options.skip_tags)} "
            "skips entirely — no package",
            untranslated=False,
        )
        return False
    if inherited and not (options.tags or options.skip_tags):
        ctx.note(
            path,
            line,
            f"{label}: tags {list(inherited)} select only with ansible-playbook --tags; every "
            "task runs, as in a plain run (pass your --tags/--skip-tags to the import)",
            untranslated=False,
        )
    if selection.tags:
        package["tags"] = list(selection.tags)
    if selection.skip_tags:
        package["skipTags"] = list(selection.skip_tags)
    return True


# --------------------------------------------------------------------------------------------
# Packages generated from a play's own tasks
# --------------------------------------------------------------------------------------------


@dataclass
class _Chain:
    """A play's packages in Ansible's order, each depending on the one before it."""

    packages: dict[str, Any] = field(default_factory=dict)
    previous: tuple[str, str] | None = None

    def add(self, name: str, package: dict[str, Any]) -> None:
        if self.previous is not None:
            package["dependsOn"] = {self.previous[0]: self.previous[1]}
        self.packages[name] = package
        self.previous = (name, str(package["version"]))


@dataclass(frozen=True)
class _PlayParts:
    """What the generated packages of one play share."""

    play: Mapping[str, Any]
    path: Path
    line: int
    cr_name: str
    handlers: list[Any]
    combined: Mapping[str, Any]
    tags: list[str]


def _generated_name(ctx: _Context, cr_name: str, suffix: str, taken: Mapping[str, Any]) -> str:
    stem = cr_name if re.match(r"^[a-z]", cr_name) else f"play-{cr_name}"
    counter = 1
    while True:
        extra = f"-{counter}" if counter > 1 else ""
        name = stem[: 43 - len(suffix) - len(extra)].rstrip("-") + extra + suffix
        if name not in ctx.generated_names and name not in taken:
            ctx.generated_names.add(name)
            return name
        counter += 1


def _generated_package(
    ctx: _Context, parts: _PlayParts, sections: Sequence[str], suffix: str, chain: _Chain
) -> None:
    """Add the package whose role holds ``sections`` of the play (module docstring)."""
    play, path = parts.play, parts.path
    what = " + ".join(s for s in sections if play.get(s))
    tasks = playroles.play_tasks([play.get(s) or [] for s in sections])
    name = _generated_name(ctx, parts.cr_name, suffix, chain.packages)
    version = ctx.options.default_version or GENERATED_VERSION
    package: dict[str, Any] = {
        "version": version,
        "image": f"{ctx.options.image_prefix.rstrip('/')}/{name}",
        "vars": dict(parts.combined),
    }
    line = _line(play.get(sections[0])) or parts.line
    if not _apply_tags(ctx, package, parts.tags, f"play {what}", (path, line)):
        return
    handlers = parts.handlers
    interrupt = introspection.interrupt_from_handlers([h for h in handlers if isinstance(h, dict)])
    if interrupt:
        package["interrupt"] = interrupt.to_wire()
    referenced, missing = playroles.referenced_files([*tasks, *handlers], path.parent)
    for gap in missing:
        ctx.note(
            path,
            gap.line or line,
            f"{what}: task {gap.task!r} names {gap.reference or 'a file'!r}: {gap.reason}; "
            f"role {name} is generated without it",
        )
    description = f"The {what} of play {play.get('name') or parts.cr_name!r} ({path.name}:{line})"
    own = playroles.role_files(
        name=name,
        version=version,
        description=description,
        tasks=tasks,
        handlers=handlers,
        collections=[str(c) for c in play.get("collections") or [] if isinstance(c, str)],
    )
    for clash in sorted(set(referenced) & set(own)):
        ctx.note(
            path, line, f"{what}: {clash} is generated; the playbook's file of that name is not"
        )
    ctx.result.roles.append(GeneratedRole(name, version, {**referenced, **own}))
    if _has_tagged(tasks) or _has_tagged(handlers):
        ctx.note(
            path,
            line,
            f"{what}: a vault/custom-tagged value is kept in role {name}, but the agent has no "
            "vault password; move the secret to secretVars",
        )
    _note_shadowed_vars(ctx, tasks, parts.combined, path, what)
    ctx.note(
        path,
        line,
        f"package {name}: the play's {what} as generated role {name}",
        untranslated=False,
    )
    chain.add(name, package)


def _note_shadowed_vars(
    ctx: _Context, tasks: Sequence[Any], combined: Mapping[str, Any], path: Path, what: str
) -> None:
    """A set_fact/register of a var the package also gets as a CR var does not take effect:
    CR vars are extra vars, which beat set_fact; in the play they were play vars, which do not."""
    for task in _all_tasks(list(tasks)):
        names: list[str] = []
        for key in _SET_FACT:
            if isinstance(task.get(key), Mapping):
                names += [str(k) for k in task[key] if k != "cacheable"]
        if task.get("register"):
            names.append(str(task["register"]))
        for var in names:
            if var in combined:
                ctx.note(
                    path,
                    _line(task),
                    f"{what}: task {_label(task)!r} sets {var}, which the package also gets as a "
                    "CR var (an extra var, which set_fact/register cannot override) — rename one",
                )


def _clean_vars(ctx: _Context, values: Mapping[str, Any], path: Path, line: int) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in values.items():
        if str(key).startswith("ansible_"):
            ctx.note(path, line, f"var {key}: connection variable dropped (the agent connects)")
        elif _has_tagged(value):
            ctx.note(path, line, f"var {key}: vault/custom-tagged value; move it to secretVars")
        else:
            cleaned[str(key)] = _plain(value)
    return cleaned


def _play_group_vars(
    ctx: _Context, names: Sequence[str], pattern: str, path: Path, line: int
) -> dict[str, Any]:
    inventory = ctx.inventory
    hosts = inventory.hosts(pattern) if inventory.manager.hosts else []
    per_host: list[dict[str, Any]] = []
    if hosts:
        for host in hosts:
            per_host.append(
                _host_group_vars(inventory, host.get_groups(), ctx.result.notes, ctx.vars_cache)
            )
            for directory in inventory.dirs:
                if _vars_files_in(directory / "host_vars", host.name):
                    ctx.note(
                        directory / "host_vars",
                        0,
                        f"host_vars for {host.name}: per-host vars are not translated",
                    )
    else:
        chain: list[Any] = []
        for name in names:
            group = inventory.groups.get(name)
            if group is not None:
                chain += [group, *group.get_ancestors()]
        if "all" in inventory.groups:
            chain.append(inventory.groups["all"])
        unique = list({id(g): g for g in chain}.values())
        per_host.append(_host_group_vars(inventory, unique, ctx.result.notes, ctx.vars_cache))
    merged: dict[str, Any] = {}
    keys = list(dict.fromkeys(k for hv in per_host for k in hv))
    for key in keys:
        values = [hv.get(key) for hv in per_host]
        if any(_plain(v) != _plain(values[0]) for v in values) or any(
            key not in hv for hv in per_host
        ):
            ctx.note(
                path,
                line,
                f"group var {key}: differs between the play's hosts; one CR holds one value — "
                "not translated (split the play or pass it per package)",
            )
            continue
        merged[key] = values[0]
    return _clean_vars(ctx, merged, path, line)


def _import_play(ctx: _Context, play: Mapping[str, Any], path: Path, index: int) -> None:
    line = _line(play)
    where = f"{path}:{line}"
    playbook_dir = path.parent
    play_name = str(play.get("name") or "")
    base_name = _slug(play_name, MAX_CR_NAME) or _slug(f"{path.stem}-{index + 1}", MAX_CR_NAME)
    name = base_name
    counter = 2
    while name in ctx.names:
        suffix = f"-{counter}"
        name = base_name[: MAX_CR_NAME - len(suffix)].strip("-") + suffix
        counter += 1
    ctx.names.add(name)

    for key in play:
        if key in _HANDLED_PLAY_KEYS or key in _TASK_SECTIONS or key in _NODE_LOCAL_KEYS:
            continue
        ctx.note(path, line, f"play {play_name or index + 1!r}: keyword {key!r} not translated")
    for key in _NODE_LOCAL_KEYS:
        if key in play:
            ctx.note(path, line, f"play-level {key} not translated (packages run on their node)")
    strategy = play.get("strategy")
    if strategy not in (None, "linear"):
        ctx.note(path, line, f"strategy {strategy!r} not translated; batches run in lockstep")
    if str(play.get("become_user") or "root") != "root":
        ctx.note(path, line, "become_user other than root: the agent runs as root")
    for section in _TASK_SECTIONS:
        tasks = play.get(section)
        if tasks is not None and not isinstance(tasks, list):
            ctx.problems.append(f"{path}:{_line(tasks) or line}: {section} must be a list of tasks")
            return
        _scan_tasks(ctx, tasks, path, section)
    play_tags = _tag_names(ctx, play.get("tags"), path, line, "play tags")

    selector, group_names = _selector_for(ctx, play.get("hosts"), where)
    pattern = ":".join(_hosts_pattern(play.get("hosts"))) or "all"

    group_vars = _play_group_vars(ctx, group_names, pattern, path, line)
    play_vars = play.get("vars") or {}
    if not isinstance(play_vars, Mapping):
        ctx.problems.append(f"{where}: vars must be a mapping")
        play_vars = {}
    combined = {**group_vars, **_clean_vars(ctx, play_vars, path, _line(play_vars) or line)}
    for entry in play.get("vars_files") or []:
        candidates = entry if isinstance(entry, list) else [entry]
        loaded = False
        for candidate in candidates:
            if "{{" in str(candidate):
                continue
            file = (playbook_dir / str(candidate)).resolve()
            if file.is_file():
                data = _read_vars_file(file, ctx.result.notes)
                combined.update(_clean_vars(ctx, data, file, _line(data)))
                loaded = True
                break
        if not loaded:
            ctx.note(path, line, f"vars_files entry {entry!r} not found or templated; skipped")

    roles = play.get("roles") or []
    has_tasks = any(play.get(s) for s in ("pre_tasks", "tasks", "post_tasks"))
    if not roles and not has_tasks:
        ctx.note(path, line, "play has no roles and no tasks: nothing to package — no CR written")
        return
    parts = _PlayParts(
        play=play,
        path=path,
        line=line,
        cr_name=name,
        handlers=list(play.get("handlers") or []),
        combined=combined,
        tags=play_tags,
    )
    chain = _Chain()
    if not roles:
        _generated_package(ctx, parts, ("pre_tasks", "tasks", "post_tasks"), "-tasks", chain)
    elif play.get("pre_tasks"):
        _generated_package(ctx, parts, ("pre_tasks",), "-pre-tasks", chain)
    play_handlers = _handler_names(parts.handlers)
    for role_entry in roles:
        entry = role_entry if isinstance(role_entry, Mapping) else {"role": role_entry}
        role = str(entry.get("role") or entry.get("name") or "")
        role_line = _line(role_entry) or _line(roles) or line
        role_where = f"{path}:{role_line}"
        if not role or "{{" in role:
            ctx.problems.append(f"{role_where}: role entry without a usable name")
            continue
        for key in entry:
            if key in ("role", "name", "vars", "tags"):
                continue
            ctx.note(path, role_line, f"role {role}: {key!r} on a role entry not translated")
        role_dir = _find_role(ctx, role, playbook_dir)
        if role_dir is not None:
            for handler in sorted(_scan_role(ctx, role_dir) & play_handlers):
                ctx.note(
                    path,
                    role_line,
                    f"role {role} notifies the play's handler {handler!r}; a role's package has "
                    "only the role's own handlers (the play's go with its tasks) — move the "
                    "handler into the role",
                )
        info = _role_info(ctx, role, role_dir, role_where)
        if info is None:
            continue
        if not _PACKAGE_NAME.match(info.name) or not 2 <= len(info.name) <= 43:
            ctx.problems.append(f"{role_where}: package name {info.name!r} is not valid")
            continue
        if info.name in chain.packages:
            ctx.note(path, role_line, f"role {role} listed twice; only its first use is kept")
            continue
        role_vars = entry.get("vars") or {}
        package: dict[str, Any] = {
            "version": info.version,
            "image": f"{ctx.options.image_prefix.rstrip('/')}/{info.name}",
            "vars": {**combined, **_clean_vars(ctx, role_vars, path, role_line)},
        }
        if info.interrupt:
            package["interrupt"] = info.interrupt
        inherited = [
            *play_tags,
            *_tag_names(ctx, entry.get("tags"), path, role_line, f"role {role} tags"),
        ]
        if _apply_tags(
            ctx, package, list(dict.fromkeys(inherited)), f"role {role}", (path, role_line)
        ):
            chain.add(info.name, package)
    if roles and (play.get("tasks") or play.get("post_tasks")):
        _generated_package(ctx, parts, ("tasks", "post_tasks"), "-tasks", chain)
    packages = chain.packages
    if selector is None or not packages:
        return

    try:
        fit = fit_strategy(
            play.get("serial"),
            host_count=len(ctx.inventory.hosts(pattern)) if ctx.inventory.manager.hosts else 0,
            max_fail_percentage=play.get("max_fail_percentage"),
            any_errors_fatal=bool(play.get("any_errors_fatal")),
        )
    except (ValueError, TypeError) as exc:
        ctx.problems.append(f"{where}: serial: {exc}")
        return
    if play.get("serial") is None:
        ctx.note(
            path,
            line,
            "no serial: every targeted node goes in one batch (as in Ansible)",
            untranslated=False,
        )
    ctx.note(path, line, f"policy {name}: {fit.explanation}", untranslated=False)
    annotations = {"bridge.nodewright.io/imported-from": f"{path.name}:{line}"}
    policy = {
        "apiVersion": API_VERSION,
        "kind": "DeploymentPolicy",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"default": fit.to_wire()},
    }
    cr = {
        "apiVersion": API_VERSION,
        "kind": "NodeWright",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeSelectors": {k: v for k, v in selector.to_wire().items() if v},
            "deploymentPolicy": name,
            "packages": packages,
        },
    }
    try:
        load_policy(policy)
        load_nodewright(cr)
    except SpecError as exc:
        ctx.problems += [f"{where}: generated {exc.kind} invalid: {p}" for p in exc.problems]
        return
    ctx.result.documents += [policy, cr]


def _plays(ctx: _Context, path: Path, seen: tuple[Path, ...]) -> Iterator[tuple[Any, Path, int]]:
    if path in seen:
        ctx.problems.append(f"{path}: imports itself (import_playbook cycle)")
        return
    data = _load_yaml(path)
    if not isinstance(data, list):
        raise PlaybookImportError(f"{path}: a playbook must be a list of plays")
    for index, play in enumerate(data):
        if not isinstance(play, Mapping):
            ctx.problems.append(f"{path}:{_line(data)}: play {index + 1} is not a mapping")
            continue
        target = play.get("import_playbook") or play.get("ansible.builtin.import_playbook")
        if target is not None:
            text = str(target)
            if "{{" in text or re.fullmatch(r"\w+\.\w+\.\w+", text):
                # Templated names and collection playbooks (ns.coll.playbook) cannot be followed.
                ctx.note(path, _line(play), f"import_playbook {text!r} not followed")
                continue
            yield from _plays(ctx, (path.parent / str(target)).resolve(), (*seen, path))
            continue
        yield play, path, index


def import_playbook(
    playbook: Path, *, inventory: Path | None, options: ImportOptions
) -> ImportResult:
    """Translate every play of ``playbook`` (following ``import_playbook``).

    Raises:
        PlaybookImportError: unmapped groups, unresolvable roles, malformed files — all problems
            at once, one line each with ``file:line``.
    """
    playbook = playbook.resolve()
    ctx = _Context(
        options=options,
        inventory=_load_inventory(inventory, playbook.parent),
        result=ImportResult(),
    )
    for play, path, index in list(_plays(ctx, playbook, ())):
        _import_play(ctx, play, path, index)
    if ctx.problems:
        raise PlaybookImportError("cannot import the playbook", ctx.problems)
    return ctx.result


class _NoAliasDumper(yaml.SafeDumper):
    """Vars shared by several packages are written out in full, never as YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_documents(documents: Sequence[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the order they were built."""
    return "".join(
        "---\n"
        + yaml.dump(
            dict(doc),
            Dumper=_NoAliasDumper,
            sort_keys=False,
            default_flow_style=False,
            width=100,
        )
        for doc in documents
    )
