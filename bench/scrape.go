package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sample is one line of a Prometheus text page.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseMetrics reads the samples of a Prometheus text exposition page
// (comments skipped; label values without escaped quotes, as sluice's
// are).
func ParseMetrics(page string) []Sample {
	var out []Sample
	for line := range strings.SplitSeq(page, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := Sample{Labels: map[string]string{}}
		var rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.Name = line[:i]
			for pair := range strings.SplitSeq(line[i+1:j], ",") {
				k, v, ok := strings.Cut(pair, "=")
				if ok {
					s.Labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
				}
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			name, r, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			s.Name, rest = name, r
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.Value = v
		out = append(out, s)
	}
	return out
}

// Scrape fetches and parses a /metrics page.
func Scrape(ctx context.Context, addr string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", addr, resp.Status)
	}
	return ParseMetrics(string(b)), nil
}

// ByLabel sums the samples named name by the value of label.
func ByLabel(samples []Sample, name, label string) map[string]float64 {
	m := map[string]float64{}
	for _, s := range samples {
		if s.Name == name {
			m[s.Labels[label]] += s.Value
		}
	}
	return m
}
