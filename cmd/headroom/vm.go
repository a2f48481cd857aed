package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/headroom-dev/headroom/internal/cgroup"
	"github.com/headroom-dev/headroom/internal/flagvalue"
	"github.com/headroom-dev/headroom/internal/microvm"
	"github.com/headroom-dev/headroom/internal/units"
)

func newVMCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Build the micro-VM guest image; run one micro-VM with a workload inside",
		Long: `Micro-VMs: QEMU guests that boot in about a second and run a headroom
subcommand (by default headroom load) inside a real guest kernel, with a
virtio balloon (free page reporting on), QMP, and optionally a guest swap
disk. On a host with working hardware virtualization they run on KVM,
elsewhere on TCG.`,
	}
	cmd.AddCommand(newVMImageCommand(), newVMRunCommand())
	return cmd
}

type imageFlags struct {
	kernelPackage string
	json          bool
}

func (f *imageFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kernelPackage, "kernel-package", microvm.DefaultKernelPackage, "Debian kernel package (or metapackage) the guest kernel comes from")
}

func newVMImageCommand() *cobra.Command {
	f := &imageFlags{}
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build (or find in the cache) the guest kernel and initramfs",
		Long: `Build the guest image, or find it in the cache ($XDG_CACHE_HOME/headroom,
default ~/.cache/headroom): the kernel and its virtio modules from Debian's
package (apt-get download + dpkg-deb -x; nothing is installed), booted as
an uncompressed vmlinux; an initramfs with busybox-static and this headroom
binary as /init. The initramfs is rebuilt when the headroom binary changes
(its name is its content hash) and is byte-for-byte reproducible.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			img, err := buildImage(cmd, f)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(cmd, img)
			}
			printImage(cmd.OutOrStdout(), img)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.json, "json", false, "print the image description as JSON")
	return cmd
}

// buildImage builds or finds the guest image, reporting progress on stderr;
// it first checks that QEMU is there to boot it.
func buildImage(cmd *cobra.Command, f *imageFlags) (microvm.Image, error) {
	if _, err := microvm.FindQEMU(); err != nil {
		return microvm.Image{}, usageError{err}
	}
	img, err := microvm.BuildImage(cmd.Context(), microvm.ImageOptions{KernelPackage: f.kernelPackage,
		Logf: func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "headroom vm: "+format+"\n", args...) }})
	var se *microvm.SetupError
	if errors.As(err, &se) {
		return img, usageError{err}
	}
	return img, err
}

func printImage(w io.Writer, img microvm.Image) {
	state := func(cached bool) string {
		if cached {
			return "cached"
		}
		return "built"
	}
	fmt.Fprintf(w, "kernel:    %s %s (%s), %s\n", img.KernelPackage, img.KernelVersion, state(img.KernelCached), img.Kernel)
	for _, n := range img.KernelSourceNotes {
		fmt.Fprintf(w, "           %s\n", n)
	}
	fmt.Fprintf(w, "modules:   %s\n", strings.Join(img.Modules, " "))
	fmt.Fprintf(w, "busybox:   %s (%s)\n", img.BusyboxVersion, img.Busybox)
	fmt.Fprintf(w, "headroom:  sha256 %s (%s)\n", img.HeadroomSHA256, img.Headroom)
	fmt.Fprintf(w, "initramfs: %s, %s (%s), sha256 %s\n", img.Initramfs, units.FormatBytes(uint64(img.InitramfsBytes)),
		state(img.InitramfsCached), img.InitramfsSHA256)
}

type vmRunFlags struct {
	image     imageFlags
	memory    flagvalue.Bytes
	cpus      int
	cgroup    string
	qmp       string
	console   string
	guestSwap string
	accel     string
	grace     time.Duration
	verbose   bool
}

const vmRunLong = `Boot one micro-VM running a headroom subcommand inside it (default: load
with its defaults) and exit with that command's status. The command's own
output (its table, or its JSON lines with --json) appears unchanged on
standard output and standard error; the guest kernel's console goes to
--console.

--guest-swap SIZE[,backing=file|tmpfs] gives the guest a swap disk
(virtio-blk) backed by a new host file in /var/tmp (file, direct I/O) or in
/dev/shm (tmpfs: host memory), removed at the end. --cgroup runs QEMU in an
existing memory cgroup from its first instruction (a v1 limit cannot be
lowered later). --qmp names a QMP socket for other tools (an agent, a user).

Ctrl-C powers the guest down: the command gets SIGTERM, prints its summary
and exits; nothing is left behind.`

func newVMRunCommand() *cobra.Command {
	f := &vmRunFlags{memory: 512 << 20, cpus: 1, accel: string(microvm.AccelAuto), grace: 10 * time.Second}
	cmd := &cobra.Command{
		Use:   "run [flags] [-- SUBCOMMAND [ARGS...]]",
		Short: "Boot one micro-VM running a headroom subcommand inside it",
		Long:  vmRunLong,
		Example: `  headroom vm run --memory 512Mi -- load --size 384Mi --scan random --rate 50k
  headroom vm run --memory 256Mi --guest-swap 512Mi,backing=tmpfs -- load --size 384Mi --scan random --duration 30s --json`,
		RunE: func(cmd *cobra.Command, args []string) error { return runVM(cmd, f, args) },
	}
	fl := cmd.Flags()
	f.image.register(cmd)
	fl.Var(&f.memory, "memory", "guest memory")
	fl.IntVar(&f.cpus, "cpus", f.cpus, "guest vCPUs")
	fl.StringVar(&f.cgroup, "cgroup", "", "existing memory cgroup to run QEMU in (a path under the cgroup mount, e.g. machine.slice/vm1)")
	fl.StringVar(&f.qmp, "qmp", "", "path of a QMP socket for other tools (default: a private one)")
	fl.StringVar(&f.console, "console", "", "file for the guest's console (kernel messages; default: discarded unless the guest fails)")
	fl.StringVar(&f.guestSwap, "guest-swap", "", "guest swap disk: SIZE[,backing=file|tmpfs]")
	fl.StringVar(&f.accel, "accel", f.accel, "accelerator: auto (KVM where it works, else TCG), kvm or tcg")
	fl.DurationVar(&f.grace, "grace", f.grace, "time the guest command gets to exit after Ctrl-C before it is killed")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print the accelerator and the boot phases on standard error")
	return cmd
}

// ParseGuestSwap parses --guest-swap SIZE[,backing=file|tmpfs].
func parseGuestSwap(s string) (*microvm.SwapDisk, error) {
	if s == "" {
		return nil, nil
	}
	size, opt, _ := strings.Cut(s, ",")
	n, err := units.ParseBytes(size)
	if err != nil || n < 1<<20 {
		return nil, fmt.Errorf("invalid size %q: want at least 1Mi, e.g. 512Mi", size)
	}
	d := &microvm.SwapDisk{SizeBytes: n}
	switch opt {
	case "", "backing=file":
	case "backing=tmpfs":
		d.Tmpfs = true
	default:
		return nil, fmt.Errorf("invalid option %q: want backing=file or backing=tmpfs", opt)
	}
	return d, nil
}

func runVM(cmd *cobra.Command, f *vmRunFlags, args []string) error {
	if len(args) == 0 {
		args = []string{"load"}
	}
	if err := checkGuestCommand(cmd.Root(), args); err != nil {
		return usageError{err}
	}
	if uint64(f.memory) < microvm.MinMemoryBytes {
		return usagef("--memory %s is too small to boot the guest: the minimum is %s", units.FormatBytes(uint64(f.memory)), units.FormatBytes(microvm.MinMemoryBytes))
	}
	if f.cpus < 1 || f.cpus > 64 {
		return usagef("--cpus must be between 1 and 64, got %d", f.cpus)
	}
	accel, err := microvm.ParseAccel(f.accel)
	if err != nil {
		return usagef("--accel: %v", err)
	}
	swap, err := parseGuestSwap(f.guestSwap)
	if err != nil {
		return usagef("--guest-swap: %v", err)
	}
	var cgroupDir string
	if f.cgroup != "" {
		g, err := cgroup.Open(f.cgroup)
		if err != nil {
			return usagef("--cgroup: %v", err)
		}
		cgroupDir = g.Path()
	}
	if f.grace < time.Second {
		return usagef("--grace must be at least 1s")
	}
	img, err := buildImage(cmd, &f.image)
	if err != nil {
		return err
	}
	release := holdRestore(cmd.Context())
	defer release()
	vm, err := microvm.Start(cmd.Context(), microvm.Config{
		Image: img, Name: "headroom-vm-run", MemoryBytes: uint64(f.memory), CPUs: f.cpus, Args: args,
		Console: f.console, QMPSocket: f.qmp, Cgroup: cgroupDir, GuestSwap: swap, Accel: accel,
		Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), GraceSeconds: int(f.grace.Seconds()),
	})
	if err != nil {
		var se *microvm.SetupError
		if errors.As(err, &se) {
			return usageError{err}
		}
		return err
	}
	defer vm.Close()
	if f.verbose {
		go func() {
			select {
			case <-vm.CommandStarted():
				p := vm.Phases()
				since := func(t time.Time) float64 { return t.Sub(p.Created).Seconds() }
				fmt.Fprintf(cmd.ErrOrStderr(), "headroom vm: %s; qemu started +%.2fs, QMP ready +%.2fs, guest booted +%.2fs, command started +%.2fs (guest uptime %.2fs, QEMU %.2f CPU-s)\n",
					vm.Accel(), since(p.QEMUStarted), since(p.QMPReady), since(p.Booted), since(p.CommandStarted), p.GuestUptimeSeconds, p.BootCPUSeconds)
			case <-vm.Exited():
			}
		}()
	}
	select {
	case <-vm.Exited():
	case <-cmd.Context().Done():
		// Ctrl-C: the guest command stops itself and reports; the VM
		// powers off (forced after the grace period).
		vm.Stop(f.grace + 5*time.Second)
	}
	exit := vm.Exit()
	if exit.Ended != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "headroom vm: %s\n", exit.Ended)
	}
	if exit.Status < 0 {
		msg := exit.Reason
		if tail := vm.ConsoleTail(15); tail != "" {
			msg += "\nconsole tail:\n" + tail
		}
		return errors.New(msg)
	}
	if exit.Status != 0 {
		return exitStatus(exit.Status)
	}
	return nil
}

// checkGuestCommand accepts a headroom subcommand (not vm itself) or an
// absolute path inside the guest (busybox applets live in /bin).
func checkGuestCommand(root *cobra.Command, args []string) error {
	if strings.HasPrefix(args[0], "/") {
		return nil
	}
	for _, c := range root.Commands() {
		if c.Name() == args[0] && c.Name() != "vm" && c.Name() != "completion" && c.Name() != "help" {
			return nil
		}
	}
	var names []string
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() && c.Name() != "vm" && c.Name() != "completion" {
			names = append(names, c.Name())
		}
	}
	return fmt.Errorf("unknown guest command %q: want a headroom subcommand (%s) or an absolute path in the guest such as /bin/sh",
		args[0], strings.Join(names, ", "))
}

// exitStatus makes headroom exit with a guest command's status, silently
// (the command printed its own error inside the guest).
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("guest command exited with status %d", int(e)) }
