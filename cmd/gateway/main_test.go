package main

import (
	"io"
	"strings"
	"testing"
)

// TestParseRefusesBadValues: flag values that crashed the gateway or
// quietly turned a guarantee off are refused at start, naming the flag
// (found in review): a negative console sample interval panicked once the
// console served; a negative idempotency window let every retry make a
// new job; a shutdown grace of zero or less cut calls at once and failed
// every clean stop.
func TestParseRefusesBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct{ flag, want string }{
		{"--console-sample-interval=-1s", "--console-sample-interval"},
		{"--console-sample-interval=0s", "--console-sample-interval"},
		{"--idempotency-window=-1s", "--idempotency-window"},
		{"--shutdown-grace=0s", "--shutdown-grace"},
		{"--shutdown-grace=-1s", "--shutdown-grace"},
		{"--max-attempts=0", "--max-attempts"},
		{"--sideline-share=150", "--sideline-share"},
		{"--read-ahead=-1", "--read-ahead"},
		{"--worker-lease-timeout=-1s", "--worker-lease-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			t.Parallel()
			_, err := parse([]string{"--data-dir", t.TempDir(), tt.flag}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parse(%s): %v, want an error naming %s", tt.flag, err, tt.want)
			}
		})
	}
	if _, err := parse([]string{"--data-dir", t.TempDir(), "--console=false", "--console-sample-interval=0s", "--idempotency-window=0s"}, io.Discard); err != nil {
		t.Errorf("the console off and the default window: %v, want accepted", err)
	}
}
