# headroom: `make demo` runs the workload demonstration, `make test` the full
# test suite (unit, fuzz seeds, and system tests against real swap and
# cgroups). Both install what they need on a fresh machine.

SHELL   := /bin/bash
GO      ?= go
BIN     := bin/headroom
# Fuzzing budget per target, as a count of executions: a duration budget
# (-fuzztime 5s) races Go 1.26's fuzz coordinator at the deadline and fails
# with a spurious "context deadline exceeded" (golang/go#75804, fixed in 1.27).
# 30000 per target keeps the cold CI run under 45 minutes; fuzz deeper with
# `make fuzz FUZZEXECS=1000000`.
FUZZEXECS ?= 30000

.PHONY: all build deps kube-binaries kubevirt-crds demo check docs test unit system system-host system-kube fuzz bench vet clean

all: build

# System packages: util-linux (swap tools), gcc (bench reference), chromium
# (the report is rendered in a headless browser by a test), qemu-system-x86
# and busybox-static (micro-VMs; the guest kernel is downloaded by
# `headroom vm image` into the cache, not installed), libvirt's daemon,
# client and QEMU driver (the libvirt system tests use the libvirtd that
# runs, or start their own with a virtlogd and stop both), and containerd,
# runc and the CNI plugins (the real-kubelet tests start their own
# containerd).
APT_PACKAGES := util-linux gcc chromium qemu-system-x86 busybox-static libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu \
  containerd runc containernetworking-plugins

# headroom is built static (it is also the micro-VM guest's /init) and
# stripped (a smaller initramfs boots faster).
export CGO_ENABLED := 0
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
GOBUILD := $(GO) build -trimpath -ldflags='-s -w -X main.buildVersion=$(VERSION)'

deps:
	@command -v $(GO) >/dev/null || { echo "Go toolchain not found: install Go 1.26 (/usr/local/go/bin)"; exit 1; }
	@for tool in mkswap swapon swapoff gcc taskset chromium qemu-system-x86_64 busybox libvirtd virtlogd virsh containerd runc /usr/lib/cni/bridge; do \
	  command -v $$tool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APT_PACKAGES) >/dev/null; break; }; \
	done
	$(GO) mod download

build: deps
	$(GOBUILD) -o $(BIN) ./cmd/headroom

# The density benchmark on a small node (1 GiB of RAM, a 3 GiB swap file,
# the agent on): 1 to 10 workers of 256 MiB, random scan, 8 s each, then the
# report. A step that fails (the kernel may OOM-kill at the RAM boundary,
# where the workers touch pages faster than reclaim can age them) is kept
# in the results and the ramp goes on, so the three regimes are drawn.
DEMO_OUT ?= results/demo
demo: build
	rm -rf $(DEMO_OUT)
	./$(BIN) density --node-memory 1Gi --swap 3Gi --agent --vm-memory 320Mi --memory-size 256Mi \
	  --overcommit-percent 400 --deployments 1:10:1 --workload-runtime 8s --memory-scan random \
	  --stop-on-failure=false --label "random 256 MiB" --out $(DEMO_OUT) || true
	./$(BIN) report $(DEMO_OUT) -o $(DEMO_OUT)/report.html
	@echo "report: $$(pwd)/$(DEMO_OUT)/report.html"

vet:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet -tags system,guest ./...

# The fast tier: formatting, vet, the unit tests in short mode (fuzz
# targets run their seed corpora; the generated reference's drift check is
# one of them), as any user, changing nothing on the machine.
check:
	$(MAKE) --no-print-directory vet
	$(GO) test -short ./...

# The generated reference (docs/reference): every command's flags, the
# agent's configuration keys and metrics, the decision and result schemas.
docs:
	$(GO) test ./cmd/headroom -run '^TestReferenceIsUpToDate$$' -update-reference

# The race detector needs cgo. It runs on every package but those that link
# the Kubernetes client (cmd/headroom, internal/kube, internal/kubevirt):
# compiling client-go and the API types with it took 4 of a cold run's
# minutes, and their unit tests are pure or drive the load fleet, whose
# concurrency loadctl's and memload's tests run under it; the informers and
# watches run only in the kube system tests, which never had it.
RACE_FREE_PKGS = $(shell $(GO) list -f '{{.ImportPath}} {{join .Deps " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... | awk '/ k8s\.io\/(client-go|api)\//{print $$1}')
unit:
	CGO_ENABLED=1 $(GO) test -race $(filter-out $(RACE_FREE_PKGS),$(shell $(GO) list ./...))
	$(GO) test $(RACE_FREE_PKGS)

# Each fuzz target runs FUZZEXECS executions beyond its seed corpus.
fuzz:
	@for target in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' internal cmd | sed 's/func //'); do \
	  pkg=$$(grep -rlE "^func $$target\b" --include='*_test.go' internal cmd | xargs dirname); \
	  echo "fuzz $$target ($$pkg)"; \
	  $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZEXECS)x ./$$pkg || exit 1; \
	done

# The Kubernetes control plane the kube system tests run against (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok)
# and the kubelet and kube-proxy for the real-node tests, built from Go
# modules, all in one module, once into $XDG_CACHE_HOME/headroom/kube
# (cold: about 7.5 min on 2 idle cores; kubelet, kube-proxy and
# kube-scheduler add about a minute).
kube-binaries:
	GO=$(GO) hack/kube-binaries.sh

# KubeVirt's own VirtualMachineInstance and VirtualMachine CRDs, generated
# by its virt-operator code at a pinned version, once into
# $XDG_CACHE_HOME/headroom/kubevirt (cold: about 3 min).
kubevirt-crds:
	GO=$(GO) hack/kubevirt-crds.sh

# System tests change swap and cgroups: root, one package at a time. The
# kube packages run against the control plane and KubeVirt's CRDs (built
# side by side on a cold cache); the host packages need neither.
SYSTEM_PKGS       = $(shell grep -rlE '^//go:build system' --include='*_test.go' . | xargs -n1 dirname | sort -u)
SYSTEM_KUBE_PKGS := ./internal/kube ./internal/kubevirt
SYSTEM_TEST       = $(GO) test -tags system -p 1 -count 1 -timeout 60m -run '^TestSystem' -v

system: system-host system-kube

system-host:
	$(SYSTEM_TEST) $(filter-out $(SYSTEM_KUBE_PKGS),$(SYSTEM_PKGS))

system-kube:
	GO=$(GO) hack/kubevirt-crds.sh >/dev/null & crds=$$!; \
	GO=$(GO) hack/kube-binaries.sh >/dev/null && wait $$crds
	HEADROOM_KUBE_BIN=$$(GO=$(GO) hack/kube-binaries.sh) HEADROOM_KUBEVIRT_CRDS=$$(GO=$(GO) hack/kubevirt-crds.sh) \
	$(SYSTEM_TEST) $(SYSTEM_KUBE_PKGS)

# The control plane and the CRDs (a cold cache: the longest part of the
# run) build in the background at the lowest CPU priority while the
# packages install, vet, fuzz, the unit and the host system tests run:
# they take the CPU those leave idle (the system tests wait on guests,
# devices and timed steps) and slow none of them. The kube system tests
# run last, once both are built.
test:
	@GO=$(GO) nice -n 19 hack/kube-binaries.sh >/tmp/headroom-kube-binaries.log 2>&1 & kb=$$!; \
	GO=$(GO) nice -n 19 hack/kubevirt-crds.sh >/tmp/headroom-kubevirt-crds.log 2>&1 & kc=$$!; \
	$(MAKE) --no-print-directory deps vet fuzz unit system-host; st=$$?; \
	wait $$kb || { cat /tmp/headroom-kube-binaries.log; st=1; }; \
	wait $$kc || { cat /tmp/headroom-kubevirt-crds.log; st=1; }; \
	[ $$st = 0 ] && $(MAKE) --no-print-directory system-kube

bench: build
	bench/touch-rate.sh
	bench/rate-accuracy.sh
	bench/start-skew.sh
	bench/swap-bound.sh
	bench/agent-overhead.sh
	bench/evict-under-load.sh
	$(GO) test -tags system -count 1 -run '^$$' -bench '^BenchmarkSystemKube' -benchtime 1x ./internal/kube/
	$(GO) test -tags system -count 1 -run '^$$' -bench '^BenchmarkSystemLibvirt' -benchtime 1x ./internal/libvirt/
	bench/density-skew.sh
	bench/kubelet-head-to-head.sh
	bench/vm-boot.sh
	bench/vm-touch-rate.sh
	bench/vm-balloon.sh
	bench/ksm.sh
	bench/swap-tiers.sh
	bench/density-balloon.sh
	bench/sim-fidelity.sh

clean:
	rm -rf bin
