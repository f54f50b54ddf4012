"""Kubernetes: the same change of what serves as `up`, as rollouts of the rendered manifests.

Owns: the one way to run `kubectl` (`kubectl`), the gateway's control channel through
`kubectl exec` (`control`), what a rollout asks of the cluster (`rollout`) and the one
executor of the plans (`execute`; a failure or stop signal undoes what ran unless
`--no-rollback`).
Never calls Docker. May import: `composer.stack`, `composer.render`, `composer.engine`,
`composer.gateway` (its control client), `composer.swap` (lock, hold, plans, executor, results).
Public: `Kubectl`, `up_kubernetes`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {"kubectl": ["Kubectl"], "execute": ["up_kubernetes"]})
