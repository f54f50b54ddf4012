"""ServiceSpec and everything rendered from it.

Owns: `ServiceSpec` (`spec`), the one description of a variant's container, built from a
`Stack` variant by a pure function; the gateway, Prometheus and follower containers beside it;
`Target`, a variant resolved once into all of them; the compose files and launchers rendered
from the top-level `templates/` (`files`; `files.run_file` is the swap's one entry point into
rendering); the resolved stack as data (`describe`); the Kubernetes manifests (`kubernetes`,
`kube_pod`, `kube_security`); a live set (`live`, `kube_live`); the follower's systemd unit.
Never calls Docker. May import: `composer.stack`, `composer.errors`, `composer.labels`.
Public: `ServiceSpec`, `build_spec`, `config_hash`, `GatewaySpec`, `build_gateway_spec`,
`PrometheusSpec`, `build_prometheus_spec`, `FollowSpec`, `build_follow_spec`, `Target`,
`resolve_target`, `render_all`, `render_variant`, `is_current`, `write_all`, `write_atomic`,
`run_file`, `state_dir`, `stack_data`, `format_stack`, `render_kubernetes`, `render_plan`,
`RenderPlan`, `stale_files`, `pod_security_level`, `LiveTarget`, `LiveService`,
`resolve_live`, `render_live`, `render_kube_live`, `FollowUnit`, `render_follow_unit`.
"""

from composer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "describe": ["format_stack", "stack_data"],
        "files": ["is_current", "render_all", "render_variant", "run_file", "write_all", "write_atomic"],
        "kubernetes": ["render_kubernetes"],
        "kube_security": ["pod_security_level"],
        "kube_live": ["render_kube_live"],
        "live": ["LiveService", "LiveTarget", "render_live", "resolve_live"],
        "outputs": ["RenderPlan", "render_plan", "stale_files"],
        "runfiles": ["state_dir"],
        "spec": ["ServiceSpec", "build_spec", "config_hash"],
        "target": ["Target", "resolve_target"],
        "gateway": ["GatewaySpec", "build_gateway_spec"],
        "prometheus": ["PrometheusSpec", "build_prometheus_spec"],
        "follow": ["FollowSpec", "build_follow_spec"],
        "systemd": ["FollowUnit", "render_follow_unit"],
    },
)
