package drainer

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	envelopev1 "github.com/sluice-dev/sluice/gen/sluice/envelope/v1"
)

// FuzzLastErrorText checks that any error message, however long or
// malformed, is kept as valid UTF-8 of bounded size that an envelope can
// carry (an envelope that cannot be encoded could not be moved).
func FuzzLastErrorText(f *testing.F) {
	f.Add("worker: rpc error: code = Unavailable desc = down")
	f.Add(strings.Repeat("é", 600))
	f.Add("\xff\xfe bad bytes")
	f.Fuzz(func(t *testing.T, msg string) {
		got := lastErrorText(errors.New(msg))
		if !utf8.ValidString(got) || len(got) > lastErrorMax {
			t.Fatalf("lastErrorText(%q) = %q: want valid UTF-8 of at most %d bytes", msg, got, lastErrorMax)
		}
		if utf8.ValidString(msg) && len(msg) <= lastErrorMax && got != msg {
			t.Fatalf("lastErrorText(%q) = %q: a short valid message must be kept as it is", msg, got)
		}
		if _, err := proto.Marshal(&envelopev1.Envelope{JobId: "j", LastError: got}); err != nil {
			t.Fatalf("envelope with last error %q: %v", got, err)
		}
	})
}
