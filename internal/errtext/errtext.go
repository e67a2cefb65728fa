// Package errtext makes an error's message fit a protobuf string field of
// bounded size: valid UTF-8, cut at a character boundary and marked. The
// drainer keeps a worker's error with the job (envelope.LastError), and a
// worker answers with one (package worker); an error that was not UTF-8,
// or too long, made a message that could not be sent.
package errtext

import (
	"strings"
	"unicode/utf8"
)

// Cut returns err's message as valid UTF-8 (each invalid byte sequence
// replaced by U+FFFD) of at most limit bytes: a longer one is cut at a
// character boundary and ends in "…".
func Cut(err error, limit int) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := max(limit-len("…"), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
