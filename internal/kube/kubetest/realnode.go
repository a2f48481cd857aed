package kubetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/headroom-dev/headroom/internal/host"
	"github.com/headroom-dev/headroom/internal/testenv"
)

// DefaultPodsMemoryBytes is a real node's default pods cgroup limit: a
// small node on a big machine, so a test's pods fill it.
const DefaultPodsMemoryBytes = 1536 << 20

// PauseImage is the pods' sandbox image: busybox's sleep, which keeps
// running (a sandbox whose process exits takes its pod's namespaces with
// it) until containerd kills it.
const PauseImage = "headroom.test/pause:v1"

// The real node's pod network: a bridge on the host, the pods' addresses
// from host-local, the host the gateway.
const (
	podBridge = "hrcni0"
	podCIDR   = "10.251.0.0/24"
)

// HeadroomImageRef names the image of the headroom binary that real-node
// tests give the agent's DaemonSet and the workload pods.
const HeadroomImageRef = "headroom.test/headroom:v1"

// HeadroomImage is the image of the headroom binary at bin (static).
func HeadroomImage(bin string) Image {
	return Image{Ref: HeadroomImageRef, Files: map[string]string{"/headroom": bin}, Entrypoint: []string{"/headroom"}}
}

// RealNode is a node run by a real kubelet: containerd (its own
// configuration, socket and state under the node's directory), runc, the
// CNI bridge plugin for the pods' network, kube-proxy for the service
// addresses (in-cluster clients reach the apiserver through the
// kubernetes service) and the kubelet. The test starts them all and, when
// it ends, stops them and removes what they made: containers, sandboxes,
// network namespaces, mounts, cgroups, the bridge and kube-proxy's rules.
type RealNode struct {
	Name string
	// Dir holds the node's state: containerd's, the kubelet's, the pods' logs.
	Dir string
	// CapacityBytes is the machine's memory, as the kubelet reports it.
	CapacityBytes int64
	// PodsMemoryBytes is the pods' cgroup limit (node allocatable,
	// enforced): the capacity less the system reservation.
	PodsMemoryBytes int64
	// ReadySeconds is from containerd's start to the node's Ready.
	ReadySeconds float64
	// Address is the host address the node registers (pods' traffic to
	// the apiserver ends there).
	Address string

	cp               *ControlPlane
	containerdSocket string
}

// RealNodeOptions shape a real node.
type RealNodeOptions struct {
	// PodsMemoryBytes is the pods' cgroup limit (DefaultPodsMemoryBytes).
	PodsMemoryBytes int64
	// EvictionHard replaces the kubelet's hard eviction thresholds; nil
	// keeps its defaults.
	EvictionHard map[string]string
	// KubeletConfig adds keys to the KubeletConfiguration (memorySwap, say).
	KubeletConfig map[string]any
	// Images are imported into containerd before the kubelet starts
	// (nothing can be pulled here); the pause image always is.
	Images []Image
}

// StartRealNode runs a real node, registered with cp (started with
// RealNodes), until the test ends, and returns once it is Ready.
func StartRealNode(t testing.TB, cp *ControlPlane, name string, opts RealNodeOptions) *RealNode {
	t.Helper()
	testenv.RequireRoot(t)
	tools := map[string]string{}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip"} {
		path, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, tool+" (apt: containerd, runc, iproute2, iptables)")
		tools[tool] = path
	}
	for _, plugin := range []string{"bridge", "host-local"} {
		_, err := os.Stat(filepath.Join(cniBinDir, plugin))
		testenv.Require(t, err == nil, "the CNI "+plugin+" plugin in "+cniBinDir+" (apt: containernetworking-plugins)")
	}
	if opts.PodsMemoryBytes == 0 {
		opts.PodsMemoryBytes = DefaultPodsMemoryBytes
	}
	for _, h := range cgroupHierarchies(t) {
		if _, err := os.Stat(filepath.Join(h, "kubepods")); err == nil {
			t.Fatalf("%s/kubepods exists: another kubelet runs on this machine, or one left it", h)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + podBridge); err == nil {
		t.Fatalf("the bridge %s exists: another real node runs on this machine, or one left it", podBridge)
	}

	// Short: unix socket paths are at most 107 bytes.
	dir, err := os.MkdirTemp("", "hr-node-")
	if err != nil {
		t.Fatal(err)
	}
	n := &RealNode{Name: name, Dir: dir, PodsMemoryBytes: opts.PodsMemoryBytes, Address: HostAddress(t), cp: cp,
		containerdSocket: filepath.Join(dir, "containerd.sock")}
	mem, err := host.ReadMemory()
	if err != nil {
		t.Fatal(err)
	}
	// MemTotal, which the kubelet reports as its capacity.
	n.CapacityBytes = int64(mem.TotalBytes)
	if n.CapacityBytes <= n.PodsMemoryBytes {
		t.Fatalf("the machine's %d MiB cannot hold a node of %d MiB", n.CapacityBytes>>20, n.PodsMemoryBytes>>20)
	}
	// Registered first, so it runs last: after kube-proxy, the kubelet
	// and containerd have stopped.
	sweep := n.sweeper(t)
	t.Cleanup(func() { sweep(t) })

	start := time.Now()
	cfg := filepath.Join(dir, "containerd.toml")
	write(t, cfg, []byte(n.containerdConfig()))
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "cni", "10-headroom-test.conflist"), n.cniConfig())
	cp.startProcess(t, "containerd-"+name, tools["containerd"], "--config", cfg)
	n.waitContainerd(t, 30*time.Second)
	// Before the kubelet stops, nothing; after, every container and
	// sandbox it left goes, while containerd still runs.
	t.Cleanup(func() { n.removeContainers(t) })
	for _, img := range append([]Image{{Ref: PauseImage, Files: map[string]string{"/bin/sleep": "/bin/busybox"},
		Entrypoint: []string{"/bin/sleep", "2147483647"}}}, opts.Images...) {
		n.importImage(t, img)
	}

	kubeletConfig := filepath.Join(dir, "kubelet.yaml")
	write(t, kubeletConfig, n.kubeletConfig(t, opts))
	kubeconfig := cp.WriteKubeconfig(t, "kubelet-"+name, AdminToken)
	cp.startProcess(t, "kubelet-"+name, filepath.Join(cp.Bin, "kubelet"), "--config", kubeletConfig, "--kubeconfig", kubeconfig, "--root-dir", filepath.Join(dir, "kubelet"),
		"--cert-dir", filepath.Join(dir, "kubelet", "pki"), "--hostname-override", name, "--node-ip", n.Address, "--v", "1")
	cp.startProcess(t, "kube-proxy-"+name, filepath.Join(cp.Bin, "kube-proxy"), n.kubeProxyArgs(t, kubeconfig)...)
	n.waitReady(t, 60*time.Second)
	n.ReadySeconds = time.Since(start).Seconds()
	return n
}

// cniBinDir is where Debian's containernetworking-plugins installs them.
const cniBinDir = "/usr/lib/cni"

func (n *RealNode) containerdConfig() string {
	// CRI: restrict_oom_score_adj, because this machine refuses to lower
	// oom_score_adj even for root (runc fails without it); the runc root
	// and the opt plugin's directory under the node's, not in /run and
	// /opt.
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
`, filepath.Join(n.Dir, "containerd", "root"), filepath.Join(n.Dir, "containerd", "state"), n.containerdSocket,
		filepath.Join(n.Dir, "containerd", "opt"), PauseImage, filepath.Join(n.Dir, "runc"), cniBinDir, filepath.Join(n.Dir, "cni"))
}

// cniConfig is the pods' network: a bridge whose host side is their
// gateway, so the host (the apiserver, the kubelet's probes) and the pods
// reach each other, with no masquerading and nothing outside the node.
func (n *RealNode) cniConfig() []byte {
	b, _ := json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0", "name": "headroom-test",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": podBridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": podCIDR}}},
				"routes": []map[string]string{{"dst": "0.0.0.0/0"}}, "dataDir": filepath.Join(n.Dir, "cni-ipam")},
		}},
	}, "", "  ")
	return b
}

func (n *RealNode) kubeletConfig(t testing.TB, opts RealNodeOptions) []byte {
	t.Helper()
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"containerRuntimeEndpoint": "unix://" + n.containerdSocket,
		"cgroupDriver":             "cgroupfs",
		"failSwapOn":               false,
		"address":                  "127.0.0.1",
		"port":                     FreePort(t),
		"readOnlyPort":             0,
		"healthzPort":              0,
		"authentication":           map[string]any{"anonymous": map[string]any{"enabled": false}, "webhook": map[string]any{"enabled": false}},
		"authorization":            map[string]any{"mode": "AlwaysAllow"},
		"podLogsDir":               filepath.Join(n.Dir, "pod-logs"),
		// The pods' cgroup holds a small node: the machine's memory less
		// the rest, reserved for the system.
		"enforceNodeAllocatable": []string{"pods"},
		"systemReserved":         map[string]string{"memory": strconv.FormatInt(n.CapacityBytes-n.PodsMemoryBytes, 10)},
		"maxPods":                30,
		"serializeImagePulls":    false,
		"registerNode":           true,
	}
	if opts.EvictionHard != nil {
		cfg["evictionHard"] = opts.EvictionHard
	}
	for k, v := range opts.KubeletConfig {
		cfg[k] = v
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kubeProxyArgs run kube-proxy in iptables mode without touching the
// node's sysctls (conntrack sizes, route_localnet).
func (n *RealNode) kubeProxyArgs(t testing.TB, kubeconfig string) []string {
	return []string{"--kubeconfig", kubeconfig, "--hostname-override", n.Name, "--proxy-mode", "iptables",
		"--cluster-cidr", podCIDR, "--healthz-bind-address", "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "0", "--conntrack-tcp-timeout-close-wait", "0",
		"--iptables-localhost-nodeports=false", "--v", "0"}
}

// Ctr runs containerd's client against the node's containerd, in the
// kubelet's namespace.
func (n *RealNode) Ctr(args ...string) (string, error) {
	out, err := exec.Command("ctr", append([]string{"--address", n.containerdSocket, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	return string(out), err
}

// waitContainerd polls until containerd answers (a starting daemon has no
// readiness event to wait on).
func (n *RealNode) waitContainerd(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, err := n.Ctr("version")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd not answering after %s: %v\n%s", timeout, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *RealNode) importImage(t testing.TB, img Image) {
	t.Helper()
	archive := filepath.Join(n.Dir, "images", strings.NewReplacer("/", "_", ":", "_").Replace(img.Ref)+".tar")
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := img.WriteArchive(archive); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Ctr("images", "import", archive); err != nil {
		t.Fatalf("import %s into containerd: %v\n%s", img.Ref, err, out)
	}
}

// waitReady follows the node until its Ready condition is true and it
// is schedulable: the node lifecycle controller has lifted the not-ready
// taint the kubelet registered it with.
func (n *RealNode) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	core := n.cp.Clientset(t).CoreV1()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ready := func(node *corev1.Node) bool {
		for _, taint := range node.Spec.Taints {
			if taint.Key == corev1.TaintNodeNotReady {
				return false
			}
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	sel := metav1.ListOptions{FieldSelector: "metadata.name=" + n.Name}
	list, err := core.Nodes().List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 1 && ready(&list.Items[0]) {
		return
	}
	sel.ResourceVersion = list.ResourceVersion
	w, err := core.Nodes().Watch(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last string
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("node %s: watch ended before it was Ready (%s)", n.Name, last)
			}
			if node, ok := ev.Object.(*corev1.Node); ok {
				if ready(node) {
					return
				}
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady {
						last = c.Reason + ": " + c.Message
					}
				}
			}
		case <-ctx.Done():
			t.Fatalf("node %s not Ready after %s (%s)", n.Name, timeout, last)
		}
	}
}

// removeContainers kills and deletes every task and container the kubelet
// left (the pods' and their sandboxes'), through containerd.
func (n *RealNode) removeContainers(t testing.TB) {
	out, err := n.Ctr("containers", "list", "--quiet")
	if err != nil {
		t.Errorf("list the node's containers: %v\n%s", err, out)
		return
	}
	for _, id := range strings.Fields(out) {
		n.Ctr("tasks", "delete", "--force", id)
		if out, err := n.Ctr("containers", "delete", id); err != nil {
			t.Errorf("delete container %s: %v\n%s", id, err, out)
		}
	}
}

// sweeper records what the node may add to the machine outside its
// directory and returns the function that removes it all once the node's
// processes have stopped, failing the test for what it cannot remove.
func (n *RealNode) sweeper(t testing.TB) func(testing.TB) {
	netnsBefore := dirEntries("/run/netns")
	kubeChainsBefore := map[string]map[string][]string{"iptables": kubeChains("iptables"), "ip6tables": kubeChains("ip6tables")}
	// The kubelet makes these whatever its --root-dir says, and
	// containerd its shims' sockets and fifos in /run/containerd.
	var madeDirs []string
	for _, d := range []string{"/var/lib/kubelet", "/var/lib/kubelet/device-plugins", "/var/log/containers", "/var/log/pods", "/run/containerd", "/run/netns"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			madeDirs = append(madeDirs, d)
		}
	}
	hierarchies := cgroupHierarchies(t)
	// The kubelet sets these at start (protectKernelDefaults false, as by
	// default): vm.overcommit_memory 1, kernel.panic 10, and more.
	tunables := map[string][]byte{}
	for _, k := range kubeletKernelTunables {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			tunables[k] = b
		}
	}
	return func(t testing.TB) {
		for k, v := range tunables {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), v, 0o644); err != nil {
				t.Errorf("restore %s: %v", k, err)
			}
		}
		// The node's shims (each serves a pod's containers) outlive
		// containerd; those of this node name its socket.
		for _, pid := range processesNaming(n.containerdSocket) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, h := range hierarchies {
			if err := removeCgroupTree(filepath.Join(h, "kubepods")); err != nil {
				t.Errorf("remove the pods' cgroups: %v", err)
			}
		}
		newNetns := map[string]bool{}
		for e := range dirEntries("/run/netns") {
			if !netnsBefore[e] {
				newNetns[filepath.Join("/run/netns", e)] = true
			}
		}
		for _, m := range mountsUnder(n.Dir, newNetns) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", m, err)
			}
		}
		for ns := range newNetns {
			os.Remove(ns)
		}
		if _, err := os.Stat("/sys/class/net/" + podBridge); err == nil {
			if out, err := exec.Command("ip", "link", "delete", podBridge).CombinedOutput(); err != nil {
				t.Errorf("delete the pods' bridge: %v: %s", err, out)
			}
		}
		if out, err := exec.Command(filepath.Join(n.cp.Bin, "kube-proxy"), "--cleanup").CombinedOutput(); err != nil {
			t.Logf("kube-proxy --cleanup: %v\n%s", err, tail(out, failureLogBytes))
		}
		// What kube-proxy's cleanup leaves: the kubelet's canaries (it
		// watches for iptables flushes with them) and the localnet
		// firewall, with the rules that jump to it.
		for _, cmd := range []string{"iptables", "ip6tables"} {
			removeChains(cmd, newKubeChains(cmd, kubeChainsBefore[cmd]))
			if left := newKubeChains(cmd, kubeChainsBefore[cmd]); len(left) > 0 {
				t.Errorf("%s chains the node made are left: %v", cmd, left)
			}
		}
		// Deepest first: device-plugins before /var/lib/kubelet.
		sort.Sort(sort.Reverse(sort.StringSlice(madeDirs)))
		for _, d := range madeDirs {
			os.RemoveAll(d)
		}
		// The kubelet's links to the pods' logs, in a directory that was there.
		if links, err := os.ReadDir("/var/log/containers"); err == nil {
			for _, l := range links {
				p := filepath.Join("/var/log/containers", l.Name())
				if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, n.Dir) {
					os.Remove(p)
				}
			}
		}
		if err := os.RemoveAll(n.Dir); err != nil {
			t.Errorf("remove the node's directory: %v", err)
		}
	}
}

// kubeletKernelTunables are the sysctls a kubelet writes at start
// (pkg/kubelet/cm's setupKernelTunables).
var kubeletKernelTunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// kubeChains are the KUBE-* chains of cmd (iptables, ip6tables), by table.
func kubeChains(cmd string) map[string][]string {
	out := map[string][]string{}
	b, _ := exec.Command(cmd + "-save").Output()
	table := ""
	for _, line := range strings.Split(string(b), "\n") {
		if t, ok := strings.CutPrefix(line, "*"); ok {
			table = t
		} else if c, ok := strings.CutPrefix(line, ":KUBE-"); ok {
			out[table] = append(out[table], "KUBE-"+strings.Fields(c)[0])
		}
	}
	return out
}

// newKubeChains are cmd's KUBE-* chains not in before, by table.
func newKubeChains(cmd string, before map[string][]string) map[string][]string {
	out := map[string][]string{}
	for table, chains := range kubeChains(cmd) {
		for _, c := range chains {
			if !slices.Contains(before[table], c) {
				out[table] = append(out[table], c)
			}
		}
	}
	return out
}

// removeChains deletes chains, by table, and every rule that jumps to
// them, in one iptables-restore transaction per table that flushes
// nothing else.
func removeChains(cmd string, chains map[string][]string) {
	for table, names := range chains {
		saved, _ := exec.Command(cmd+"-save", "-t", table).Output()
		var script strings.Builder
		script.WriteString("*" + table + "\n")
		for _, line := range strings.Split(string(saved), "\n") {
			rule, ok := strings.CutPrefix(line, "-A ")
			if !ok {
				continue
			}
			for _, c := range names {
				if strings.HasSuffix(rule, "-j "+c) || strings.Contains(rule, "-j "+c+" ") {
					script.WriteString("-D " + rule + "\n")
					break
				}
			}
		}
		for _, c := range names {
			script.WriteString("-F " + c + "\n")
		}
		for _, c := range names {
			script.WriteString("-X " + c + "\n")
		}
		script.WriteString("COMMIT\n")
		restore := exec.Command(cmd+"-restore", "--noflush")
		restore.Stdin = strings.NewReader(script.String())
		restore.Run()
	}
}

// cgroupHierarchies are the machine's cgroup mounts under /sys/fs/cgroup
// (each v1 controller's and the unified one).
func cgroupHierarchies(t testing.TB) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		if fs := fields[sep+1]; (fs == "cgroup" || fs == "cgroup2") && strings.HasPrefix(fields[4], "/sys/fs/cgroup") {
			out = append(out, fields[4])
		}
	}
	return out
}

// removeCgroupTree kills what runs in dir and its children and removes
// them, deepest first; a missing dir is no error.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return nil
	}
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		for attempt := 0; attempt < 50; attempt++ {
			for _, file := range []string{"cgroup.procs", "tasks"} {
				b, _ := os.ReadFile(filepath.Join(d, file))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			if last = syscall.Rmdir(d); last == nil {
				break
			}
			// A killed process leaves its cgroup a moment later.
			time.Sleep(20 * time.Millisecond)
		}
		if last != nil {
			last = fmt.Errorf("%s: %w", d, last)
		}
	}
	return last
}

// mountsUnder are the mount points under dir and those in extra, deepest
// first.
func mountsUnder(dir string, extra map[string]bool) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		if p := fields[4]; strings.HasPrefix(p, dir+"/") || extra[p] {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// processesNaming are the processes whose command line holds s.
func processesNaming(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func dirEntries(dir string) map[string]bool {
	out := map[string]bool{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// PodLog is what a container of a pod on the node has written so far
// (its first run's log, in the kubelet's CRI format: time, stream, tag,
// line).
func (n *RealNode) PodLog(t testing.TB, pod *corev1.Pod, container string) string {
	t.Helper()
	dir := filepath.Join(n.Dir, "pod-logs", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	b, err := os.ReadFile(filepath.Join(dir, "0.log"))
	if err != nil {
		t.Logf("log of %s/%s: %v", pod.Name, container, err)
	}
	return string(b)
}

// ContainerCgroup is the v1 memory cgroup directory of a running
// container of pod, in the kubelet's cgroupfs layout.
func (n *RealNode) ContainerCgroup(t testing.TB, pod *corev1.Pod, container string) string {
	t.Helper()
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name != container {
			continue
		}
		_, id, ok := strings.Cut(s.ContainerID, "://")
		if !ok {
			t.Fatalf("pod %s: container %s has no ID (%q)", pod.Name, container, s.ContainerID)
		}
		qos := strings.ToLower(string(pod.Status.QOSClass))
		if pod.Status.QOSClass == corev1.PodQOSGuaranteed {
			qos = ""
		}
		return filepath.Join("/sys/fs/cgroup/memory/kubepods", qos, "pod"+string(pod.UID), id)
	}
	t.Fatalf("pod %s has no container %s", pod.Name, container)
	return ""
}

// WaitPod follows the pods of ns that match selector until one satisfies
// cond, and returns it.
func WaitPod(t testing.TB, core corev1client.CoreV1Interface, ns, selector string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last *corev1.Pod
	// A watch may end early (the apiserver closes watches it finds slow):
	// list and watch again from there.
	for {
		list, err := core.Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatal(err)
		}
		for i := range list.Items {
			if cond(&list.Items[i]) {
				return &list.Items[i]
			}
			last = &list.Items[i]
		}
		w, err := core.Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			t.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok {
				if cond(p) {
					w.Stop()
					return p
				}
				last = p
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	state := "no pod"
	if last != nil {
		b, _ := json.Marshal(last.Status)
		state = last.Name + ": " + string(b)
	}
	t.Fatalf("pods %s in %s: not %s after %s (%s)", selector, ns, what, timeout, state)
	return nil
}

// PodReady reports whether the pod's Ready condition is true.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
