package microvm

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Accel is a QEMU accelerator.
type Accel string

// Accelerators.
const (
	AccelAuto Accel = "auto"
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// ParseAccel parses --accel.
func ParseAccel(s string) (Accel, error) {
	switch a := Accel(s); a {
	case AccelAuto, AccelKVM, AccelTCG:
		return a, nil
	}
	return "", fmt.Errorf("unknown accelerator %q; want auto, kvm or tcg", s)
}

// hostFacts are what accelerator detection looks at; tests supply fixtures.
type hostFacts struct {
	kvmDevice   bool // /dev/kvm opens and answers KVM_GET_API_VERSION
	pvmModule   bool // /sys/module/kvm_pvm: KVM without hardware virtualization
	cpuHasVirtE bool // vmx or svm in /proc/cpuinfo
}

func readHostFacts() hostFacts {
	var f hostFacts
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		f.pvmModule = true
	}
	if fd, err := unix.Open("/dev/kvm", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
		const kvmGetAPIVersion = 0xAE00
		v, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmGetAPIVersion, 0)
		f.kvmDevice = errno == 0 && v == 12
		unix.Close(fd)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "flags") {
				flags := " " + line + " "
				f.cpuHasVirtE = strings.Contains(flags, " vmx ") || strings.Contains(flags, " svm ")
				break
			}
		}
	}
	return f
}

// chooseAccel picks KVM when it can boot a stock guest on this host and
// TCG otherwise, and says why.
func chooseAccel(f hostFacts) (Accel, string) {
	switch {
	case f.pvmModule:
		// PVM (the kvm_pvm module) serves /dev/kvm without hardware
		// virtualization and boots only PVM-aware guest kernels.
		return AccelTCG, "/dev/kvm is PVM (kvm_pvm loaded), which cannot boot a stock guest kernel"
	case !f.kvmDevice:
		return AccelTCG, "/dev/kvm is missing or does not answer"
	case !f.cpuHasVirtE:
		return AccelTCG, "the CPU has no hardware virtualization (no vmx or svm flag)"
	}
	return AccelKVM, "/dev/kvm works and the CPU has hardware virtualization"
}

// DetectAccel picks the accelerator for this host.
func DetectAccel() (Accel, string) { return chooseAccel(readHostFacts()) }
