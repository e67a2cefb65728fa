package procstat

import (
	"os"
	"strings"
	"testing"
)

func TestParseRSS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		give    string
		want    int64
		wantErr string
	}{
		{"kernel format", "Name:\tgateway\nVmPeak:\t  900 kB\nVmRSS:\t   25600 kB\nThreads:\t9\n", 25600 << 10, ""},
		{"no line", "Name:\tgateway\n", 0, "no VmRSS line"},
		{"other unit", "VmRSS:\t25 MB\n", 0, "unexpected VmRSS line"},
		{"not a number", "VmRSS:\tx kB\n", 0, "invalid syntax"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseRSS(tt.give, 7)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseRSS = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestRSSOfThisProcess(t *testing.T) {
	t.Parallel()
	rss, err := RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Fatalf("RSS of a running Go test = %d bytes, want at least 1 MiB", rss)
	}
	if _, err := RSS(-1); err == nil {
		t.Fatal("RSS of pid -1: no error")
	}
}
