package kube

import (
	"fmt"
	"os"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Cgroup drivers of the kubelet.
const (
	DriverSystemd  = "systemd"
	DriverCgroupfs = "cgroupfs"
)

// Layout is where the kubelet puts pod cgroups: under its --cgroup-root,
// named by its cgroup driver. It is the same on cgroup v1 (per controller
// hierarchy) and v2; paths are relative to the hierarchy's root.
type Layout struct {
	Root   string // the kubelet's --cgroup-root, "/" by default
	Driver string // DriverSystemd or DriverCgroupfs
}

// Kubepods is the cgroup holding every pod: the agent's scope.
func (l Layout) Kubepods() string {
	if l.Driver == DriverSystemd {
		return path.Join("/", l.Root, "kubepods.slice")
	}
	return path.Join("/", l.Root, "kubepods")
}

// QOSDirs are the cgroups whose children are pods: kubepods itself
// (Guaranteed pods), its burstable and besteffort children.
func (l Layout) QOSDirs() []string {
	return []string{l.Kubepods(), l.qosDir(corev1.PodQOSBurstable), l.qosDir(corev1.PodQOSBestEffort)}
}

func (l Layout) qosDir(qos corev1.PodQOSClass) string {
	switch {
	case qos == corev1.PodQOSGuaranteed:
		return l.Kubepods()
	case l.Driver == DriverSystemd:
		q := strings.ToLower(string(qos))
		return path.Join(l.Kubepods(), "kubepods-"+q+".slice")
	default:
		return path.Join(l.Kubepods(), strings.ToLower(string(qos)))
	}
}

// PodCgroup is the cgroup of the pod with this QoS class and UID:
// kubepods/burstable/pod<uid> (cgroupfs) or
// kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
// (systemd, with the UID's dashes as underscores).
func (l Layout) PodCgroup(qos corev1.PodQOSClass, uid types.UID) string {
	dir := l.qosDir(qos)
	if l.Driver != DriverSystemd {
		return path.Join(dir, "pod"+string(uid))
	}
	prefix := "kubepods-"
	if qos != corev1.PodQOSGuaranteed {
		prefix += strings.ToLower(string(qos)) + "-"
	}
	return path.Join(dir, prefix+"pod"+strings.ReplaceAll(string(uid), "-", "_")+".slice")
}

// DetectDriver finds the kubelet's cgroup driver from the kubepods cgroup
// that exists under root in the hierarchy mounted at mount: kubepods.slice
// (systemd) or kubepods (cgroupfs).
func DetectDriver(mount, root string) (string, error) {
	for _, driver := range []string{DriverSystemd, DriverCgroupfs} {
		l := Layout{Root: root, Driver: driver}
		if fi, err := os.Stat(path.Join(mount, l.Kubepods())); err == nil && fi.IsDir() {
			return driver, nil
		}
	}
	return "", fmt.Errorf("no kubepods cgroup under %s: neither %s nor %s exists (is the kubelet running with this --cgroup-root?)",
		path.Join(mount, root), Layout{root, DriverSystemd}.Kubepods(), Layout{root, DriverCgroupfs}.Kubepods())
}
