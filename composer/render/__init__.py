"""ServiceSpec and everything rendered from it.

Owns: `ServiceSpec`, the one description of a variant's container (image, argv, env,
mounts, ports, GPUs, labels, healthcheck), built from a `Stack` variant by a pure
function; `GatewaySpec`, the gateway's container in front of it (`gateway`); `PrometheusSpec`,
the optional observability profile's Prometheus beside them (`prometheus`); the opt-in
`follow` profile's follower container (`follow`: `FollowSpec`, `build_follow_spec`); `Target`,
a variant resolved once into both (`target`); the compose files and bash launchers
rendered from the Jinja templates in the top-level `templates/` folder (shipped in the
wheel as `composer/templates`); the run files `up` starts (`files.run_file`, the swap's one
entry point into rendering; `runfiles`: their folder and environment); the resolved
stack as data (`describe`); the Kubernetes manifests, a kustomize base and one overlay
per variant (`kubernetes`), with the production settings of the `[kubernetes]` table
(`kube_pod`: resources and scheduling; `kube_extras`: disruption budgets, ServiceMonitors,
scrape annotations) and an offline Pod Security Standards check (`kube_security`:
`pod_security_level`); a live set (`live`: one compose service per live container behind the
one gateway, `GATEWAY_LIVE_UPSTREAMS`; `kube_live`: one Deployment and Service per live
variant in `kubernetes/live/`); the systemd unit that keeps `follow` running (`systemd`).
Never calls Docker. May import: `composer.stack`, `composer.errors`, `composer.labels`.
Public: `ServiceSpec`, `build_spec`, `config_hash`, `GatewaySpec`, `build_gateway_spec`,
`PrometheusSpec`, `build_prometheus_spec`, `FollowSpec`, `build_follow_spec`, `Target`,
`resolve_target`, `render_all`, `render_variant`, `is_current`, `write_all`,
`write_atomic`, `run_file`, `state_dir`, `stack_data`, `format_stack`, `render_kubernetes`,
`render_plan`, `RenderPlan`, `stale_files` (what `render` writes and what is stale: `outputs`),
`pod_security_level`, `LiveTarget`, `LiveService`, `resolve_live`, `render_live`,
`render_kube_live`, `FollowUnit`, `render_follow_unit`.
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
