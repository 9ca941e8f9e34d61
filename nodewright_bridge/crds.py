"""CustomResourceDefinitions generated from the pydantic API models in ``lifecycle.spec``.

Why generated: those models are the single source of truth (docs/architecture.md, "The API in
brief"). The API server must reject the same bad objects that ``nwb plan`` rejects offline,
without a webhook, so every rule that OpenAPI or CEL can express is emitted here next to the
schema pydantic produces.

The output is a *structural* schema as ``apiextensions.k8s.io/v1`` requires: every ``$ref`` is
inlined, ``anyOf [X, null]`` becomes ``X`` (unset optionals are omitted on the wire; a ``null``
sent by a client is pruned by the API server), every node has a ``type``, and only ``vars`` and
``valueFrom`` keep unknown fields. Constant defaults are carried over; a nested object whose
Python default is "all defaults" gets ``default: {}`` so the API server fills in its fields.

Caveats: rules that need more than CEL offers (glob matching of ``configInterrupts`` keys,
semantic equality of reordered selectors) are checked by the models only; the controller
re-validates every object and reports ``InvalidSpec``. CEL has no recursion, so ``dependsOn``
cycles are rejected at admission up to ``DEPENDS_ON_CYCLE_MAX`` packages long (one nested
``all`` per link); longer ones only by the models.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticUndefined, core_schema

from lifecycle import durations, spec, status

Schema = dict[str, Any]

GROUP = spec.API_GROUP
VERSION = spec.API_VERSION

# Bounds that keep the estimated CEL cost of every rule inside the API server's budget. Kubernetes
# label keys are at most 253 (prefix) + 1 + 63 characters and values at most 63.
LABEL_KEY_MAX = 317
LABEL_VALUE_MAX = 63
SELECTOR_TERMS_MAX = 32
SELECTOR_VALUES_MAX = 64
COMPARTMENTS_MAX = 64
TOLERATIONS_MAX = 64
DEPENDS_ON_MAX = spec.PACKAGES_MAX
# Longest dependsOn cycle the CRD rejects. Its estimated cost is PACKAGES_MAX * DEPENDS_ON_MAX^(n-1)
# map lookups: kube-apiserver v1.36 accepts 3 (about 60 % of the per-rule budget) and refuses 4
# (about 39 times the budget; tests/integration/test_crds_apply.py proves the accepted one).
DEPENDS_ON_CYCLE_MAX = 3
SEMVER_PATTERN = (
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(-((0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(\.(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?$"
)
_IMAGE_COMPONENT = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_IMAGE_HOST = (
    r"([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*"
    r"|\[[0-9a-fA-F:]+\])(:[0-9]+)?"
)
IMAGE_PATTERN = rf"^({_IMAGE_HOST}/)?{_IMAGE_COMPONENT}(/{_IMAGE_COMPONENT})*$"
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?" + _LABEL_NAME + "$"
)
_LABEL_VALUE: Schema = {
    "type": "string",
    "maxLength": LABEL_VALUE_MAX,
    "pattern": f"^({_LABEL_NAME})?$",
}


def _rule(
    rule: str,
    message: str,
    *,
    field_path: str | None = None,
    reason: str | None = None,
    message_expression: str | None = None,
) -> Schema:
    out: Schema = {"rule": rule, "message": message}
    if message_expression is not None:
        out["messageExpression"] = message_expression
    if field_path is not None:
        out["fieldPath"] = field_path
    if reason is not None:
        out["reason"] = reason
    return out


def _positive_duration(what: str) -> list[Schema]:
    return [
        _rule(
            f"self.matches(r'{durations.GO_DURATION_PATTERN}') && self.matches('[1-9]')",
            f"{what} must be a Go duration longer than zero (e.g. 30s, 5m, 1h30m)",
        )
    ]


def _quantity(what: str) -> list[Schema]:
    return [
        _rule(
            "isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))",
            f"{what} must be a Kubernetes quantity greater than zero (e.g. 500m, 2, 512Mi)",
        )
    ]


def _limit_at_least_request(kind: str) -> Schema:
    req, lim = f"self.{kind}Request", f"self.{kind}Limit"
    return _rule(
        f"!has({lim}) || !has({req}) || "
        f"!isQuantity(string({lim})) || !isQuantity(string({req})) || "
        f"quantity(string({lim})).compareTo(quantity(string({req}))) >= 0",
        f"{kind}Limit must be at least {kind}Request",
        field_path=f".{kind}Limit",
    )


def _no_depends_on_cycle(longest: int) -> str:
    """CEL: no package reaches itself in at most ``longest`` dependsOn links.

    ``p0`` is the package that must not come back; ``p1``, ``p2``, ... walk its dependencies
    (an entry naming no package is skipped here: another rule rejects it).
    """
    packages = "self.packages"

    def deps(var: str) -> str:
        return f"{packages}[{var}].dependsOn"

    def walk(step: int) -> str:
        here = f"p{step - 1}"
        if step == longest:
            return f"!(p0 in {deps(here)})"
        nxt = f"p{step}"
        return (
            f"{deps(here)}.all({nxt}, {nxt} != p0 && "
            f"(!({nxt} in {packages}) || !has({deps(nxt)}) || {walk(step + 1)}))"
        )

    return f"!has({packages}) || {packages}.all(p0, !has({deps('p0')}) || {walk(1)})"


_ONE_OF_PERCENT_COUNT = _rule(
    "has(self.percent) != has(self.count)", "set exactly one of percent or count"
)

# CEL rules attached to the schema of a model (by class name).
MODEL_RULES: dict[str, list[Schema]] = {
    "NodeWrightSpec": [
        _rule(
            "!(has(self.deploymentPolicy) && has(self.interruptionBudget))",
            "deploymentPolicy and interruptionBudget are mutually exclusive; use one",
            field_path=".interruptionBudget",
        ),
        _rule(
            "!(has(self.autoTaintNewNodes) && self.autoTaintNewNodes) || "
            "(has(self.runtimeRequired) && self.runtimeRequired)",
            "autoTaintNewNodes requires runtimeRequired: true",
            field_path=".autoTaintNewNodes",
        ),
        _rule(
            "!has(self.packages) || self.packages.all(n, !has(self.packages[n].dependsOn) || "
            "self.packages[n].dependsOn.all(d, d in self.packages && "
            "self.packages[d].version == self.packages[n].dependsOn[d]))",
            "every dependsOn entry must name a package of this NodeWright with exactly its version",
            field_path=".packages",
        ),
        _rule(
            _no_depends_on_cycle(DEPENDS_ON_CYCLE_MAX),
            f"dependsOn cycle: a package depends on itself through at most "
            f"{DEPENDS_ON_CYCLE_MAX} dependsOn entries; remove one entry of the cycle",
            field_path=".packages",
        ),
    ],
    "Package": [
        _rule(
            "!self.version.contains('+') || has(self.digest)",
            "a version with build metadata (+...) cannot be an image tag; pin the image with "
            "digest",
            field_path=".version",
        ),
    ],
    "Interrupt": [
        _rule(
            "self.type == 'service' ? (has(self.services) && size(self.services) > 0) : "
            "(!has(self.services) || size(self.services) == 0)",
            "services are required for type service and allowed only there",
            field_path=".services",
        ),
    ],
    "Resources": [
        _rule(
            "has(self.cpuRequest) == has(self.cpuLimit) && "
            "has(self.cpuLimit) == has(self.memoryRequest) && "
            "has(self.memoryRequest) == has(self.memoryLimit)",
            "set all of cpuRequest, cpuLimit, memoryRequest, memoryLimit or none",
        ),
        _limit_at_least_request("cpu"),
        _limit_at_least_request("memory"),
    ],
    "Uninstall": [
        _rule(
            "!(has(self.apply) && self.apply) || (has(self.enabled) && self.enabled)",
            "uninstall.apply requires uninstall.enabled",
            field_path=".apply",
        ),
    ],
    "EnvVar": [
        _rule(
            "!(has(self.value) && has(self.valueFrom))",
            "value and valueFrom are mutually exclusive",
            field_path=".valueFrom",
        ),
    ],
    "Toleration": [
        _rule(
            "!(has(self.value) && self.value != '' && has(self.operator) && "
            "self.operator == 'Exists')",
            "value must be empty when operator is Exists",
            field_path=".value",
        ),
        _rule(
            "(has(self.key) && self.key != '') || "
            "(has(self.operator) && self.operator == 'Exists')",
            "operator must be Exists when key is empty",
            field_path=".operator",
        ),
        _rule(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "tolerationSeconds is only allowed with effect NoExecute",
            field_path=".tolerationSeconds",
        ),
    ],
    "LabelSelectorRequirement": [
        _rule(
            "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
            "(!has(self.values) || size(self.values) == 0)",
            "In and NotIn need at least one value; Exists and DoesNotExist take none",
            field_path=".values",
        ),
    ],
    "InterruptionBudget": [_ONE_OF_PERCENT_COUNT],
    "Budget": [_ONE_OF_PERCENT_COUNT],
    "Strategy": [
        _rule(
            "(has(self.fixed) ? 1 : 0) + (has(self.linear) ? 1 : 0) + "
            "(has(self.exponential) ? 1 : 0) == 1",
            "set exactly one of fixed, linear, exponential",
        ),
    ],
    "DeploymentPolicySpec": [
        _rule(
            "!has(self.compartments) || "
            "self.compartments.all(c, self.compartments.exists_one(d, d.name == c.name))",
            "compartment names must be unique",
            field_path=".compartments",
        ),
        _rule(
            "!has(self.compartments) || "
            "self.compartments.all(c, self.compartments.exists_one(d, d.selector == c.selector))",
            "no two compartments may have identical selectors",
            field_path=".compartments",
        ),
    ],
}

_TAG_LIST: Schema = {
    "items": {"type": "string", "maxLength": spec.TAG_MAX_CHARS},
    "x-kubernetes-validations": [
        _rule(
            f"self.all(t, t.matches(r'{spec.TAG_PATTERN}'))",
            "each tag must be non-empty, without commas and without leading or trailing spaces "
            "(give each tag as its own list item)",
        )
    ],
}

# Extra schema keywords for one property (model class name, wire name) - CEL rules on the value
# itself and bounds that pydantic does not express.
FIELD_EXTRAS: dict[tuple[str, str], Schema] = {
    ("NodeWrightSpec", "packages"): {
        "x-kubernetes-validations": [
            _rule(
                f"self.all(k, k.matches(r'{spec.PACKAGE_NAME_PATTERN}'))",
                "package names must be 2-43 characters of lowercase letters, digits and '-', "
                "starting and ending with a letter",
            )
        ]
    },
    ("NodeWrightSpec", "deploymentPolicy"): {
        "x-kubernetes-validations": [
            _rule(
                f"self.matches(r'{spec.DNS1123_SUBDOMAIN_PATTERN}')",
                "deploymentPolicy must name a DeploymentPolicy (a DNS-1123 subdomain)",
            )
        ]
    },
    ("Package", "version"): {
        "x-kubernetes-validations": [
            _rule(
                f"self.matches(r'{SEMVER_PATTERN}')",
                "version must be strict semver (MAJOR.MINOR.PATCH[-pre][+build])",
            )
        ]
    },
    ("Package", "image"): {
        "x-kubernetes-validations": [
            _rule(
                "!self.contains('@') && !self.substring(self.lastIndexOf('/') + 1).contains(':')",
                "image must be a repository without tag or digest: put the tag in version "
                "(or pin the image with digest); host:port/path is fine",
            ),
            _rule(
                "self.contains('@') || self.substring(self.lastIndexOf('/') + 1).contains(':') || "
                f"self.matches(r'{IMAGE_PATTERN}')",
                "image must be an image repository such as registry.example.com:5000/team/name",
            ),
        ]
    },
    ("Package", "digest"): {
        "maxLength": 71,
        "x-kubernetes-validations": [
            _rule(
                f"self.matches(r'{spec.DIGEST_PATTERN}')",
                'digest must be "sha256:" followed by 64 lowercase hex digits',
            )
        ],
    },
    ("Package", "dependsOn"): {"maxProperties": DEPENDS_ON_MAX},
    ("Package", "tags"): _TAG_LIST,
    ("Package", "skipTags"): _TAG_LIST,
    ("Package", "gracefulShutdown"): {
        "maxLength": 64,
        "x-kubernetes-validations": [
            _rule(
                f"self.matches(r'{durations.GO_DURATION_PATTERN}')",
                "gracefulShutdown must be a Go duration (e.g. 30s, 5m)",
            )
        ],
    },
    ("Timeouts", "stage"): {
        "maxLength": 64,
        "x-kubernetes-validations": _positive_duration("stage"),
    },
    ("Timeouts", "drain"): {
        "maxLength": 64,
        "x-kubernetes-validations": _positive_duration("drain"),
    },
    ("Timeouts", "interrupt"): {
        "maxLength": 64,
        "x-kubernetes-validations": _positive_duration("interrupt"),
    },
    ("Drain", "timeout"): {
        "maxLength": 64,
        "x-kubernetes-validations": _positive_duration("timeout"),
    },
    ("Resources", "cpuRequest"): {
        "maxLength": 64,
        "x-kubernetes-validations": _quantity("cpuRequest"),
    },
    ("Resources", "cpuLimit"): {"maxLength": 64, "x-kubernetes-validations": _quantity("cpuLimit")},
    ("Resources", "memoryRequest"): {
        "maxLength": 64,
        "x-kubernetes-validations": _quantity("memoryRequest"),
    },
    ("Resources", "memoryLimit"): {
        "maxLength": 64,
        "x-kubernetes-validations": _quantity("memoryLimit"),
    },
    ("NodeWrightSpec", "additionalTolerations"): {"maxItems": TOLERATIONS_MAX},
    ("Toleration", "operator"): {"enum": ["Equal", "Exists"]},
    ("Toleration", "effect"): {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
    ("Toleration", "key"): {"maxLength": LABEL_KEY_MAX},
    ("Toleration", "value"): {"maxLength": LABEL_VALUE_MAX},
    ("LabelSelector", "matchLabels"): {
        "maxProperties": SELECTOR_TERMS_MAX,
        "additionalProperties": _LABEL_VALUE,
        "x-kubernetes-validations": [
            _rule(
                f"self.all(k, k.size() <= {LABEL_KEY_MAX} && k.matches(r'{LABEL_KEY_PATTERN}'))",
                "matchLabels keys must be Kubernetes label keys ([dns-prefix/]name, name at most "
                "63 characters)",
            )
        ],
    },
    ("LabelSelector", "matchExpressions"): {"maxItems": SELECTOR_TERMS_MAX},
    ("LabelSelectorRequirement", "key"): {
        "maxLength": LABEL_KEY_MAX,
        "pattern": LABEL_KEY_PATTERN,
    },
    ("LabelSelectorRequirement", "values"): {
        "maxItems": SELECTOR_VALUES_MAX,
        "items": _LABEL_VALUE,
    },
    ("Compartment", "name"): {
        "x-kubernetes-validations": [
            _rule(
                f"self != '{spec.RESERVED_COMPARTMENT}'",
                f"{spec.RESERVED_COMPARTMENT} is reserved for nodes no compartment selects",
            )
        ]
    },
    ("DeploymentPolicySpec", "compartments"): {"maxItems": COMPARTMENTS_MAX},
}

# Kubernetes quantities: written as a number or a string, like core/v1 resource fields.
INT_OR_STRING: frozenset[tuple[str, str]] = frozenset(
    ("Resources", f) for f in ("cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit")
)

# Properties whose values are free-form JSON objects.
PRESERVE_UNKNOWN: frozenset[tuple[str, str]] = frozenset(
    {("Package", "vars"), ("EnvVar", "valueFrom")}
)


class _CrdSchemaGenerator(GenerateJsonSchema):
    """Emits ``default: {}`` for fields whose default factory is a model of all-default fields."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return {}
        return super().get_default_value(schema)


class SchemaError(ValueError):
    """The models produced something that cannot be a structural schema (a bug in the models)."""


def _convert(
    node: Schema,
    defs: Mapping[str, Schema],
    *,
    model: str | None,
    prop: str | None,
    keep_defaults: bool,
) -> Schema:
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        inner = _convert(defs[name], defs, model=name, prop=None, keep_defaults=keep_defaults)
        for key in ("description", "default"):
            if key in node:
                inner[key] = node[key]
        node = {k: v for k, v in node.items() if k not in ("description", "default")}
        if node:
            raise SchemaError(f"unsupported keywords next to $ref: {sorted(node)}")
        return inner
    if "anyOf" in node:
        members = [m for m in node.pop("anyOf") if m != {"type": "null"}]
        if len(members) != 1:
            raise SchemaError(f"anyOf with {len(members)} non-null members is not structural")
        if node.get("default", PydanticUndefined) is None:
            del node["default"]
        inner = _convert(members[0], defs, model=model, prop=prop, keep_defaults=keep_defaults)
        inner.update({k: v for k, v in node.items() if k != "title"})
        return inner

    out: Schema = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "default" and not keep_defaults:
            continue
        if key == "properties":
            owner = model or ""
            out["properties"] = {
                name: _convert_property(owner, name, sub, defs, keep_defaults=keep_defaults)
                for name, sub in value.items()
            }
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, model=None, prop=None, keep_defaults=keep_defaults)
            # True (free-form) is handled by PRESERVE_UNKNOWN; False is implied by pruning.
        elif key == "items":
            out[key] = _convert(value, defs, model=None, prop=None, keep_defaults=keep_defaults)
        elif key == "required":
            out[key] = sorted(value)
        else:
            out[key] = copy.deepcopy(value)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if model is not None and prop is None and "properties" in out:
        rules = MODEL_RULES.get(model)
        if rules:
            out["x-kubernetes-validations"] = copy.deepcopy(rules)
    return _ordered(out)


_KEY_ORDER = ("type", "description", "default", "enum", "required")


def _ordered(node: Schema) -> Schema:
    """Readable key order: type and description first, CEL rules last."""
    first = [k for k in _KEY_ORDER if k in node]
    last = [k for k in node if k.startswith("x-kubernetes-")]
    middle = [k for k in node if k not in first and k not in last]
    return {k: node[k] for k in (*first, *middle, *last)}


def _convert_property(
    owner: str, name: str, node: Schema, defs: Mapping[str, Schema], *, keep_defaults: bool
) -> Schema:
    out = _convert(node, defs, model=None, prop=name, keep_defaults=keep_defaults)
    if (owner, name) in PRESERVE_UNKNOWN:
        out.pop("additionalProperties", None)
        out["type"] = "object"
        out["x-kubernetes-preserve-unknown-fields"] = True
    if (owner, name) in INT_OR_STRING:
        out.pop("type", None)
        out["x-kubernetes-int-or-string"] = True
    extra = FIELD_EXTRAS.get((owner, name))
    if extra:
        merged = copy.deepcopy(extra)
        rules = out.pop("x-kubernetes-validations", []) + merged.pop("x-kubernetes-validations", [])
        out.update(merged)
        if rules:
            out["x-kubernetes-validations"] = rules
    return _ordered(out)


def model_schema(model: type[BaseModel], *, keep_defaults: bool = True) -> Schema:
    """The structural OpenAPI v3 schema of one pydantic model."""
    raw: JsonSchemaValue = model.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_CrdSchemaGenerator
    )
    defs = raw.get("$defs", {})
    return _convert(raw, defs, model=model.__name__, prop=None, keep_defaults=keep_defaults)


def _root_schema(
    spec_model: type[BaseModel],
    status_model: type[BaseModel] | None,
    *,
    description: str,
    root_rules: list[Schema],
) -> Schema:
    properties: Schema = {
        "apiVersion": {"type": "string", "description": "APIVersion of this object."},
        "kind": {"type": "string", "description": "Kind of this object."},
        "metadata": {"type": "object"},
        "spec": model_schema(spec_model),
    }
    if status_model is not None:
        properties["status"] = model_schema(status_model, keep_defaults=False)
    root: Schema = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": properties,
    }
    if root_rules:
        root["x-kubernetes-validations"] = root_rules
    return root


def _crd(
    *,
    kind: str,
    plural: str,
    short: str,
    schema: Schema,
    status_subresource: bool,
    columns: list[Schema],
) -> Schema:
    version: Schema = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["nodewright"],
            },
            "versions": [version],
        },
    }


def nodewright_crd() -> Schema:
    """The CustomResourceDefinition of ``NodeWright`` (with status subresource)."""
    schema = _root_schema(
        spec.NodeWrightSpec,
        status.NodeWrightStatus,
        description="NodeWright runs Ansible-role packages on the nodes it selects, in batches.",
        root_rules=[
            _rule(
                f"self.metadata.name.size() <= {spec.NAME_MAX}",
                f"metadata.name must be at most {spec.NAME_MAX} characters (node annotation "
                "keys are derived from it)",
                reason="FieldValueInvalid",
            )
        ],
    )
    columns = [
        {"name": "Status", "type": "string", "jsonPath": ".status.status"},
        {"name": "Complete", "type": "string", "jsonPath": ".status.completeNodes"},
        {"name": "InProgress", "type": "integer", "jsonPath": ".status.nodesInProgress"},
        {"name": "Packages", "type": "string", "jsonPath": ".status.packageList"},
        {"name": "Policy", "type": "string", "jsonPath": ".spec.deploymentPolicy"},
        {"name": "Checks", "type": "string", "jsonPath": ".status.checks"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return _crd(
        kind="NodeWright",
        plural="nodewrights",
        short="nw",
        schema=schema,
        status_subresource=True,
        columns=columns,
    )


def deploymentpolicy_crd() -> Schema:
    """The CustomResourceDefinition of ``DeploymentPolicy`` (no status)."""
    schema = _root_schema(
        spec.DeploymentPolicySpec,
        None,
        description="DeploymentPolicy splits nodes into compartments with budgets and canary "
        "batch strategies.",
        root_rules=[],
    )
    columns = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    return _crd(
        kind="DeploymentPolicy",
        plural="deploymentpolicies",
        short="nwdp",
        schema=schema,
        status_subresource=False,
        columns=columns,
    )


def all_crds() -> list[Schema]:
    """Both CRDs, NodeWright first."""
    return [nodewright_crd(), deploymentpolicy_crd()]


def file_name(crd: Mapping[str, Any]) -> str:
    """``<plural>.<group>.yaml``, the name the chart's ``crds/`` directory uses."""
    return f"{crd['metadata']['name']}.yaml"


HEADER = "# Generated from lifecycle/spec.py by `nwb crds`; do not edit by hand.\n"


def render(crd: Mapping[str, Any]) -> str:
    """One CRD as a YAML document (stable key order, no line wrapping)."""
    return HEADER + yaml.safe_dump(dict(crd), sort_keys=False, width=1_000_000)
