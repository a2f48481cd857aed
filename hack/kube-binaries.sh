#!/usr/bin/env bash
# Builds the Kubernetes control plane the kube system tests run against —
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, and
# for the real-node tests kubelet and kube-proxy (from k8s.io/kubernetes
# at a pinned version, its staging repos replaced by their published modules)
# and kwok, all in one module — into $XDG_CACHE_HOME/headroom/kube/<version>/bin,
# once. A cold build takes about 7.5 minutes on an idle 2-core machine; later
# runs find the binaries and return.
# Prints the bin directory.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
GO="${GO:-go}"

# etcd: the server version k8s.io/kubernetes itself requires (its go.mod).
ETCD_VERSION="${ETCD_VERSION:-v3.6.4}"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/headroom/kube/${KUBE_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}"
bin="$cache/bin"
want=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kwok)

have_all() { for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || return 1; done; }
if have_all; then echo "$bin"; exit 0; fi

staging="${KUBE_VERSION/v1./v0.}"
work="$(mktemp -d "${TMPDIR:-/tmp}/headroom-kube-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="$work/bin"
mkdir -p "$out"

echo "building the Kubernetes ${KUBE_VERSION} control plane (etcd ${ETCD_VERSION}) and kwok ${KWOK_VERSION} into $bin (cold: about 7.5 minutes on 2 idle cores)" >&2

# k8s.io/kubernetes resolves its staging repos from ./staging; a scratch
# module points each one at the published module of the matching version.
mkdir -p "$work/src"
cd "$work/src"
# The go command fetches it, through the machine's GOPROXY and GOFLAGS.
gomod="$("$GO" mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
mod="$(cat "$gomod")"
{
  echo "module headroom.local/kubebuild"
  echo
  echo "go 1.24.0"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes ${KUBE_VERSION}"
  echo "	sigs.k8s.io/kwok ${KWOK_VERSION}"
  echo ")"
  echo
  echo "replace ("
  grep -oE 'k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' <<<"$mod" |
    awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
  echo "	sigs.k8s.io/kwok => ./kwok"
  echo ")"
} >go.mod
# kwok builds in this module, against the Kubernetes libraries the control
# plane uses, so they compile once (built as released, kwok ${KWOK_VERSION}
# compiled its own v0.33 copies: a cold CI run spent most of its
# control-plane build there). The one thing kwok ${KWOK_VERSION} uses that
# apimachinery ${staging} no longer has is a constant: the watch-list
# bookmark's annotation key, spelled out here with the same value.
kwok_dir="$("$GO" mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
cp -r "$kwok_dir" kwok
chmod -R u+w kwok
sed -i 's/metav1\.InitialEventsListBlueprintAnnotationKey/"kubernetes.io\/initial-events-list-blueprint"/g' \
  kwok/pkg/utils/informer/informer.go
cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
GO
"$GO" mod tidy -e >&2 2>/dev/null || true
"$GO" get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
# One build for the eight (kubelet, kube-proxy and kube-scheduler for the
# real-node tests): their shared packages compile once, and the links run
# side by side. etcd's main package is .../server/v3: "server".
# The version the binaries report (a kubelet registers its node with it).
v=k8s.io/component-base/version
minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w -X $v.gitVersion=${KUBE_VERSION} -X $v.gitMajor=1 -X $v.gitMinor=${minor} -X $v.gitTreeState=clean"
CGO_ENABLED=0 "$GO" build -mod=mod -trimpath -ldflags="$ldflags" -o "$out/" go.etcd.io/etcd/server/v3 \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kubectl \
  sigs.k8s.io/kwok/cmd/kwok >&2
mv "$out/server" "$out/etcd"

mkdir -p "$cache"
rm -rf "$bin"
mv "$out" "$bin"
echo "$bin"
