package ingestcheck

import (
	"strings"
	"testing"

	ingestv1 "github.com/sluice-dev/sluice/gen/sluice/ingest/v1"
)

func TestUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		req  *ingestv1.SubmitRequest
		want []string // field: description, in order
	}{
		{"valid", &ingestv1.SubmitRequest{Payload: []byte("\xff any bytes"), Attributes: map[string]string{"é": "ü"}, IdempotencyKey: "k-1"}, nil},
		{"empty", &ingestv1.SubmitRequest{}, nil},
		{"attribute value", &ingestv1.SubmitRequest{Attributes: map[string]string{"k": "a\xffb"}}, []string{`attributes["k"]: value is not valid UTF-8`}},
		{"attribute key", &ingestv1.SubmitRequest{Attributes: map[string]string{"k\xff": "v"}}, []string{`attributes: key "k\xff" is not valid UTF-8`}},
		{"idempotency key", &ingestv1.SubmitRequest{IdempotencyKey: "order-\xc3"}, []string{`idempotency_key: "order-\xc3" is not valid UTF-8`}},
		{"several, sorted by field", &ingestv1.SubmitRequest{
			Attributes:     map[string]string{"b": "\xff", "a": "\xfe", "ok": "fine"},
			IdempotencyKey: "\xc3",
		}, []string{
			`attributes["a"]: value is not valid UTF-8`,
			`attributes["b"]: value is not valid UTF-8`,
			`idempotency_key: "\xc3" is not valid UTF-8`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, v := range UTF8(tt.req) {
				got = append(got, v.GetField()+": "+v.GetDescription())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("UTF8 = %q, want %q", got, tt.want)
			}
		})
	}
}
