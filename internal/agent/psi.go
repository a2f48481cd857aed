package agent

import (
	"os"

	"github.com/headroom-dev/headroom/internal/host"
)

func readPSIFile(path string) (host.PSI, error) {
	f, err := os.Open(path)
	if err != nil {
		return host.PSI{}, err
	}
	defer f.Close()
	return host.ParsePSI(f)
}
