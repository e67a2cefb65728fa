package errtext

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCut(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, msg string
		limit     int
		want      string
	}{
		{"short stays", "boom", 10, "boom"},
		{"at the limit stays", "abcdef", 6, "abcdef"},
		{"long is cut and marked", "abcdefghij", 7, "abcd…"},
		{"invalid UTF-8 is replaced", "bad \xff byte", 64, "bad \uFFFD byte"},
		{"a cut never splits a character", "ab€€€", 7, "ab…"},
		{"a cut keeps the characters that fit", "ab€€€", 8, "ab€…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Cut(errors.New(tt.msg), tt.limit)
			if got != tt.want || !utf8.ValidString(got) || len(got) > max(tt.limit, len("…")) {
				t.Fatalf("Cut(%q, %d) = %q, want %q", tt.msg, tt.limit, got, tt.want)
			}
		})
	}
}

func FuzzCut(f *testing.F) {
	f.Add("boom", 16)
	f.Add(strings.Repeat("€", 10), 7)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, msg string, limit int) {
		if limit < len("…") || limit > 1<<16 {
			return
		}
		got := Cut(errors.New(msg), limit)
		if !utf8.ValidString(got) || len(got) > limit {
			t.Fatalf("Cut(%q, %d) = %q: invalid or over the limit", msg, limit, got)
		}
		if valid := strings.ToValidUTF8(msg, "\uFFFD"); len(valid) <= limit && got != valid {
			t.Fatalf("Cut(%q, %d) = %q, want it whole", msg, limit, got)
		}
	})
}
