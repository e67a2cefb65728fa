package flagconf

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DurationVar defines a duration flag, as fs.DurationVar does, whose bad
// value says what to write. The flag package's own says only "parse
// error": --retry-base 2 and --ttl 15d left the unit to be guessed
// (found in a walkthrough).
func DurationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// Duration is DurationVar returning the flag's variable, as fs.Duration.
func Duration(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	DurationVar(fs, p, name, value, usage)
	return p
}

type durationValue time.Duration

func (d *durationValue) String() string { return (*time.Duration)(d).String() }

func (d *durationValue) Get() any { return time.Duration(*d) }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 30s, 1m30s or 2h" + durationHint(s))
	}
	*d = durationValue(v)
	return nil
}

// durationHint explains the commonest mistakes: a bare number, and days.
func durationHint(s string) string {
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return " (a number needs a unit)"
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.ParseFloat(days, 64); err == nil {
			return fmt.Sprintf(" (the largest unit is h: %s is %gh)", s, n*24)
		}
	}
	return ""
}

// PrintDefaults is fs.PrintDefaults, showing a DurationVar flag's value
// as "duration", as the flag package shows its own duration flags (it
// shows any other type as "value").
func PrintDefaults(fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	text := "\n" + b.String()
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*durationValue); ok {
			text = strings.Replace(text, "\n  -"+f.Name+" value", "\n  -"+f.Name+" duration", 1)
		}
	})
	fmt.Fprint(out, text[1:])
}

// Usage is the flag package's default usage message, "Usage of name:"
// and the flags, with PrintDefaults: set fs.Usage to it.
func Usage(fs *flag.FlagSet) func() {
	return func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		PrintDefaults(fs)
	}
}
