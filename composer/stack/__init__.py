"""The user's description of a stack: model, variants, images and workloads.

Owns: reading `composer.toml` files, the `.env` file, the environment and `--set` flags
(in that order of precedence, lowest first), validating every value, and the typed
`Stack` that the rest of the package consumes. Reads files; never touches Docker.
The `[kubernetes]` table is `KubeSettings` (`kubernetes`; its structured values, resources,
tolerations and labels, are parsed in `kube_values`); the in-server adaptive speculation
keys (`speculative.per_batch_size`, `speculative.adaptive_verification`) are parsed and
checked by `adaptive`. How hard VLLM_API_KEY is to guess (`keys`: zxcvbn's estimate, weak
keys refused). Placement (`placement`): a variant's GPU sets (one per replica) and the
checks of a live set (`[gateway] live`, `up A B`): known variants, disjoint GPU sets, one
`LiveMember` per container. Every file it reads goes through `bounded.read_bounded` (a size
limit per kind). May import: `composer.errors`, and `composer.gateway.config` for the
gateway's bounds of its settings (`[gateway]` keys are checked against them).
Public: `Stack`, `Variant`, `Speculative`, `Sources`, `KubeSettings`, `load_stack`,
`image_env_var`, `LiveMember`, `live_members`, `StackSource` (the files, env file, flags
and project name a stack is loaded from), `estimate_key`, `require_strong_key`. Every
settable key with its kind and description is one table (`settings.KEYS`), from which the
JSON Schema of composer.toml is generated (`schema`).
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "keys": ["estimate_key", "require_strong_key"],
        "kubernetes": ["KubeSettings"],
        "load": ["Sources", "load_stack"],
        "model": ["Speculative", "Stack", "Variant", "image_env_var"],
        "placement": ["LiveMember", "live_members"],
        "source": ["StackSource"],
    },
)
