"""The user's description of a stack: model, variants, images and workloads.

Owns: reading `composer.toml` files, the `.env` file, the environment and `--set` flags
(in that order of precedence, lowest first), validating every value, and the typed
`Stack` the rest of the package consumes. Reads files (each through
`bounded.read_bounded`, with a size limit); never touches Docker. Tables: `[kubernetes]`
(`kubernetes`), the adaptive speculation keys (`adaptive`), placement and live-set checks
(`placement`), every settable key and the JSON Schema (`settings`, `schema`); how hard
VLLM_API_KEY is to guess (`keys`). May import: `composer.errors`, and
`composer.gateway.config` for the gateway's bounds of its `[gateway]` settings.
Public: `Stack`, `Variant`, `Speculative`, `KubeSettings`, `load_stack`,
`image_env_var`, `LiveMember`, `live_members`, `StackSource`, `estimate_key`,
`require_strong_key`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "keys": ["estimate_key", "require_strong_key"],
        "kubernetes": ["KubeSettings"],
        "load": ["load_stack"],
        "model": ["Speculative", "Stack", "Variant", "image_env_var"],
        "placement": ["LiveMember", "live_members"],
        "source": ["StackSource"],
    },
)
