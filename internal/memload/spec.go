package memload

import "github.com/headroom-dev/headroom/internal/memload/loadspec"

// The workload's access pattern and content are declared in loadspec,
// which the simulator imports without this package's runner.
type (
	Scan        = loadspec.Scan
	ContentKind = loadspec.ContentKind
	Content     = loadspec.Content
)

const (
	ScanNone        = loadspec.ScanNone
	ScanSeq         = loadspec.ScanSeq
	ScanRandom      = loadspec.ScanRandom
	ContentRandom   = loadspec.ContentRandom
	ContentZero     = loadspec.ContentZero
	ContentDup      = loadspec.ContentDup
	ContentCompress = loadspec.ContentCompress
	ContentForm     = loadspec.ContentForm
	MaxDupTemplates = loadspec.MaxDupTemplates
)

var (
	ParseScan    = loadspec.ParseScan
	ParseContent = loadspec.ParseContent
)
