"""The `[kubernetes]` table of a stack (`KubeSettings`) and the parsers of its values.

Structured values (resources, tolerations, labels) come as a TOML value or as text from
`--set` or the environment (JSON, or a TOML inline value such as `{ cpu = "8" }`); a bad
one raises ValueError naming the sub-key and what is allowed (the loader adds the key).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

from composer.stack.values import choice, parse_bool, parse_duration, parse_size, parse_text

QUANTITY_HELP = "a Kubernetes quantity such as 500m, 2, 1.5, 64Gi or 100M"
RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
RESOURCE_OWNERS_HELP = "gateway, server (every variant) or a variant name"
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PULL_POLICIES = ("IfNotPresent", "Always", "Never")
PDB_CHOICES = ("gateway", "all", "none")
_QUANTITY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][-+]?\d+)?")
_SUFFIX = {
    "m": Fraction(1, 1000),
    **{prefix: Fraction(1000**power) for power, prefix in enumerate("kMGTPE", 1)},
    **{f"{prefix}i": Fraction(1024**power) for power, prefix in enumerate("KMGTPE", 1)},
}
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")  # an object name (RFC 1123 label)

Resources = dict[str, dict[str, str]]  # `{"requests": {"cpu": "8"}, "limits": {"memory": "96Gi"}}`


def structured(raw: object) -> object:
    """A TOML value as is; text parsed as JSON, else as a TOML inline value."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        pass
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def quantity_value(text: str) -> Fraction:
    """A quantity's value (cores or bytes) for comparisons."""
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(QUANTITY_HELP)
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix[:1] in {"e", "E"}:
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX.get(suffix, Fraction(1))


def parse_quantity(raw: object, where: str) -> str:
    """A positive Kubernetes quantity, as text."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError(f"{where}: {QUANTITY_HELP}")
    text = str(raw).strip()
    try:
        value = quantity_value(text)
    except ValueError:
        raise ValueError(f"{where} = {text!r}: {QUANTITY_HELP}") from None
    if value <= 0:
        raise ValueError(f"{where} = {text!r}: {QUANTITY_HELP}, greater than zero")
    return text


def _table(raw: object, where: str, allowed: str) -> dict:
    value = structured(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{where}: a table of {allowed}")
    return value


def parse_one_resources(raw: object, where: str) -> Resources:
    """`requests` and `limits` of cpu, memory and ephemeral-storage; requests <= limits."""
    table = _table(raw, where, "requests and limits")
    out: Resources = {}
    for kind, values in table.items():
        if kind not in ("requests", "limits"):
            raise ValueError(f"{where}.{kind}: not a key: use requests or limits")
        items = _table(values, f"{where}.{kind}", ", ".join(RESOURCE_NAMES))
        parsed: dict[str, str] = {}
        for name, amount in items.items():
            if name == "nvidia.com/gpu":
                raise ValueError(f"{where}.{kind}.{name}: GPUs come from stack.tensor_parallel_size")
            if name not in RESOURCE_NAMES:
                raise ValueError(f"{where}.{kind}.{name}: not a resource: use {', '.join(RESOURCE_NAMES)}")
            parsed[name] = parse_quantity(amount, f"{where}.{kind}.{name}")
        out[kind] = parsed
    for name, amount in out.get("requests", {}).items():
        limit = out.get("limits", {}).get(name)
        if limit is not None and quantity_value(amount) > quantity_value(limit):
            raise ValueError(
                f"{where}.requests.{name} = {amount!r} is above limits.{name} = {limit!r}: "
                "a request must not exceed its limit"
            )
    return out


def parse_resources(raw: object) -> dict[str, Resources]:
    """Per owner (gateway, server, or a variant name): requests and limits."""
    table = _table(raw, "resources", RESOURCE_OWNERS_HELP)
    out: dict[str, Resources] = {}
    for owner, value in table.items():
        if not isinstance(owner, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", owner):
            raise ValueError(f"resources.{owner}: not a name: use {RESOURCE_OWNERS_HELP}")
        out[owner] = parse_one_resources(value, f"resources.{owner}")
    return out


def parse_label_key(key: object, where: str) -> str:
    """A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63."""
    text = str(key)
    prefix, _, name = text.rpartition("/")
    ok = bool(_LABEL_NAME.fullmatch(name)) and (
        not prefix or (len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.fullmatch(prefix)))
    )
    if not ok:
        raise ValueError(
            f"{where} {text!r}: not a label key (a name of at most 63 letters, digits, '-', '_' "
            "and '.', with an optional DNS prefix and '/')"
        )
    return text


def parse_label_value(value: object, where: str) -> str:
    """A label value: at most 63 letters, digits, '-', '_' and '.', or empty."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{where}: a string label value")
    text = str(value)
    if len(text) > 63 or not LABEL_VALUE.fullmatch(text):
        raise ValueError(f"{where} = {text!r}: not a label value (at most 63 letters, digits, '-', '_', '.')")
    return text


def parse_labels(raw: object) -> dict[str, str]:
    """A table of label keys to label values (nodeSelector, ServiceMonitor labels)."""
    table = _table(raw, "the value", "label keys to values")
    return {parse_label_key(k, "key"): parse_label_value(v, f"[{k!r}]") for k, v in table.items()}


def parse_tolerations(raw: object) -> list[dict[str, object]]:
    """A list of tolerations as Kubernetes writes them (key, operator, value, effect, tolerationSeconds)."""
    value = structured(raw)
    if not isinstance(value, list):
        raise ValueError('a list of tables such as [{key = "nvidia.com/gpu", operator = "Exists"}]')
    out = []
    for index, item in enumerate(value):
        where = f"tolerations[{index}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: a table with {', '.join(TOLERATION_KEYS)}")
        unknown = sorted(set(item) - set(TOLERATION_KEYS))
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: not a key: use {', '.join(TOLERATION_KEYS)}")
        operator = item.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            raise ValueError(f"{where}.operator = {operator!r}: use Equal or Exists")
        toleration: dict[str, object] = {}
        if "key" in item:
            toleration["key"] = parse_label_key(item["key"], f"{where}.key")
        elif operator == "Equal":
            raise ValueError(f"{where}: a key is needed with operator Equal (or use operator Exists)")
        toleration["operator"] = operator
        if "value" in item:
            if operator == "Exists":
                raise ValueError(f"{where}.value: operator Exists takes no value")
            toleration["value"] = parse_label_value(item["value"], f"{where}.value")
        effect = item.get("effect", "")
        if effect not in ("", *EFFECTS):
            raise ValueError(
                f"{where}.effect = {effect!r}: use {', '.join(EFFECTS)} (or leave it out for all)"
            )
        if effect:
            toleration["effect"] = effect
        if "tolerationSeconds" in item:
            if effect != "NoExecute":
                raise ValueError(f"{where}.tolerationSeconds: only with effect NoExecute")
            seconds = item["tolerationSeconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
                raise ValueError(f"{where}.tolerationSeconds: a whole number of seconds, zero or more")
            toleration["tolerationSeconds"] = seconds
        out.append(toleration)
    return out


def parse_object_name(raw: object) -> str:
    """A DNS-subdomain object name (at most 253), or empty for none."""
    text = str(raw).strip()
    if text and (len(text) > 253 or not _DNS_SUBDOMAIN.fullmatch(text)):
        raise ValueError("a Kubernetes object name (lowercase letters, digits, '-' and '.'), or empty")
    return text


def parse_names(raw: object) -> tuple[str, ...]:
    """A list of object names (or one comma-separated string)."""
    value = structured(raw)
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ValueError('a list of Secret names such as ["regcred"]')
    names = tuple(parse_object_name(item) for item in items)
    return tuple(name for name in names if name)


def parse_pdb(raw: object) -> str:
    """Which pods get a PodDisruptionBudget: gateway (true), all, none (false)."""
    text = str(raw).strip().lower()
    if isinstance(raw, bool) or text in ("true", "false"):
        return "gateway" if raw is True or text == "true" else "none"
    if text not in PDB_CHOICES:
        raise ValueError("one of gateway (or true), all, none (or false)")
    return text


def parse_optional_duration(raw: object) -> int:
    """A duration, or off/0 for none (0)."""
    if raw is False or str(raw).strip().lower() in ("off", "0", "false", "none", ""):
        return 0
    try:
        return parse_duration(raw)
    except ValueError:
        raise ValueError("off, or a duration such as 20m or 1h") from None


MODEL_SOURCES = ("hostPath", "pvc")


@dataclass(frozen=True)
class KubeSettings:
    """Kubernetes-only settings; the defaults render the committed `kubernetes/` tree."""

    models: str = "hostPath"
    model_claim: str = "vllm-models"
    draft_claim: str = "vllm-drafts"
    namespace: str = ""
    service_url: str = ""
    kubectl: str = "kubectl"
    context: str = ""  # kubectl --context ('' = kubeconfig's current context)
    kubeconfig: str = ""  # KUBECONFIG for kubectl ('' = kubectl's own default)
    resources: dict[str, Resources] = field(default_factory=dict)
    shm_size: int = 8 * 2**30  # the /dev/shm emptyDir's sizeLimit
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, object]] = field(default_factory=lambda: list(DEFAULT_TOLERATIONS))
    runtime_class: str = ""
    priority_class: str = ""
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    pdb: str = "gateway"
    liveness: int = 0  # seconds of failed /health before vLLM is restarted (0 = no liveness probe)
    gateway_grace: int = 0  # the gateway's terminationGracePeriodSeconds (0 = drain_timeout + 30)
    service_monitor: bool = False
    monitor_labels: dict[str, str] = field(default_factory=dict)
    scrape_interval: int = 30
    scrape_annotations: bool = False


DEFAULT_TOLERATIONS: tuple[dict[str, object], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
"""GPU node pools are commonly tainted so; the toleration is harmless where they are not."""


def parse_models(raw: object) -> str:
    """`hostPath` or `pvc` (case-insensitive)."""
    text = str(raw).strip()
    for source in MODEL_SOURCES:
        if text.lower() == source.lower():
            return source
    raise ValueError("hostPath (the node's MODEL_DIR and DRAFT_DIR) or pvc (model_claim and draft_claim)")


def parse_dns_label(raw: object) -> str:
    """A Kubernetes object name: lowercase letters, digits and '-', at most 63 characters."""
    text = str(raw)
    if not DNS_LABEL.fullmatch(text):
        raise ValueError("lowercase letters, digits and '-', starting and ending with a letter or digit")
    return text


def parse_namespace(raw: object) -> str:
    """A namespace, or empty for kubectl's current one."""
    return "" if str(raw) == "" else parse_dns_label(raw)


def parse_url(raw: object) -> str:
    """An http(s) URL without a trailing slash, or empty to use `kubectl port-forward`."""
    text = str(raw).strip().rstrip("/")
    if text and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", text):
        raise ValueError("an http:// or https:// URL, or empty to use kubectl port-forward")
    return text


def parse_context(raw: object) -> str:
    """Any text without NUL bytes or newlines, or empty for kubectl's default."""
    text = str(raw).strip()
    if "\x00" in text or "\n" in text:
        raise ValueError("a name or path without NUL bytes or newlines, or empty")
    return text


KUBE_SETTINGS: tuple[tuple[str, str | None, Callable[[object], object], object], ...] = (
    # key, environment variable, parser, default
    ("models", None, parse_models, KubeSettings.models),
    ("model_claim", None, parse_dns_label, KubeSettings.model_claim),
    ("draft_claim", None, parse_dns_label, KubeSettings.draft_claim),
    ("namespace", "KUBE_NAMESPACE", parse_namespace, KubeSettings.namespace),
    ("service_url", "KUBE_SERVICE_URL", parse_url, KubeSettings.service_url),
    ("kubectl", "KUBECTL", parse_text, KubeSettings.kubectl),
    ("context", "KUBE_CONTEXT", parse_context, ""),
    ("kubeconfig", "KUBECONFIG", parse_context, ""),
    ("resources", None, parse_resources, {}),
    ("shm_size", None, parse_size, KubeSettings.shm_size),
    ("node_selector", None, parse_labels, {}),
    ("tolerations", None, parse_tolerations, list(DEFAULT_TOLERATIONS)),
    ("runtime_class", None, parse_object_name, ""),
    ("priority_class", None, parse_object_name, ""),
    ("service_account", None, parse_object_name, ""),
    ("image_pull_policy", None, choice(PULL_POLICIES), KubeSettings.image_pull_policy),
    ("image_pull_secrets", None, parse_names, ()),
    ("pdb", None, parse_pdb, KubeSettings.pdb),
    ("liveness", None, parse_optional_duration, 0),
    ("gateway_grace", None, parse_optional_duration, 0),
    ("service_monitor", None, parse_bool, False),
    ("monitor_labels", None, parse_labels, {}),
    ("scrape_interval", None, parse_duration, KubeSettings.scrape_interval),
    ("scrape_annotations", None, parse_bool, False),
)
