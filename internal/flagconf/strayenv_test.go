package flagconf

import (
	"flag"
	"slices"
	"testing"
)

func TestStrayEnv(t *testing.T) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.Int("concurrency", 0, "")
	fs.String("data-dir", "", "")
	fs.String("admin-key", "", "")
	tests := []struct {
		name    string
		environ []string
		want    []string
	}{
		{"none", nil, nil},
		{"every variable names a flag", []string{"SLUICE_CONCURRENCY=4", "SLUICE_DATA_DIR=/d", "PATH=/bin"}, nil},
		{"a letter left out", []string{"SLUICE_CONCURENCY=64"}, []string{
			"environment variable SLUICE_CONCURENCY sets nothing: gateway has no such setting; did you mean SLUICE_CONCURRENCY?",
		}},
		{"a dash kept, and another prefix's variable", []string{"SLUICE_DATA-DIR=/d", "OTHER_DATADIR=/d"}, []string{
			"environment variable SLUICE_DATA-DIR sets nothing: gateway has no such setting; did you mean SLUICE_DATA_DIR?",
		}},
		{"sluicectl's variables are not this command's mistakes", []string{"SLUICE_API_KEY=k", "SLUICE_ADDR=127.0.0.1:7070", "SLUICE_WORKER_KEY=w"}, nil},
		{"two edits is near, three is not", []string{"SLUICE_DATADR=/d", "SLUICE_DTADR=/d"}, []string{
			"environment variable SLUICE_DATADR sets nothing: gateway has no such setting; did you mean SLUICE_DATA_DIR?",
		}},
		{"no value, still set", []string{"SLUICE_ADMIN_KY"}, []string{
			"environment variable SLUICE_ADMIN_KY sets nothing: gateway has no such setting; did you mean SLUICE_ADMIN_KEY?",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := StrayEnv(fs, "SLUICE", tt.environ)
			if !slices.Equal(got, tt.want) {
				t.Errorf("StrayEnv(%q)\n got %q\nwant %q", tt.environ, got, tt.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"SLUICE_X", "SLUICE_X", 0}, {"ab", "ba", 2},
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}
