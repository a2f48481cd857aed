// Package kubetest runs a real Kubernetes control plane on loopback for
// tests: etcd, kube-apiserver (RBAC, service account tokens, static admin
// token), kube-controller-manager (the disruption controller computes
// PodDisruptionBudget status, which the Eviction API reads; the service
// account controller makes default service accounts; the garbage
// collector deletes owned objects with their owner) and kwok (fake nodes
// that stay Ready and run pods' lifecycles). The binaries come from
// hack/kube-binaries.sh, built once into the cache.
package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/headroom-dev/headroom/internal/testenv"
)

// AdminToken authenticates as system:masters.
const AdminToken = "headroom-test-admin-token"

// ControlPlane is a running control plane.
type ControlPlane struct {
	// URL is the apiserver's https address.
	URL string
	// AdminKubeconfig is a kubeconfig file for the admin user.
	AdminKubeconfig string
	// Bin is where the binaries are.
	Bin string
	dir string
	// procs are the running components by name.
	procs map[string]*exec.Cmd
}

// Pause stops a component (SIGSTOP: its sockets stay open and its clients
// hang, as with an apiserver that stopped answering) until resume is
// called, or the test ends.
func (cp *ControlPlane) Pause(t testing.TB, name string) (resume func()) {
	t.Helper()
	cmd, ok := cp.procs[name]
	if !ok {
		t.Fatalf("no component %s", name)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("pause %s: %v", name, err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT); err != nil {
				t.Errorf("resume %s: %v", name, err)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// Binaries returns the directory of the control plane's binaries, building
// them (about 10 minutes, once per version) if the cache lacks them.
func Binaries(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("HEADROOM_KUBE_BIN"); d != "" {
		return d
	}
	root := testenv.ModuleRoot(t)
	cmd := exec.Command(filepath.Join(root, "hack", "kube-binaries.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/kube-binaries.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// Options add to the control plane.
type Options struct {
	// CRDFiles are applied (and established) before kwok starts, so that
	// its stages can refer to their kinds.
	CRDFiles []string
	// KwokStages is a YAML stream of kwok Stages for kinds beyond nodes
	// and pods (kwok keeps its default node and pod stages).
	KwokStages string
	// RealNodes makes the control plane serve real kubelets (StartRealNode):
	// the apiserver listens on every address and advertises the host's
	// own, which pods reach through the kubernetes service (kube-proxy on
	// the node routes it); the controller manager also runs the
	// DaemonSet, ReplicaSet, Deployment and node lifecycle controllers and publishes the
	// apiserver's CA to every namespace (kube-root-ca.crt, which in-cluster
	// clients verify it with); and kube-scheduler binds the pods.
	RealNodes bool
}

// Start runs the control plane until the test ends.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith runs the control plane with opts until the test ends.
func StartWith(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	bin := Binaries(t)
	dir := t.TempDir()
	cp := &ControlPlane{Bin: bin, dir: dir}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	write(t, filepath.Join(dir, "sa.key"), keyPEM)
	write(t, filepath.Join(dir, "sa.pub"), pubPEM)
	write(t, filepath.Join(dir, "tokens.csv"), []byte(AdminToken+`,admin,admin,"system:masters"`+"\n"))
	// The audit log records service accounts' requests (not the admin's,
	// kwok's or the controllers'): what the agent asked of the apiserver;
	// and kwok's patches of VMIs (it runs as admin): when each phase was
	// written, to the microsecond.
	write(t, filepath.Join(dir, "audit-policy.yaml"), []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
- level: Metadata
  users: ["admin"]
  verbs: ["patch"]
  resources: [{group: kubevirt.io, resources: [virtualmachineinstances]}]
- level: None
`))

	etcdClient, etcdPeer, apiPort := FreePort(t), FreePort(t), FreePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	cp.start(t, "etcd", "--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL,
		"--advertise-client-urls", etcdURL, "--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(etcdPeer), "--log-level", "warn",
		"--quota-backend-bytes", strconv.Itoa(1<<30), "--unsafe-no-fsync")
	waitHTTP(t, etcdURL+"/health", "", 30*time.Second)

	cp.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	bindAddress, advertiseAddress := "127.0.0.1", "127.0.0.1"
	if opts.RealNodes {
		bindAddress, advertiseAddress = "0.0.0.0", HostAddress(t)
	}
	cp.start(t, "kube-apiserver", "--etcd-servers", etcdURL, "--bind-address", bindAddress, "--advertise-address", advertiseAddress,
		"--secure-port", strconv.Itoa(apiPort), "--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16", "--allow-privileged", "--v", "0",
		"--audit-policy-file", filepath.Join(dir, "audit-policy.yaml"), "--audit-log-path", filepath.Join(dir, "audit.log"),
		"--audit-log-mode", "blocking")
	waitHTTP(t, cp.URL+"/readyz", AdminToken, 90*time.Second)

	cp.AdminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	writeKubeconfig(t, cp.AdminKubeconfig, cp.URL, AdminToken)

	controllers := []string{"disruption", "serviceaccount", "namespace", "garbagecollector"}
	var rootCA []string
	if opts.RealNodes {
		controllers = append(controllers, "daemonset", "replicaset", "deployment", "root-ca-cert-publisher",
			// It lifts the not-ready taint a kubelet registers its node with.
			"nodelifecycle")
		// The apiserver's self-signed serving certificate, written
		// beside its CA's, names the kubernetes service's address.
		rootCA = []string{"--root-ca-file", filepath.Join(dir, "pki", "apiserver.crt")}
	}
	cp.start(t, "kube-controller-manager", append([]string{"--kubeconfig", cp.AdminKubeconfig, "--leader-elect=false",
		"--controllers", strings.Join(controllers, ","), "--secure-port", "0", "--v", "0"}, rootCA...)...)
	if opts.RealNodes {
		cp.start(t, "kube-scheduler", "--kubeconfig", cp.AdminKubeconfig, "--leader-elect=false", "--secure-port", "0", "--v", "0")
	}
	for _, f := range opts.CRDFiles {
		cp.installCRDs(t, f)
	}
	kwokArgs := []string{"--kubeconfig", cp.AdminKubeconfig, "--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--cidr", "10.244.0.0/16", "--node-ip", "10.0.0.1"}
	if opts.KwokStages != "" {
		// kwok reads its configuration from the stream; with no node or
		// pod stages in it, it adds its defaults for those.
		path := filepath.Join(dir, "kwok-stages.yaml")
		write(t, path, []byte(opts.KwokStages))
		kwokArgs = append(kwokArgs, "--config", path)
	}
	cp.start(t, "kwok", kwokArgs...)
	return cp
}

// installCRDs creates the CRDs in file (server-side: KubeVirt's are too
// large for client-side apply's annotation) and waits until they are
// established.
func (cp *ControlPlane) installCRDs(t testing.TB, file string) {
	t.Helper()
	if out, err := cp.Kubectl(t, "", "create", "-f", file); err != nil {
		t.Fatalf("create CRDs from %s: %v\n%s", file, err, out)
	}
	cp.waitEstablished(t, 60*time.Second, "-f", file)
	// kwok reads a kind's schema from the OpenAPI v3 document, which the
	// apiserver publishes a moment after the CRD is established.
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range Documents(t, string(b)) {
		spec, _ := crd["spec"].(map[string]any)
		group, _ := spec["group"].(string)
		versions, _ := spec["versions"].([]any)
		for _, v := range versions {
			name, _ := v.(map[string]any)["name"].(string)
			waitHTTP(t, cp.URL+"/openapi/v3/apis/"+group+"/"+name, AdminToken, 60*time.Second)
		}
	}
}

// AuditEvent is one request in the audit log.
type AuditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	// StageTimestamp is when the stage logged was reached (for a completed
	// request, when its response was written).
	StageTimestamp time.Time `json:"stageTimestamp"`
	Stage          string    `json:"stage"`
}

// Audit returns the requests of user (a service account's full name, or
// "admin" for kwok's VMI patches) the apiserver logged so far, one per request (its final stage).
func (cp *ControlPlane) Audit(t testing.TB, user string) []AuditEvent {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cp.dir, "audit.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []AuditEvent
	for _, line := range strings.Split(string(b), "\n") {
		var e AuditEvent
		if json.Unmarshal([]byte(line), &e) != nil || e.User.Username != user {
			continue
		}
		// A watch is logged when its response starts; other requests when
		// they complete.
		if (e.Verb == "watch") == (e.Stage == "ResponseStarted") || e.Stage == "Panic" {
			out = append(out, e)
		}
	}
	return out
}

// RESTConfig is the admin's client configuration.
func (cp *ControlPlane) RESTConfig(t testing.TB) *rest.Config {
	t.Helper()
	return cp.TokenConfig(AdminToken)
}

// Clientset is a typed admin client (tests may link every API group).
func (cp *ControlPlane) Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.RESTConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TokenConfig is a client configuration authenticating with token.
func (cp *ControlPlane) TokenConfig(token string) *rest.Config {
	return &rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 200, Burst: 400}
}

// WriteKubeconfig writes a kubeconfig that authenticates with token and
// returns its path.
func (cp *ControlPlane) WriteKubeconfig(t testing.TB, name, token string) string {
	return cp.WriteKubeconfigAt(t, name, cp.URL, token)
}

// WriteKubeconfigAt writes a kubeconfig for another server address (an
// unreachable one, say).
func (cp *ControlPlane) WriteKubeconfigAt(t testing.TB, name, server, token string) string {
	p := filepath.Join(cp.dir, name+".kubeconfig")
	writeKubeconfig(t, p, server, token)
	return p
}

func writeKubeconfig(t testing.TB, path, server, token string) {
	c := clientcmdapi.NewConfig()
	c.Clusters["test"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	c.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	c.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		t.Fatal(err)
	}
}

// start runs one of the control plane's binaries (see startProcess).
func (cp *ControlPlane) start(t testing.TB, name string, args ...string) {
	t.Helper()
	cp.startProcess(t, name, filepath.Join(cp.Bin, name), args...)
}

// startProcess runs a program in its own process group, logging to a
// file, and stops it (SIGTERM, then SIGKILL after 5 s) when the test ends.
func (cp *ControlPlane) startProcess(t testing.TB, name, path string, args ...string) {
	t.Helper()
	logPath := filepath.Join(cp.dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	if cp.procs == nil {
		cp.procs = map[string]*exec.Cmd{}
	}
	cp.procs[name] = cmd
	done := make(chan struct{})
	var stopping atomic.Bool
	go func() {
		err := cmd.Wait()
		if !stopping.Load() {
			// A component that dies (kwok refusing its stages, say) must
			// fail the test, not leave it waiting for what never happens.
			t.Errorf("%s exited during the test: %v (log: %s)", name, err, logPath)
		}
		close(done)
	}()
	t.Cleanup(func() {
		// The log's tail as the test left it, not the shutdown's noise;
		// short, so the failure it explains stays in view above it.
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s log (last %d bytes):\n%s", name, failureLogBytes, tail(b, failureLogBytes))
			}
		}
		stopping.Store(true)
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		logf.Close()
	})
}

// failureLogBytes is how much of each component's log a failed test shows.
const failureLogBytes = 1000

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func write(t testing.TB, path string, b []byte) {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// HostAddress is the host's first IPv4 address on an interface that is
// up and not loopback: where pods, in their own network namespaces,
// reach the host.
func HostAddress(t testing.TB) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String()
			}
		}
	}
	t.Fatal("no IPv4 address on an interface that is up and not loopback")
	return ""
}

// FreePort is a loopback TCP port nothing listens on now.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreePortPair is a port p with p+1 that nothing listens on now, on any
// interface, picked below the kernel's ephemeral ports: the control
// plane's client connections take their local ports from that range, and
// once one held the port after a pair picked there (density's controller
// on p serves its binary on p+1).
func FreePortPair(t testing.TB) int {
	t.Helper()
	lowest := 1024
	highest := ephemeralPortsFrom() - 2
	start := lowest + mrand.IntN(highest-lowest)
	for i := range highest - lowest {
		p := lowest + (start-lowest+i)%(highest-lowest)
		first, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		second, err := net.Listen("tcp", ":"+strconv.Itoa(p+1))
		first.Close()
		if err != nil {
			continue
		}
		second.Close()
		return p
	}
	t.Fatalf("no two free ports in a row from %d to %d", lowest, highest+1)
	return 0
}

// ephemeralPortsFrom is the first port the kernel hands out to
// connections that bind none (net.ipv4.ip_local_port_range; Linux's
// default where it cannot be read).
func ephemeralPortsFrom() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if fields := strings.Fields(string(b)); err == nil && len(fields) == 2 {
		if p, err := strconv.Atoi(fields[0]); err == nil && p >= 2048 {
			return p
		}
	}
	return linuxDefault
}

// waitHTTP polls url until it answers 200 (a process starting has no
// readiness event to wait on).
func waitHTTP(t testing.TB, url, token string, timeout time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %s: %s", url, timeout, last)
}

// Metric is the value of one series of the apiserver's /metrics, named
// as the text format prints it (labels sorted), e.g.
// `apiserver_terminated_watchers_total{group="",resource="pods"}`; 0 when
// the apiserver has not exported it yet (a counter never incremented).
func (cp *ControlPlane) Metric(t testing.TB, series string) float64 {
	t.Helper()
	body, err := cp.Clientset(t).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	v, _ := MetricValue(body, series)
	return v
}

// MetricValue finds series in a Prometheus text exposition.
func MetricValue(exposition []byte, series string) (float64, bool) {
	for _, line := range strings.Split(string(exposition), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
