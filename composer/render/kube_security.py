"""Pod Security Standards ("baseline", "restricted"), checked offline on a rendered pod template.

The published rules (kubernetes.io/docs/concepts/security/pod-security-standards, v1.3x);
each violation names the field and the rule. The admission controller is the authority.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

Manifest = Mapping[str, Any]


def pod_spec(manifest: Manifest) -> tuple[Manifest, Manifest]:
    """(pod metadata, pod spec) of a workload's pod template."""
    template = (manifest.get("spec") or {}).get("template") or {}
    return template.get("metadata") or {}, template.get("spec") or {}


def _containers(spec: Manifest) -> Iterator[tuple[str, Manifest]]:
    for field in _CONTAINER_LISTS:
        for index, container in enumerate(spec.get(field) or []):
            yield f"spec.{field}[{index}]", container


def baseline_violations(manifest: Manifest) -> list[str]:
    """What keeps a pod from the "baseline" level (empty when it meets it)."""
    meta, spec = pod_spec(manifest)
    pod_sc = spec.get("securityContext") or {}
    found: list[str] = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            found.append(f"spec.{field}: host namespaces are not allowed")
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        found.append("spec.securityContext.windowsOptions.hostProcess: HostProcess pods are not allowed")
    for index, volume in enumerate(spec.get("volumes") or []):
        if "hostPath" in volume:
            found.append(f"spec.volumes[{index}].hostPath: hostPath volumes are not allowed")
    found += _context_violations("spec.securityContext", pod_sc)
    for index, sysctl in enumerate(pod_sc.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"spec.securityContext.sysctls[{index}]: sysctl {sysctl.get('name')!r} is not safe")
    for key, value in (meta.get("annotations") or {}).items():
        apparmor = key.startswith("container.apparmor.security.beta.kubernetes.io/")
        if apparmor and value != "runtime/default" and not str(value).startswith("localhost/"):
            found.append(f"metadata.annotations[{key}]: AppArmor profile {value!r} is not allowed")
    for where, container in _containers(spec):
        sc = container.get("securityContext") or {}
        if sc.get("privileged"):
            found.append(f"{where}.securityContext.privileged: privileged containers are not allowed")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}.securityContext.windowsOptions.hostProcess: not allowed")
        added = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            found.append(f"{where}.securityContext.capabilities.add: {sorted(added)} are not allowed")
        for port_index, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                found.append(f"{where}.ports[{port_index}].hostPort: host ports are not allowed")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{where}.securityContext.procMount: only Default is allowed")
        found += _context_violations(f"{where}.securityContext", sc)
    return found


def restricted_violations(manifest: Manifest) -> list[str]:
    """What keeps a pod from the "restricted" level (baseline's rules included)."""
    _, spec = pod_spec(manifest)
    pod_sc = spec.get("securityContext") or {}
    found = baseline_violations(manifest)
    for index, volume in enumerate(spec.get("volumes") or []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"spec.volumes[{index}]: volume type {sorted(kinds)} is not allowed")
    if pod_sc.get("runAsNonRoot") is False:
        found.append("spec.securityContext.runAsNonRoot: must not be false")
    if pod_sc.get("runAsUser") == 0:
        found.append("spec.securityContext.runAsUser: must not be 0")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    for where, container in _containers(spec):
        sc = container.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{where}.securityContext.runAsNonRoot: must be true (here or for the pod)")
        if sc.get("runAsUser") == 0:
            found.append(f"{where}.securityContext.runAsUser: must not be 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{where}.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        extra = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            found.append(
                f"{where}.securityContext.capabilities.add: only NET_BIND_SERVICE, not {sorted(extra)}"
            )
    return found


def pod_security_level(manifest: Manifest) -> str:
    """The strictest level a pod meets: restricted, baseline or privileged."""
    if not restricted_violations(manifest):
        return "restricted"
    return "baseline" if not baseline_violations(manifest) else "privileged"


def _context_violations(where: str, sc: Manifest) -> list[str]:
    """Baseline's seccomp, SELinux and AppArmor rules on a pod's or a container's securityContext."""
    found = []
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append(f"{where}.seccompProfile.type: Unconfined is not allowed")
    options = sc.get("seLinuxOptions") or {}
    if options.get("type", "") not in SELINUX_TYPES:
        found.append(f"{where}.seLinuxOptions.type: {options.get('type')!r} is not allowed")
    for key in ("user", "role"):
        if options.get(key):
            found.append(f"{where}.seLinuxOptions.{key}: must not be set")
    kind = (sc.get("appArmorProfile") or {}).get("type")
    if kind not in (None, "RuntimeDefault", "Localhost"):
        found.append(f"{where}.appArmorProfile.type: {kind!r} is not allowed")
    return found
