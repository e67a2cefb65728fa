package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/testcluster"
)

// Statuses of a figure against its goal.
const (
	Meets       = "meets"
	Misses      = "misses"
	NotMeasured = "not measured"
	Reported    = "—" // no goal: reported for context
)

// Figure is one measured figure: a row of the table in docs/benchmarks.md.
type Figure struct {
	ID       string `json:"id"`   // stable key, e.g. "front.unary-ratio"
	Item     int    `json:"item"` // the item, 1 to 7
	Order    int    `json:"order"`
	Name     string `json:"name"`
	Goal     string `json:"goal"`
	Measured string `json:"measured"`
	Status   string `json:"status"`
	Command  string `json:"command"`
	Machine  string `json:"machine"`
	When     string `json:"when"`
	Load     string `json:"load"` // 1-minute load average when measured
}

// Detail is a scenario's section of docs/benchmarks.md: the breakdown
// behind its figures.
type Detail struct {
	Item  int    `json:"item"`
	Title string `json:"title"`
	When  string `json:"when"`
	Body  string `json:"body"` // markdown
}

// Results are every figure measured so far, kept in a JSON file so that a
// scenario run alone replaces only its own figures.
type Results struct {
	Figures map[string]Figure `json:"figures"`
	Details map[string]Detail `json:"details"`
}

// LoadResults reads path; a missing file gives empty results.
func LoadResults(path string) (*Results, error) {
	r := &Results{Figures: map[string]Figure{}, Details: map[string]Detail{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("read results %s: %w", path, err)
	}
	if r.Figures == nil {
		r.Figures = map[string]Figure{}
	}
	if r.Details == nil {
		r.Details = map[string]Detail{}
	}
	return r, nil
}

// Save writes the results to path.
func (r *Results) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// AtLeast returns Meets when v ≥ goal, else Misses (NotMeasured for NaN).
func AtLeast(v, goal float64) string {
	switch {
	case math.IsNaN(v):
		return NotMeasured
	case v >= goal:
		return Meets
	}
	return Misses
}

// AtMost returns Meets when v ≤ goal, else Misses (NotMeasured for NaN).
func AtMost(v, goal float64) string {
	switch {
	case math.IsNaN(v):
		return NotMeasured
	case v <= goal:
		return Meets
	}
	return Misses
}

// Markdown renders docs/benchmarks.md.
func (r *Results) Markdown(intro string) string {
	figs := make([]Figure, 0, len(r.Figures))
	for _, f := range r.Figures {
		figs = append(figs, f)
	}
	slices.SortFunc(figs, func(a, b Figure) int {
		return cmp.Or(cmp.Compare(a.Item, b.Item), cmp.Compare(a.Order, b.Order), strings.Compare(a.ID, b.ID))
	})
	var b bytes.Buffer
	b.WriteString(intro)
	b.WriteString("\n## Figures\n\n")
	b.WriteString("| # | figure | goal | measured | status | command | machine (load avg) |\n|---|---|---|---|---|---|---|\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | `%s` | %s, %s (%s) |\n",
			f.Item, cell(f.Name), cell(f.Goal), cell(f.Measured), statusCell(f.Status), cell(f.Command), cell(f.Machine), f.When, f.Load)
	}
	details := make([]Detail, 0, len(r.Details))
	for _, d := range r.Details {
		details = append(details, d)
	}
	slices.SortFunc(details, func(a, b Detail) int { return cmp.Or(cmp.Compare(a.Item, b.Item), strings.Compare(a.Title, b.Title)) })
	b.WriteString("\n## Details\n")
	for _, d := range details {
		fmt.Fprintf(&b, "\n### %s\n\n_Measured %s._\n\n%s\n", d.Title, d.When, strings.TrimSpace(d.Body))
	}
	return b.String()
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func statusCell(s string) string {
	switch s {
	case Meets:
		return "✅ meets"
	case Misses:
		return "❌ misses"
	}
	return s
}

// Recorder collects one run's figures and details, printing each figure
// as it comes.
type Recorder struct {
	Results *Results
	Machine testcluster.Machine
	env     *Env
}

// NewRecorder records into res.
func NewRecorder(env *Env, res *Results, m testcluster.Machine) *Recorder {
	return &Recorder{Results: res, Machine: m, env: env}
}

// Add stores a figure, stamped with the machine, time and load, and
// prints it.
func (r *Recorder) Add(f Figure) {
	f.Machine = r.Machine.String()
	f.When = time.Now().UTC().Format("2006-01-02 15:04 UTC")
	f.Load = testcluster.LoadAvg()
	if f.Status == "" {
		f.Status = Reported
	}
	r.Results.Figures[f.ID] = f
	r.env.Logf("FIGURE %d %s: %s (goal %s: %s)", f.Item, f.Name, f.Measured, cmp.Or(f.Goal, "none"), f.Status)
}

// Drop removes figures whose ids a scenario no longer records (replaced
// by new ids).
func (r *Recorder) Drop(ids ...string) {
	for _, id := range ids {
		delete(r.Results.Figures, id)
	}
}

// Measure runs a scenario's measurement; if it fails, figs are recorded
// as not measured, with why.
func (r *Recorder) Measure(figs []Figure, measure func() error) error {
	err := measure()
	if err != nil {
		r.Fail(figs, err)
	}
	return err
}

// Fail records every figure of a scenario as not measured, with why.
func (r *Recorder) Fail(figs []Figure, err error) {
	for _, f := range figs {
		f.Measured = "not measured: " + firstLine(err.Error())
		f.Status = NotMeasured
		r.Add(f)
	}
}

// Detail stores a scenario's breakdown and prints it.
func (r *Recorder) Detail(key string, item int, title, body string) {
	r.Results.Details[key] = Detail{Item: item, Title: title, When: time.Now().UTC().Format("2006-01-02 15:04 UTC") + ", load average " + testcluster.LoadAvg(), Body: body}
	r.env.Logf("\n### %s\n%s", title, body)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Table renders a markdown table.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Num formats a number with thousands separators and no decimals above
// 100, two significant decimals below.
func Num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i, c := range []byte(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, c)
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
