"""FollowSpec: the opt-in `follow` profile of a compose stack (pure data, no I/O).

`compose-spec follow` in a container, with the Docker socket mounted (Docker's full power on
the host). The folders it shares with the host are mounted at the host's own paths, since the
host's daemon resolves the run files it renders; their `FOLLOW_*` variables default to
`${PWD}` and `${HOME}`. The API key reaches it only through the mounted env file.
"""

from __future__ import annotations

from dataclasses import dataclass

from composer import __version__
from composer import labels as label_names
from composer.render.spec import Text, Var, text
from composer.stack.model import Stack

SERVICE = "follow"
PROFILE = "follow"
SOCKET = "/var/run/docker.sock"
LOCK_DIR_VAR = "VLLM_COMPOSER_LOCK_DIR"  # honoured by composer.swap.lock on both sides
IMAGE = f"vllm-composer-follow:{__version__}"
# The host values `up --with follow` passes to compose (and a by-hand start may set).
IMAGE_VAR = "FOLLOW_IMAGE"
PROJECT_DIR_VAR = "FOLLOW_PROJECT_DIR"
ENV_FILE_VAR = "FOLLOW_ENV_FILE"
STACK_VAR = "FOLLOW_STACK"  # the stack files, ':'-separated (COMPOSER_STACK inside)
STATE_HOME_VAR = "FOLLOW_STATE_HOME"
LOCK_DIR_HOST_VAR = "FOLLOW_LOCK_DIR"
USER_VAR = "FOLLOW_USER"
STATE_HOME = f"${{{STATE_HOME_VAR}:-${{HOME}}/.local/state}}"


@dataclass(frozen=True)
class FollowSpec:
    """The follower's service of the `follow` profile, for the compose renderer."""

    model_dirs: tuple[Text, ...]  # read-only: the swap's preflight reads the checkpoints
    service: str = SERVICE
    profile: str = PROFILE
    image: str = f"${{{IMAGE_VAR}:-{IMAGE}}}"
    user: str = f"${{{USER_VAR}:-0:0}}"
    project_dir: str = f"${{{PROJECT_DIR_VAR}:-${{PWD}}}}"
    env_file: str = f"${{{ENV_FILE_VAR}:-.env}}"
    stack: str = f"${{{STACK_VAR}:-composer.toml}}"
    state_home: str = STATE_HOME
    state_dir: str = f"{STATE_HOME}/vllm-composer"
    lock_dir: str = f"${{{LOCK_DIR_HOST_VAR}:-${{HOME}}/.local/state/vllm-composer/locks}}"
    socket: str = SOCKET
    lock_dir_var: str = LOCK_DIR_VAR
    labels: tuple[tuple[str, str], ...] = ((label_names.ROLE, label_names.ROLE_FOLLOW),)


def build_follow_spec(stack: Stack) -> FollowSpec:
    model_dirs = [text(Var("MODEL_DIR", stack.model_dir))]
    if any(v.speculative is not None and v.speculative.draft_model for v in stack.variants.values()):
        model_dirs.append(text(Var("DRAFT_DIR", stack.draft_dir)))
    return FollowSpec(tuple(model_dirs))
