"""Load a stack from composer.toml files, a .env file, the environment and CLI flags.

Precedence, highest first: `--set` flags > environment > .env > composer.toml (later
`--stack` files over earlier ones) > defaults; an empty value in the environment or .env
counts as unset. An invalid value raises ConfigError naming the key, the value, its source
and what is allowed.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from composer.errors import ConfigError, did_you_mean
from composer.gateway.config import VARIANT as GATEWAY_VARIANT
from composer.stack import adaptive
from composer.stack import values as v
from composer.stack.files import DEFAULT_ENV_FILE, files_read_note, find_stack_files, read_dotenv, read_toml
from composer.stack.files import STACK_FILES_VAR as STACK_FILES_VAR
from composer.stack.gateway import GATEWAY_SETTINGS, HOLD_TIMEOUT_MAX, GatewaySettings
from composer.stack.kubernetes import KUBE_SETTINGS, KubeSettings
from composer.stack.model import Speculative, Stack, Variant, image_env_var
from composer.stack.placement import check_live, check_replicas, parse_placement, parse_replicas
from composer.stack.settings import KEYS, SPECULATIVE, STACK_SETTINGS, VARIANT, settable_keys
from composer.stack.workload_classes import check_workload_name, gateway_workloads

API_KEY_VAR = "VLLM_API_KEY"

T = TypeVar("T")


STACK_KEYS = {s.key for s in STACK_SETTINGS} | {"env"}
VARIANT_KEYS = {k.name for k in KEYS if k.table == VARIANT}
SPECULATIVE_KEYS = {k.name for k in KEYS if k.table == SPECULATIVE}
RESERVED_SPECULATIVE_EXTRA = {"method", "num_speculative_tokens", "attention_backend"}
RESERVED_SPECULATIVE_EXTRA_AS = {
    adaptive.SCHEDULE_KEY: "per_batch_size",
    adaptive.ADAPTIVE_KEY: "adaptive_verification",
}
VARIANT_ENV = {"kv_cache_memory": "KV_CACHE_MEMORY", "num_speculative_tokens": "NUM_SPECULATIVE_TOKENS"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
GATEWAY_VARIANT_MAX = 64  # the gateway's `config.VARIANT` pattern
_IMAGE_KEY = re.compile(r"[a-z][a-z0-9_-]*")


def load_stack(
    stack_files: Sequence[str | Path] | None = None,
    env_file: str | Path | None = DEFAULT_ENV_FILE,
    environ: Mapping[str, str] | None = None,
    flags: Sequence[str] = (),
    flag_labels: Mapping[str, str] | None = None,
) -> Stack:
    """Read and validate a stack; `flags` are `--set` strings, `flag_labels` name other options (`-p`)."""
    environ = dict(os.environ if environ is None else environ)
    dotenv, dotenv_path = read_dotenv(env_file)
    files = find_stack_files(stack_files, environ, dotenv)
    toml, origin = read_toml(files)
    home = files[0].resolve().parent if files else None
    parsed = _parse_flags(flags)
    return _build(
        _Resolver(toml, origin, dotenv, dotenv_path, environ, parsed, home, files, flag_labels or {})
    )


def _parse_flags(flags: Sequence[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for flag in flags:
        key, sep, value = flag.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {v.shown(flag)}: expected KEY=VALUE, e.g. --set stack.port=8001")
        key = key.strip()
        parsed[key if "." in key else f"stack.{key}"] = value
    return parsed


@dataclass
class _Resolver:
    """The raw inputs of a load, lowest precedence first; looks a value up through them and validates it."""

    toml: dict
    toml_origin: dict[str, Path]
    dotenv: dict[str, str]
    dotenv_path: Path | None
    environ: Mapping[str, str]
    flags: dict[str, str]
    home: Path | None
    files: Sequence[Path]
    flag_labels: Mapping[str, str]  # dotted key -> its flag (`flag -p`)
    record: dict[str, str] = field(default_factory=dict)
    written: dict[str, object] = field(default_factory=dict)  # dotted key -> the value as written (`15m`)
    inherited: dict[str, str] = field(default_factory=dict)  # a variant's dotted key -> the key that sets it

    def get(
        self,
        dotted: str,
        parse: Callable[[object], T],
        default: object,
        env: str | None = None,
        toml_value: object = None,
        is_path: bool = False,
    ) -> T:
        raw, where, base = self.lookup(dotted, env, toml_value, default)
        try:
            value = parse(raw)
        except ValueError as err:
            raise ConfigError(f"invalid {dotted} = {v.shown(raw)} (from {where}): expected {err}") from err
        if is_path and isinstance(value, str) and base is not None and not os.path.isabs(value):
            value = cast(T, str((base / value).resolve()))
        self.record[dotted] = where
        self.written[dotted] = raw
        return value

    def key_of(
        self,
        prefix: str,
        table: Mapping[str, Any],
        key: str,
        parse: Callable[[object], T],
        default: object = None,
        env: str | None = None,
    ) -> T:
        """`get` for `key` of a table as the file has it: `prefix.key`, its value in `table`."""
        return self.get(f"{prefix}.{key}", parse, default, env, table.get(key))

    def lookup(
        self, dotted: str, env: str | None, toml_value: object, default: object
    ) -> tuple[object, str, Path | None]:
        if dotted in self.flags:
            return self.flags[dotted], self.flag_labels.get(dotted, "flag --set"), Path.cwd()
        if env and self.environ.get(env):
            return self.environ[env], f"environment {env}", Path.cwd()
        if env and self.dotenv.get(env):
            path = self.dotenv_path
            where = f"{path.name if path else '.env'} {env}"  # as `config` names it: `.env.demo VAR`
            return self.dotenv[env], where, path.parent if path else Path.cwd()
        if toml_value is not None:
            origin = self.toml_origin.get(self.inherited.get(dotted, dotted))
            label = str(origin.name) if origin else "composer.toml"
            return toml_value, label, origin.parent if origin else Path.cwd()
        return default, "default", Path.cwd()

    def note(self, dotted: str) -> None:
        """Record the stack file that set a value read as it is (`env` entries, `[workloads]`)."""
        origin = self.toml_origin.get(self.inherited.get(dotted, dotted))
        if origin is not None:
            self.record[dotted] = origin.name


def _build(resolve: _Resolver) -> Stack:
    raw_stack = _table(resolve.toml, "stack", resolve.toml_origin)
    if "api_key" in raw_stack or API_KEY_VAR.lower() in raw_stack:
        raise ConfigError("stack.api_key: secrets never go in composer.toml; set VLLM_API_KEY in .env")
    _reject_unknown(raw_stack, STACK_KEYS, "stack")
    defaults = {"project": _folder_project(resolve, raw_stack.get("project"))}
    settings: dict[str, Any] = {
        s.key: resolve.get(
            f"stack.{s.key}", s.parse, defaults.get(s.key, s.default), s.env, raw_stack.get(s.key), s.is_path
        )
        for s in STACK_SETTINGS
    }
    if resolve.record["stack.project"] == "default":
        resolve.record["stack.project"] = "default (the stack file's folder)"
    images = _images(resolve)
    variants = _variants(resolve, images, str(settings["standby"]))
    workloads = _workloads(resolve, variants)
    for workload in workloads:
        resolve.note(f"workloads.{workload}")
    kubernetes = _settings_table(resolve, "kubernetes", KUBE_SETTINGS, KubeSettings)
    _refuse_shared_mount_targets(settings, variants, resolve.record)
    gateway = _settings_table(resolve, "gateway", GATEWAY_SETTINGS, GatewaySettings)
    if resolve.record.get("gateway.hold_timeout") == "default":  # the default follows the start budget
        start_period = settings["start_period"]  # seconds: parse_duration's int
        if isinstance(start_period, int) and start_period > gateway.hold_timeout:
            start_period = min(start_period, HOLD_TIMEOUT_MAX)  # the gateway's own bound
            gateway = replace(gateway, hold_timeout=start_period)
            resolve.record["gateway.hold_timeout"] = "default (stack.start_period)"
            resolve.written["gateway.hold_timeout"] = start_period
    _refuse_standby(variants, gateway, settings)
    variants = _adaptive_speculation(
        variants,
        str(settings["attention_backend"]),
        resolve.record,
        {key: origin for key, origin in resolve.inherited.items() if key not in resolve.flags},
    )
    for name in gateway.live:  # the stack's own live set must start whole
        if name in variants and variants[name].refused:
            raise ConfigError(f"gateway.live names {name}: {variants[name].refused}")
    _check_switching(gateway, variants, workloads, str(settings["served_model_name"]))
    check_live(variants, gateway.live, gpus_used=settings["gpus"] is not None)
    api_key, where, _ = resolve.lookup(API_KEY_VAR, API_KEY_VAR, None, None)
    if api_key is not None:
        resolve.record[API_KEY_VAR] = where
        if not v.is_header_safe(str(api_key)):
            # Never shown: only where it came from and what is allowed.
            raise ConfigError(
                f"invalid {API_KEY_VAR} (from {resolve.record[API_KEY_VAR]}): expected {v.API_KEY_HELP}"
            )
    unused = sorted(set(resolve.flags) - set(resolve.record))
    if unused:
        hint = did_you_mean(unused[0], settable_keys(list(variants)))
        raise ConfigError(
            f"--set {unused[0]}: not a setting of this stack:{hint or ''} use a key that "
            "`compose-spec config --keys` lists, e.g. stack.port or variants.mtp.kv_cache_memory"
        )
    return Stack(
        **settings,
        images=images,
        variants=variants,
        workloads=workloads,
        env=_env_table(raw_stack.get("env", {}), "stack.env", resolve),
        kubernetes=kubernetes,
        gateway=gateway,
        sources=resolve.record,
        written=resolve.written,
        api_key=None if api_key is None else str(api_key),
        home=resolve.home,
    )


def compose_project_name(folder: str) -> str:
    """A folder's name as docker compose makes it a project name ('' when nothing is left)."""
    kept = re.sub(r"[^a-z0-9_-]", "", folder.lower())
    return re.sub(r"^[^a-z0-9]+", "", kept)


def _folder_project(resolve: _Resolver, toml_value: object) -> str | None:
    """The default project, the stack file's folder name; refused when unusable and nothing else names one."""
    folder = (resolve.home or Path.cwd()).name
    name = compose_project_name(folder)
    if not name and resolve.lookup("stack.project", "COMPOSE_PROJECT_NAME", toml_value, None)[1] == "default":
        raise ConfigError(
            f"the stack file's folder {folder!r} gives no compose project name (kept are lowercase "
            "letters, digits, '-' and '_', from the first letter or digit on): set stack.project "
            "in the stack file, or COMPOSE_PROJECT_NAME, or pass -p NAME"
        )
    return name or None


def _settings_table(resolve: _Resolver, table: str, settings: Sequence[tuple], typed: Callable[..., T]) -> T:
    raw = _table(resolve.toml, table)
    _reject_unknown(raw, {key for key, *_ in settings}, table)
    return typed(
        **{key: resolve.key_of(table, raw, key, parse, default, env) for key, env, parse, default in settings}
    )


def _refuse_standby(
    variants: Mapping[str, Variant], gateway: GatewaySettings, settings: Mapping[str, object]
) -> None:
    """A sleeping variant keeps its container: only the gateway can keep it off the shared port.
    Sleep level 2 loses a speculative variant's drafter weights on wake (a vLLM bug)."""
    sleepers = sorted(n for n, var in variants.items() if var.standby == "sleep")
    if sleepers and not gateway.enabled:
        raise ConfigError(
            f"variants.{sleepers[0]}.standby = 'sleep' needs the gateway (gateway.enabled = true): "
            'a sleeping container cannot share the published port; use standby = "stop"'
        )
    speculative = [n for n in sleepers if variants[n].speculative]
    if speculative and settings["sleep_level"] == 2 and not settings["allow_sleep_level_2_with_speculation"]:
        raise ConfigError(
            f"stack.sleep_level = 2 with speculative variant {speculative[0]} on sleep standby: "
            "vLLM does not reload the drafter after a level-2 wake (MTP acceptance drops to 0, "
            "EAGLE3 crashes); allowed: sleep_level = 1, or set "
            "allow_sleep_level_2_with_speculation = true to accept it"
        )


_ALIAS = re.compile(r"[^\s,=]{1,200}")


def _check_switching(
    gateway: GatewaySettings, variants: Mapping[str, Variant], workloads: Mapping[str, str], served: str
) -> None:
    """Aliases are distinct model names; switching needs the gateway; auto needs workload classes."""
    owner: dict[str, str] = {}
    for name, variant in variants.items():
        for alias in variant.aliases:
            if alias == served:
                raise ConfigError(
                    f"invalid variants.{name}.aliases: {alias!r} is the served model name, which always "
                    "reaches the serving variant: expected another model name"
                )
            if alias in owner:
                raise ConfigError(
                    f"invalid variants.{name}.aliases: {alias!r} is also an alias of variant "
                    f"{owner[alias]}: expected each alias on one variant"
                )
            owner[alias] = name
    if gateway.switches and not gateway.enabled:
        raise ConfigError(
            "gateway.switch_on_model and gateway.policy = 'auto' need the gateway (gateway.enabled = true)"
        )
    if gateway.policy == "auto" and not gateway_workloads(workloads):
        raise ConfigError(
            "gateway.policy = 'auto' needs workload classes in [workloads], e.g. chat-1 = \"mtp\" and "
            'long-16 = "baseline" (run `compose-spec recommend --write`)'
        )


def _aliases(prefix: str, raw: object) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(a, str) and _ALIAS.fullmatch(a) for a in raw):
        raise ConfigError(
            f"invalid {prefix}.aliases = {v.shown(raw)}: expected a list of model names "
            "(no spaces, ',' or '=', at most 200 characters), e.g. [\"fast\"]"
        )
    if any(a.startswith("-") for a in raw):
        raise ConfigError(f"invalid {prefix}.aliases = {v.shown(raw)}: a model name may not start with '-'")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"invalid {prefix}.aliases = {v.shown(raw)}: an alias is listed twice")
    return tuple(raw)


def _from(origin: Mapping[str, Path], key: str) -> str:
    """` (from composer.toml)`: the stack file that set `key`, for an error ('' when none did)."""
    return f" (from {origin[key].name})" if key in origin else ""


def _table(data: Mapping, key: str, origin: Mapping[str, Path] | None = None) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        where = _from(origin or {}, key)
        raise ConfigError(f"invalid {key} = {v.shown(value)}{where}: expected a table ([{key}])")
    return value


def _refuse_shared_mount_targets(
    settings: Mapping[str, object], variants: Mapping[str, Variant], record: Mapping[str, str]
) -> None:
    """Docker keeps one bind per container path: the model and the draft need their own."""
    if settings["model_path"] != settings["draft_path"]:
        return
    users = sorted(n for n, var in variants.items() if var.speculative and var.speculative.draft_model)
    if users:
        raise ConfigError(
            f"invalid stack.draft_path = {v.shown(settings['draft_path'])} "
            f"(from {record.get('stack.draft_path', 'default')}): it equals stack.model_path "
            f"(from {record.get('stack.model_path', 'default')}), so variant {users[0]} would mount the "
            "model and the draft on one container path: expected a different absolute path, "
            "e.g. /models/draft"
        )


def _reject_unknown(table: Mapping, allowed: set[str], where: str) -> None:
    """A key no table has: its close match as --set names one, else the table's keys when they
    are few, else where every key is listed."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        key = unknown[0] if unknown[0].isprintable() else v.shown(unknown[0])  # one line, always
        hint = did_you_mean(f"{where}.{unknown[0]}", (f"{where}.{name}" for name in allowed))
        if hint:
            fix = f":{hint}"
        elif len(allowed) <= 8:
            fix = ": allowed are " + ", ".join(sorted(allowed))
        else:
            fix = ": `compose-spec config --keys` lists every key"
        raise ConfigError(f"unknown key {where}.{key}{fix}")


def _images(resolve: _Resolver) -> dict[str, str]:
    raw = _table(resolve.toml, "images", resolve.toml_origin)
    if not raw:
        raise ConfigError(
            'images: define at least one image, e.g. [images] vllm = "vllm/vllm-openai:TAG"'
            + files_read_note(resolve.files)
        )
    seen: dict[str, str] = {}
    for key in raw:
        if not _IMAGE_KEY.fullmatch(key):
            raise ConfigError(
                f"invalid image name images.{key}: expected lowercase letters, digits, '-' and '_', "
                "starting with a letter"
            )
        other = seen.setdefault(image_env_var(key), key)
        if other != key:
            raise ConfigError(f"images.{other} and images.{key} share the variable {image_env_var(key)}")
    return {
        key: str(resolve.get(f"images.{key}", v.parse_image_ref, None, image_env_var(key), value))
        for key, value in raw.items()
    }


def _env_table(raw: object, where: str, resolve: _Resolver) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise ConfigError(f'invalid {where} = {v.shown(raw)}: expected a table of NAME = "value"')
    result = []
    for name, value in raw.items():
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"invalid {where} name {v.shown(name)}: expected ASCII letters, digits and '_', "
                "not starting with a digit"
            )
        if name == API_KEY_VAR:
            raise ConfigError(f"{where}.{name}: secrets never go in composer.toml; use .env")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"invalid {where}.{name} = {v.shown(value)}: expected a string or number")
        if "\x00" in str(value):
            raise ConfigError(
                f"invalid {where}.{name} = {v.shown(value)}: expected a string without NUL bytes"
            )
        result.append((name, str(value)))
        resolve.note(f"{where}.{name}")
    return tuple(sorted(result))


def _variants(resolve: _Resolver, images: dict[str, str], stack_standby: str = "stop") -> dict[str, Variant]:
    raw = _table(resolve.toml, "variants", resolve.toml_origin)
    if not raw:
        raise ConfigError(
            "variants: define at least one variant, e.g. [variants.baseline]" + files_read_note(resolve.files)
        )
    for name, table in raw.items():
        if not isinstance(table, dict):
            where = _from(resolve.toml_origin, f"variants.{name}")
            raise ConfigError(
                f"invalid variants.{name} = {v.shown(table)}{where}: expected a table ([variants.{name}])"
            )
    return {name: _variant(name, raw, resolve, images, stack_standby) for name in raw}


def _flatten(
    name: str, raw: Mapping[str, dict], chain: tuple[str, ...] = (), defined: dict[str, str] | None = None
) -> dict:
    """A variant's table with its `extends` chain merged; `defined` maps each key to the one setting it."""
    defined = {} if defined is None else defined
    if name in chain:
        raise ConfigError(f"variants.{name}.extends forms a cycle: {' -> '.join((*chain, name))}")
    table = raw.get(name)
    if not isinstance(table, dict):
        raise ConfigError(
            f"invalid variants.{chain[-1]}.extends = {v.shown(name)}: choose one of " + ", ".join(sorted(raw))
        )
    _reject_unknown(table, VARIANT_KEYS, f"variants.{name}")
    parent = table.get("extends")
    merged = _flatten(str(parent), raw, (*chain, name), defined) if parent is not None else {}
    for key, value in table.items():
        if key == "extends":
            continue
        defined[key] = f"variants.{name}.{key}"
        for sub in value if isinstance(value, dict) else ():
            defined[f"{key}.{sub}"] = f"variants.{name}.{key}.{sub}"
        if key in {"speculative", "env"} and isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def _variant(
    name: str,
    raw: Mapping[str, dict],
    resolve: _Resolver,
    images: dict[str, str],
    stack_standby: str = "stop",
) -> Variant:
    try:
        good = v.parse_name(name) == name and GATEWAY_VARIANT.fullmatch(name) is not None
    except ValueError:
        good = False
    if not good:  # the gateway routes, logs and labels metrics by it: it refuses what it cannot
        raise ConfigError(
            f"invalid variant name {v.shown(name)} ({len(name)} characters): expected lowercase letters, "
            f"digits, '-' and '_', starting with a letter or digit, at most {GATEWAY_VARIANT_MAX} "
            "characters (the gateway refuses longer names)"
        )
    defined: dict[str, str] = {}
    table = _flatten(name, raw, defined=defined)
    prefix = f"variants.{name}"
    resolve.inherited.update({f"{prefix}.{key}": origin for key, origin in defined.items()})
    key = functools.partial(resolve.key_of, prefix, table)
    image_key = key("image", lambda x: _image_key(x, images), next(iter(images)))
    description = key("description", str, "")
    kv = key("kv_cache_memory", _or_none(v.parse_size), env=VARIANT_ENV["kv_cache_memory"])
    min_tokens = None
    if table.get("min_kv_cache_tokens") is not None:
        min_tokens = key("min_kv_cache_tokens", v.parse_positive_int)
    extra_args = key("extra_args", _extra_args, [])
    _refuse_rendered_flags(f"{prefix}.extra_args", extra_args)
    standby = key("standby", v.parse_standby, stack_standby)
    weights = key("weights_bytes", v.parse_optional_size)
    gpus = key("gpus", parse_placement)
    replicas = key("replicas", _or_none(parse_replicas))
    return Variant(
        gpus=gpus,
        replicas=check_replicas(name, gpus, replicas),
        name=name,
        image_key=image_key,
        kv_cache_memory=kv,
        speculative=_speculative(prefix, table.get("speculative"), resolve),
        env=_env_table(table.get("env", {}), f"{prefix}.env", resolve),
        extra_args=tuple(extra_args),
        min_kv_cache_tokens=min_tokens,
        description=description,
        standby=standby,
        weights_bytes=weights,
        # its own, never inherited through extends
        aliases=_aliases(prefix, resolve.key_of(prefix, raw[name], "aliases", _json_list, [])),
    )


def _or_none(parse: Callable[[object], T]) -> Callable[[object], T | None]:
    return lambda raw: None if raw is None else parse(raw)


def _json_list(raw: object) -> object:
    """A list as `--set` gives it (JSON text, e.g. `["fast"]`); anything else as it is."""
    if isinstance(raw, str) and raw.lstrip().startswith("["):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _extra_args(raw: object) -> list[str]:
    args = _json_list(raw)
    if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a for a in args):
        raise ValueError(
            'a list of strings without NUL bytes (from --set: JSON, e.g. ["--max-num-seqs", "64"])'
        )
    return args


RENDERED_FLAGS = {
    "--api-key": "a secret on the command line shows in `ps`, `docker inspect` and the rendered files; "
    "set VLLM_API_KEY (the environment or the env file) instead, which the server reads",
    "--port": "compose-spec renders --port 8000, where the gateway and the healthcheck reach the "
    "server; set stack.port for the port clients use",
    "--host": "the server must listen on its container's every address for the gateway and the "
    "healthcheck; remove it (stack.bind_address sets the host address the port binds)",
}
"""vLLM flags extra_args may not set, and why (never shown with their value: it may be a secret)."""


def _refuse_rendered_flags(key: str, args: object) -> None:
    for arg in args if isinstance(args, list | tuple) else ():
        flag = arg.partition("=")[0].replace("_", "-") if arg.startswith("--") else ""
        if flag in RENDERED_FLAGS:
            raise ConfigError(f"{key} sets {flag}: {RENDERED_FLAGS[flag]}")


def _image_key(raw: object, images: Mapping[str, str]) -> str:
    if not isinstance(raw, str) or raw not in images:
        raise ValueError("a key of [images], one of " + ", ".join(sorted(images)))
    return raw


def _speculative(prefix: str, raw: object, resolve: _Resolver) -> Speculative | None:
    if raw is None or raw == "none":
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f'invalid {prefix}.speculative = {v.shown(raw)}: expected a table or "none"')
    _reject_unknown(raw, SPECULATIVE_KEYS, f"{prefix}.speculative")
    where = f"{prefix}.speculative"
    if "method" not in raw:
        raise ConfigError(f"{where}.method is missing: choose one of " + ", ".join(v.SPECULATIVE_METHODS))
    key_of = functools.partial(resolve.key_of, where, raw)
    method = key_of("method", v.parse_method)
    # a K schedule is written for its maximum K: NUM_SPECULATIVE_TOKENS (meant for the
    # static variants) does not move it, or one .env value would break the schedule
    scheduled = raw.get("per_batch_size") is not None
    env = None if scheduled else VARIANT_ENV["num_speculative_tokens"]
    k = key_of("num_speculative_tokens", v.parse_speculative_tokens, env=env)
    backend = None
    if raw.get("attention_backend") is not None:
        backend = key_of("attention_backend", v.parse_attention_backend)
    draft = key_of("draft_model", v.parse_bool, False)
    extra = raw.get("extra", {})
    if not isinstance(extra, dict):
        raise ConfigError(f"invalid {where}.extra = {v.shown(extra)}: expected a table")
    if "tensor_parallel_size" in extra:
        raise ConfigError(f"{where}.extra.tensor_parallel_size: use draft_tensor_parallel_size")
    reserved = RESERVED_SPECULATIVE_EXTRA | ({"model"} if draft else set())
    for key in sorted(reserved & set(extra)):
        raise ConfigError(f"{where}.extra.{key}: set it as {where}.{key} (or draft_model for model)")
    for key in sorted(adaptive.REMOVED_KEYS & set(extra)):
        raise ConfigError(
            f"{where}.extra.{key}: removed from vLLM (PR #35060; it did nothing since v0.10): "
            f"use {where}.per_batch_size, e.g. [[1, 2, 7], [3, 8, 3], [9, 512, 0]]"
        )
    for key in sorted(RESERVED_SPECULATIVE_EXTRA_AS.keys() & set(extra)):
        raise ConfigError(f"{where}.extra.{key}: set it as {where}.{RESERVED_SPECULATIVE_EXTRA_AS[key]}")
    schedule = key_of("per_batch_size", _or_none(adaptive.schedule_entries))
    adaptive_on = key_of("adaptive_verification", v.parse_bool, False)
    try:
        json.dumps(extra, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid {where}.extra = {v.shown(extra)}: expected JSON values ({err})") from err
    return Speculative(
        method=method,
        num_speculative_tokens=k,
        draft_model=draft,
        attention_backend=backend,
        extra=tuple(sorted(extra.items())),
        per_batch_size=None if schedule is None else tuple(schedule),  # checked later
        adaptive_verification=adaptive_on,
    )


def _adaptive_speculation(
    variants: Mapping[str, Variant],
    attention_backend: str,
    record: Mapping[str, str],
    inherited: Mapping[str, str] | None = None,
) -> dict[str, Variant]:
    """Validate each variant's K schedule and adaptive verification. An adaptive variant runs
    without an `--enforce-eager` inherited through `extends` (kept in `Variant.dropped_args`);
    its own is an error. A stack-wide attention backend it refuses marks it `refused`."""
    inherited = inherited or {}
    checked: dict[str, Variant] = {}
    for name, variant in variants.items():
        spec = variant.speculative
        where = f"variants.{name}.speculative"
        if spec is not None and spec.per_batch_size is not None:
            key = f"{where}.per_batch_size"
            seqs = adaptive.max_num_seqs(variant.extra_args)
            try:
                schedule = adaptive.parse_schedule(
                    list(spec.per_batch_size), spec.num_speculative_tokens, seqs
                )
            except ValueError as err:
                raise ConfigError(
                    f"invalid {key} = {v.shown(list(spec.per_batch_size), 120)} "
                    f"(from {record.get(key, 'composer.toml')}): expected {err}"
                ) from err
            variant = replace(variant, speculative=replace(spec, per_batch_size=schedule))
        if spec is not None and spec.adaptive_verification:
            own_args = f"variants.{name}.extra_args"
            args_from = inherited.get(own_args, own_args)
            if args_from != own_args:
                kept, dropped = adaptive.split_eager(variant.extra_args)
                if dropped:
                    variant = replace(
                        variant, extra_args=kept, dropped_args=tuple((arg, args_from) for arg in dropped)
                    )
            problem = adaptive.adaptive_problem(variant.extra_args, dict(variant.env))
            if problem:
                raise ConfigError(f"{where}.adaptive_verification = true: {problem}")
            problem = adaptive.backend_problem(attention_backend)
            if problem:  # a stack-wide setting: the other variants serve on, this one never starts
                origin = record.get("stack.attention_backend", "composer.toml")
                variant = replace(
                    variant,
                    refused=f"{where}.adaptive_verification = true with stack.attention_backend = "
                    f"{attention_backend} (from {origin}): {problem}, or set adaptive_verification = false",
                )
        checked[name] = variant
    return checked


def _workloads(resolve: _Resolver, variants: dict[str, Variant]) -> dict[str, str]:
    raw = _table(resolve.toml, "workloads", resolve.toml_origin)
    for workload, variant in raw.items():
        where = _from(resolve.toml_origin, f"workloads.{workload}")
        if (problem := check_workload_name(str(workload))) is not None:
            raise ConfigError(f"invalid key workloads.{workload}{where}: {problem}")
        if not isinstance(variant, str) or variant not in variants:
            raise ConfigError(
                f"invalid workloads.{workload} = {v.shown(variant)}{where}: expected a variant name, one of "
                + ", ".join(sorted(variants))
            )
    return {str(k): str(val) for k, val in raw.items()}
