// Package flagvalue holds the command line's value types (pflag.Value):
// each parses its own syntax and, on bad input, says what form is
// accepted; pflag prefixes the flag's name.
package flagvalue

import (
	"fmt"
	"time"

	"github.com/headroom-dev/headroom/internal/memload"
	"github.com/headroom-dev/headroom/internal/units"
	"github.com/spf13/pflag"
)

type Bytes uint64

// String is the size, or "0" for none: pflag leaves a default of "0" out
// of the help ("(default 0 B)" beside "0: none").
func (v *Bytes) String() string {
	if *v == 0 {
		return "0"
	}
	return units.FormatBytes(uint64(*v))
}
func (v *Bytes) Type() string { return "size" }
func (v *Bytes) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, units.SizeForm)
	}
	*v = Bytes(n)
	return nil
}

type Rate float64

func (v *Rate) String() string { return fmt.Sprint(float64(*v)) }
func (v *Rate) Type() string   { return "pages/s" }
func (v *Rate) Set(s string) error {
	f, err := units.ParseRate(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, units.RateForm)
	}
	*v = Rate(f)
	return nil
}

type Fraction float64

func (v *Fraction) String() string { return fmt.Sprint(float64(*v)) }
func (v *Fraction) Type() string   { return "fraction" }
func (v *Fraction) Set(s string) error {
	f, err := units.ParseFraction(s)
	if err != nil {
		return fmt.Errorf("%v; want a number from 0 to 1", err)
	}
	*v = Fraction(f)
	return nil
}

type Scan memload.Scan

func (v *Scan) String() string { return string(*v) }
func (v *Scan) Type() string   { return "none|seq|random" }
func (v *Scan) Set(s string) error {
	sc, err := memload.ParseScan(s)
	if err != nil {
		return fmt.Errorf("%v; want none, seq or random", err)
	}
	*v = Scan(sc)
	return nil
}

type Content memload.Content

func (v *Content) String() string { return memload.Content(*v).String() }
func (v *Content) Type() string   { return "content" }
func (v *Content) Set(s string) error {
	c, err := memload.ParseContent(s)
	if err != nil {
		return fmt.Errorf("%v; want %s", err, memload.ContentForm)
	}
	*v = Content(c)
	return nil
}

type HugePages memload.HugePages

func (v *HugePages) String() string { return string(*v) }
func (v *HugePages) Type() string   { return "never|madvise" }
func (v *HugePages) Set(s string) error {
	switch memload.HugePages(s) {
	case memload.HugePagesNever, memload.HugePagesMadvise:
		*v = HugePages(s)
		return nil
	}
	return fmt.Errorf("unknown hugepages mode %q; want never or madvise", s)
}

// Bind defines the flag name on fl, bound to the value ptr points at, its
// current value the default: a pflag.Value, or a pointer to a string,
// bool, int, uint64, float64, time.Duration or []string. It panics on any
// other type: a flag declared with a field no flag can hold.
func Bind(fl *pflag.FlagSet, ptr any, name, usage string) {
	switch p := ptr.(type) {
	case pflag.Value:
		fl.Var(p, name, usage)
	case *string:
		fl.StringVar(p, name, *p, usage)
	case *bool:
		fl.BoolVar(p, name, *p, usage)
	case *int:
		fl.IntVar(p, name, *p, usage)
	case *uint64:
		fl.Uint64Var(p, name, *p, usage)
	case *float64:
		fl.Float64Var(p, name, *p, usage)
	case *time.Duration:
		fl.DurationVar(p, name, *p, usage)
	case *[]string:
		fl.StringSliceVar(p, name, *p, usage)
	default:
		panic(fmt.Sprintf("flag --%s: unsupported field type %T", name, p))
	}
}

// MaybeBytes is a size that may be left unset: its default is then another
// flag's ("" to read; "none" unsets it).
type MaybeBytes struct {
	Bytes uint64
	Given bool
}

func (v *MaybeBytes) String() string {
	if !v.Given {
		return ""
	}
	return units.FormatBytes(v.Bytes)
}
func (v *MaybeBytes) Type() string { return "size" }
func (v *MaybeBytes) Set(s string) error {
	if s == "none" {
		*v = MaybeBytes{}
		return nil
	}
	var b Bytes
	if err := b.Set(s); err != nil {
		return err
	}
	*v = MaybeBytes{Bytes: uint64(b), Given: true}
	return nil
}

// Or is the size, or fallback where none was given.
func (v MaybeBytes) Or(fallback uint64) uint64 {
	if v.Given {
		return v.Bytes
	}
	return fallback
}
