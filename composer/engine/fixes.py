"""The commands a fix names: ones the user has. `make` targets exist only in a checkout of
the repository (its Makefile beside the package); an installed tool names `compose-spec`
commands and the host's own tools instead."""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]


def in_checkout() -> bool:
    """True when running from the repository (an editable install or PYTHONPATH), where
    `make` targets exist."""
    return (_CHECKOUT / "Makefile").is_file() and (_CHECKOUT / "images" / "gateway" / "build.sh").is_file()


def start_docker() -> str:
    """How to start the Docker engine."""
    if in_checkout():
        return "start dockerd (make docker)"
    return "start the Docker engine (sudo systemctl start docker, or run dockerd)"


def install_docker(what: str = "Docker Engine") -> str:
    """How to install (or upgrade) Docker Engine, the docker CLI or the Compose v2 plugin."""
    if in_checkout():
        return f"install {what} (make docker)"
    if "Compose" in what:
        return f"install {what} (the docker-compose-plugin package, or its binary in ~/.docker/cli-plugins/)"
    return f"install {what} (the docker.io or docker-ce package)"


def build_overlay(recipe: str, env_file: Path | str | None = None) -> str:
    """The command that builds an overlay image from its recipe."""
    name = Path(env_file).name if env_file is not None else ".env"
    extra = f"--env-file {env_file} " if name != ".env" else ""
    return f"compose-spec {extra}build {recipe}"


def build_image(image: str) -> str:
    """How to get an image that no recipe builds: the simulator's and the gateway's come
    from the checkout's `make` targets; elsewhere it is loaded or pulled."""
    load = f"docker load -i FILE, or docker pull {image} on a connected host"
    if in_checkout():
        return f"make image-sim for the simulator, make image-gateway for the gateway, or {load}"
    return f"{load}; the simulator and gateway images are built from a checkout of the repository"
