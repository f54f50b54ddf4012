"""Every label name the toolkit writes or reads, in one place.

Variant containers carry `vllm-composer.*` labels (rendered into every compose file and
launcher); overlay images carry `vllm-composer.overlay.*`; Compose's own labels are read
to tell which project and service a container belongs to.
"""

PREFIX = "vllm-composer"

# On variant containers.
VARIANT = f"{PREFIX}.variant"
CONFIG_HASH = f"{PREFIX}.config-hash"
SERVED_NAME = f"{PREFIX}.served-model-name"
PORT = f"{PREFIX}.port"
# Who started a variant container (with SERVED_NAME): the stack file and a short hash of the key.
STACK_FILE = f"{PREFIX}.stack-file"
KEY_FINGERPRINT = f"{PREFIX}.key-fingerprint"
# On the containers of a live set: the upstream's name (`mtp/1`) and its GPU set (`4,5,6,7`, `-`).
LIVE = f"{PREFIX}.live"
GPUS = f"{PREFIX}.gpus"
# On a live variant's Deployment on Kubernetes: the identity of the configuration `up` applied.
LIVE_CONFIG = f"{PREFIX}.live-config"

# On the gateway's container (which also carries PORT: it publishes the shared port).
ROLE = f"{PREFIX}.role"
ROLE_GATEWAY = "gateway"
ROLE_GATEWAY_PORT = "gateway-port"  # the port holder: it publishes the port, the gateway joins its network
ROLE_PROMETHEUS = "prometheus"  # the observability profile's Prometheus
ROLE_FOLLOW = "follow"  # the follow profile's follower

# On overlay images and the helper containers of an overlay build.
OVERLAY_PREFIX = f"{PREFIX}.overlay"
OVERLAY_RECIPE = f"{OVERLAY_PREFIX}.recipe"
OVERLAY_PACKAGE_DIR = f"{OVERLAY_PREFIX}.package-dir"
OVERLAY_FROM_BASE = f"{OVERLAY_PREFIX}.from-base"  # "contains-change": the base unchanged, it holds the diffs
BUILD = f"{PREFIX}.build"

# On the short-lived containers doctor creates to check host paths on a remote engine.
DOCTOR_PROBE = f"{PREFIX}.doctor-probe"

# Written by Docker Compose.
COMPOSE_PROJECT = "com.docker.compose.project"
COMPOSE_SERVICE = "com.docker.compose.service"
COMPOSE_CONFIG_FILES = "com.docker.compose.project.config_files"

# On Kubernetes objects (the recommended app labels; the Deployment's selector and the
# Service's selector use NAME and INSTANCE, which every variant shares).
K8S_NAME = "app.kubernetes.io/name"
K8S_INSTANCE = "app.kubernetes.io/instance"
K8S_COMPONENT = "app.kubernetes.io/component"
K8S_MANAGED_BY = "app.kubernetes.io/managed-by"
