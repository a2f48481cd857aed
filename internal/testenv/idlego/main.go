// Command idlego does nothing but wake every -interval, as the agent's loop
// does, until it is stopped. The CPU it uses is what any Go process waking
// that often costs on this machine: the reference the agent's CPU benchmarks
// measure in the same window. On a nested VM whose wakeups are slow that
// floor alone came to 0.8% of a core at 2 Hz (2026-12-05).
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	interval := flag.Duration("interval", 500*time.Millisecond, "how often to wake")
	flag.Parse()
	if *interval <= 0 {
		fmt.Fprintln(os.Stderr, "idlego: -interval must be positive")
		os.Exit(2)
	}
	tick := time.Tick(*interval)
	fmt.Println("waking every", *interval) // started: what follows is the floor
	for range tick {
	}
}
