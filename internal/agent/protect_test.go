package agent

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestProtectSelfSaysWhatToGrant(t *testing.T) {
	for _, tc := range []struct {
		name string
		fix  string
		want string // a part of fix; "" when there is none
	}{
		{"mlockall refused at a limit of 0", mlockFix(unix.EPERM, 0), "CAP_IPC_LOCK"},
		{"mlockall beyond a 64 KiB limit", mlockFix(unix.ENOMEM, 64<<10), "RLIMIT_MEMLOCK is 64.0 KiB"},
		{"mlockall beyond a 64 KiB limit, the remedy", mlockFix(unix.ENOMEM, 64<<10), "LimitMEMLOCK=infinity"},
		{"mlockall out of memory with no limit", mlockFix(unix.ENOMEM, unix.RLIM_INFINITY), ""},
		{"oom_score_adj refused", oomScoreFix(&os.PathError{Op: "write", Path: "/proc/self/oom_score_adj", Err: unix.EACCES}), "CAP_SYS_RESOURCE"},
		{"oom_score_adj out of range", oomScoreFix(&os.PathError{Op: "write", Path: "/proc/self/oom_score_adj", Err: unix.EINVAL}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" && tc.fix != "" || !strings.Contains(tc.fix, tc.want) {
				t.Errorf("fix %q, want one with %q", tc.fix, tc.want)
			}
		})
	}
	if got := withFix([]any{"err", errors.New("x")}, ""); len(got) != 2 {
		t.Errorf("withFix with no fix added %v", got[2:])
	}
}
