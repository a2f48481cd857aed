package main

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// stepPrinter is what the step-by-step commands print through: a status
// line redrawn in place when stderr is a terminal, notes and step lines on
// stdout (none with --json, whose output is the final document).
type stepPrinter struct {
	mu     sync.Mutex
	out    io.Writer
	status io.Writer // nil unless stderr is a terminal
	json   bool
	header bool // the step table's header is printed
}

// init sets where the printer writes; the status line only on a terminal.
func (p *stepPrinter) init(out, errw io.Writer, asJSON bool) {
	p.out, p.json = out, asJSON
	if f, ok := errw.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			p.status = f
		}
	}
}

// setStatus redraws the status line.
func (p *stepPrinter) setStatus(format string, args ...any) {
	if p.status == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.status, "\r\033[K"+format, args...)
}

// clearStatus erases the status line.
func (p *stepPrinter) clearStatus() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatusLocked()
}

func (p *stepPrinter) clearStatusLocked() {
	if p.status != nil {
		fmt.Fprint(p.status, "\r\033[K")
	}
}

// Note prints a one-line message.
func (p *stepPrinter) Note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearStatusLocked()
	if !p.json {
		fmt.Fprintf(p.out, format+"\n", args...)
	}
}
