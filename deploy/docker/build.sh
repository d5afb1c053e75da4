#!/usr/bin/env bash
# Builds Catena's Docker image as catena:latest (or the tag given as $1)
# from this repository alone: a static binary built on the host with the
# Go toolchain, copied into an image FROM scratch, so nothing is pulled.
# The binary carries the version and VCS revision like `go build
# ./cmd/catena` does (`docker run --rm catena version` prints them).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/go/bin"
tag="${1:-catena:latest}"

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT

echo "== go build (static, CGO_ENABLED=0)"
# -buildvcs=true overrides a GOFLAGS=-buildvcs=false: the image's version
# names the revision it was built from (outside a git checkout, or in a
# linked git worktree, Go records none and catena version says "unknown").
CGO_ENABLED=0 go build -buildvcs=true -trimpath -o "$context/catena" ./cmd/catena
version=$("$context/catena" version)
echo "$version"

echo "== docker build $tag"
cp deploy/docker/Dockerfile "$context/Dockerfile"
old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
docker build -q -t "$tag" --label "org.opencontainers.image.version=$version" "$context" >/dev/null
new=$(docker image inspect -f '{{.Id}}' "$tag")
# The image this tag named before, now untagged, is removed unless a
# container still uses it.
if [ -n "$old" ] && [ "$old" != "$new" ] && [ -z "$(docker image inspect -f '{{join .RepoTags ""}}' "$old" 2>/dev/null)" ]; then
  docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "built $tag ($new): docker run --rm $tag version"
