#!/usr/bin/env bash
# Writes KubeVirt's own CustomResourceDefinitions for VirtualMachineInstance
# and VirtualMachine — generated in code by virt-operator
# (kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components), not
# hand-written — at a pinned version into
# $XDG_CACHE_HOME/headroom/kubevirt/<version>/crds.yaml, once. Prints the
# file's path. The kube system tests install it on their apiserver.
set -euo pipefail

KUBEVIRT_VERSION="${KUBEVIRT_VERSION:-v1.6.0}"
GO="${GO:-go}"

cache="${XDG_CACHE_HOME:-$HOME/.cache}/headroom/kubevirt/${KUBEVIRT_VERSION}"
out="$cache/crds.yaml"
if [[ -s "$out" ]]; then echo "$out"; exit 0; fi

work="$(mktemp -d "${TMPDIR:-/tmp}/headroom-kubevirt-crds.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "generating KubeVirt ${KUBEVIRT_VERSION}'s CRDs with its virt-operator code into $out" >&2

# kubevirt.io/kubevirt resolves kubevirt.io/api and client-go from ./staging
# and pins others by replace; a scratch module repeats those pins, the
# staging ones as their published modules of the same version (the
# kubevirt module's zip leaves its nested staging modules out).
cd "$work"
src="$(GOFLAGS=-mod=mod "$GO" mod download -json "kubevirt.io/kubevirt@${KUBEVIRT_VERSION}" | sed -nE 's/^\t"Dir": "(.*)",$/\1/p')"
mod="$(cat "$src/go.mod")"
{
  echo "module headroom.local/kubevirtcrds"
  echo
  echo "go 1.23.0"
  echo
  echo "require kubevirt.io/kubevirt ${KUBEVIRT_VERSION}"
  echo
  echo "replace ("
  awk '/^replace \(/{r=1;next} r&&/^\)/{r=0} r&&/=>/' <<<"$mod" |
    sed -E "s#=> \./staging/src/(kubevirt\.io/[a-z-]+)#=> \1 ${KUBEVIRT_VERSION}#"
  echo ")"
} >go.mod
# The generator compiles virt-operator's crds.go and the schemas it reads
# (validations_generated.go), unchanged, as a package of its own: the rest of
# the components package (deployments, webhooks, certificates ...) would pull
# in most of KubeVirt for nothing.
mkdir components
cp "$src/pkg/virt-operator/resource/generate/components/crds.go" \
  "$src/pkg/virt-operator/resource/generate/components/validations_generated.go" components/
chmod u+w components/*.go
cat >main.go <<'GO'
// Command kubevirtcrds prints the VirtualMachineInstance and VirtualMachine
// CRDs as KubeVirt's virt-operator creates them.
package main

import (
	"fmt"
	"os"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"headroom.local/kubevirtcrds/components"
	"sigs.k8s.io/yaml"
)

func main() {
	for _, gen := range []func() (*extv1.CustomResourceDefinition, error){
		components.NewVirtualMachineInstanceCrd, components.NewVirtualMachineCrd,
	} {
		crd, err := gen()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		b, err := yaml.Marshal(crd)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("---\n%s", b)
	}
}
GO
"$GO" mod tidy -e >&2 2>/dev/null || true
"$GO" run -mod=mod . >"$work/crds.yaml"
mkdir -p "$cache"
mv "$work/crds.yaml" "$out"
echo "$out"
