"""The user's description of a stack: model, variants, images and workloads.

Owns: reading `composer.toml` files, the `.env` file, the environment and `--set` flags
(in that order of precedence, lowest first), validating every value, and the typed
`Stack` that the rest of the package consumes. Reads files; never touches Docker.
The `[kubernetes]` table is `KubeSettings` (`kubernetes`); the in-server adaptive
speculation keys (`speculative.per_batch_size`, `speculative.adaptive_verification`) are
parsed and checked by `adaptive`. May import: `composer.errors`.
Public: `Stack`, `Variant`, `Speculative`, `Sources`, `KubeSettings`, `load_stack`,
`image_env_var`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "kubernetes": ["KubeSettings"],
        "load": ["Sources", "load_stack"],
        "model": ["Speculative", "Stack", "Variant", "image_env_var"],
    },
)
