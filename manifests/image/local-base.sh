#!/usr/bin/env bash
# A local stand-in for rayproject/ray:2.60.0-py311-cpu, for machines that reach Debian's and
# PyPI's repositories but no image registry: a Debian bookworm rootfs (mmdebstrap) with Python 3.11
# and its headers (conda's Python has them; torch.compile's CPU kernels include Python.h) in a venv
# on PATH and the user `ray` (uid 1000, gid 100, home /home/ray), as Ray's images lay it out
# (docker/base-deps/Dockerfile in ray-project/ray). Ray itself is not preinstalled: the
# Containerfile's dependency step installs ray[serve]==2.60.0, which the real base already holds.
# Imported into the containers storage that buildah and podman share. Needs root (or a working
# `mmdebstrap --mode=unshare`), mmdebstrap and podman; ~1 min and ~150 MB.
# Usage: manifests/image/local-base.sh [TAG]  (default localhost/ray-local:2.60.0-py311-cpu)
#        An image of that tag made by this same script is kept (REBUILD=1 remakes it). Prints the tag.
set -euo pipefail
TAG=${1:-localhost/ray-local:2.60.0-py311-cpu}
# The image carries this script's digest: a changed recipe remakes it.
RECIPE=$(sha256sum "$0" | cut -c1-16)
made=$(podman image inspect --format '{{index .Config.Labels "io.specserve.local-base"}}' "$TAG" 2>/dev/null || true)
if [ -z "${REBUILD:-}" ] && [ "$made" = "$RECIPE" ]; then
  echo "$TAG"; exit 0
fi
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "local-base: $tool not found (apt-get install $tool)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Root builds in a chroot; anyone else through a user namespace.
mode=$([ "$(id -u)" = 0 ] && echo root || echo unshare)
# minbase + Python: what a Ray image's Python needs to run; apt's lists are left out (mmdebstrap
# cleans them), so a Containerfile step that needs a package runs `apt-get update` itself.
mmdebstrap --quiet --mode="$mode" --variant=minbase \
  --include=python3,python3-venv,python3-dev,ca-certificates \
  --customize-hook='chroot "$1" useradd --create-home --uid 1000 --gid 100 --shell /bin/bash ray' \
  --customize-hook='chroot "$1" runuser -u ray -- python3 -m venv /home/ray/venv' \
  bookworm "$tmp/rootfs.tar" >&2
# Ray's images run as uid 1000 in /home/ray with their Python first on PATH.
podman import --quiet \
  --change 'ENV PATH=/home/ray/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV HOME=/home/ray' --change 'ENV LC_ALL=C.UTF-8' --change 'ENV LANG=C.UTF-8' \
  --change 'USER 1000' --change 'WORKDIR /home/ray' --change 'CMD ["/bin/bash"]' \
  --change "LABEL io.specserve.local-base=$RECIPE" \
  "$tmp/rootfs.tar" "$TAG" >/dev/null
echo "$TAG"
