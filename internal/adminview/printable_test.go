package adminview

import (
	"testing"

	adminv1 "github.com/sluice-dev/sluice/gen/sluice/admin/v1"
)

func TestPrintable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ give, want string }{
		{"", ""},
		{"acme", "acme"},
		{"naïve ünïcode ✓", "naïve ünïcode ✓"},
		{"red \x1b[31m", `"red \x1b[31m"`},
		{"two\nlines", `"two\nlines"`},
		{"bell\a", `"bell\a"`},
		{"del\x7f", `"del\x7f"`},
		{"csi \u009b", `"csi \u009b"`},
		{"bad \xff byte", `"bad \xff byte"`},
	} {
		if got := Printable(tt.give); got != tt.want {
			t.Errorf("Printable(%q) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestShortReason(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reason, lastErr, want string
	}{
		{"permanent_failure: bad input", "bad input", "permanent_failure"},
		{"attempts_exhausted", "timeout", "attempts_exhausted"},
		{"panic: nil map", "", "panic: nil map"},
	} {
		if got := ShortReason(&adminv1.DeadLetter{Reason: tt.reason, LastError: tt.lastErr}); got != tt.want {
			t.Errorf("ShortReason(%q, %q) = %q, want %q", tt.reason, tt.lastErr, got, tt.want)
		}
	}
}

func TestCut(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven ch…"},
		{"ünïcödé wörds", 5, "ünïc…"},
	} {
		if got := Cut(tt.s, tt.n); got != tt.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}
