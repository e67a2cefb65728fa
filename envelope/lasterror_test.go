package envelope_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/envelope"
)

// FuzzLastError checks that any error message, however long or
// malformed, is kept as valid UTF-8 of bounded size that an envelope can
// carry (an envelope that cannot be encoded could not be moved).
func FuzzLastError(f *testing.F) {
	f.Add("worker: rpc error: code = Unavailable desc = down")
	f.Add(strings.Repeat("é", 600))
	f.Add("\xff\xfe bad bytes")
	f.Fuzz(func(t *testing.T, msg string) {
		got := envelope.LastError(errors.New(msg))
		if !utf8.ValidString(got) || len(got) > envelope.LastErrorMax {
			t.Fatalf("LastError(%q) = %q: want valid UTF-8 of at most %d bytes", msg, got, envelope.LastErrorMax)
		}
		if utf8.ValidString(msg) && len(msg) <= envelope.LastErrorMax && got != msg {
			t.Fatalf("LastError(%q) = %q: a short valid message must be kept as it is", msg, got)
		}
		env := valid()
		env.LastError = got
		if _, err := envelope.Encode(env); err != nil {
			t.Fatalf("envelope with last error %q: %v", got, err)
		}
	})
}
