"""Kubernetes: the same change of what serves as `up`, as rollouts of the rendered manifests.

Owns: the one way to run `kubectl` (`kubectl`: binary, namespace, kube context and kubeconfig
from `[kubernetes]` or `--kube-context`; errors carry the command, redacted of the API key),
the gateway's control channel through `kubectl exec` (`control`), what a rollout asks of the
cluster (`rollout`: the overlay, the key Secret applied server-side from stdin, rollout
status, the gate through a Service reached by URL or port-forward),
and the one executor (`execute`: the plans of typed operations of the one-variant switch and
of a live set's change, run by `composer.swap.execute` with a kubectl dispatch table under
the project's swap lock; a failure or stop signal undoes what ran unless `--no-rollback`).
Never calls Docker. May import: `composer.stack`, `composer.render`, `composer.engine`,
`composer.gateway` (its control client), `composer.swap` (lock, hold, plans, executor, results).
Public: `Kubectl`, `up_kubernetes`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {"kubectl": ["Kubectl"], "execute": ["up_kubernetes"]})
