package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
)

// Series is one line of a chart.
type Series struct {
	Name   string
	Color  string
	Dashed bool
	Dotted bool
	X, Y   []float64
}

// Mark is a labelled vertical line (an event on the time axis).
type Mark struct {
	X     float64
	Label string
}

// Band is a shaded span of the time axis.
type Band struct {
	From, To float64
	Label    string
}

// Chart is a line chart drawn as SVG: time on x, a duration on y (log
// scale when LogY, for dwell that spans milliseconds to minutes).
type Chart struct {
	Title, XLabel, YLabel string
	LogY                  bool
	Series                []Series
	Marks                 []Mark
	Bands                 []Band
	// HLines are labelled horizontal reference lines (a goal, a
	// baseline).
	HLines []Mark
}

// Palette holds distinguishable line colours.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

const (
	chartW, chartH                 = 900, 480
	padL, padR, padT, padB         = 80, 20, 40, 90
	plotW, plotH                   = chartW - padL - padR, chartH - padT - padB
	fontFamily                     = "Helvetica, Arial, sans-serif"
	legendRowH                     = 18
	minLogY                float64 = 0.1
)

// SVG renders the chart.
func (c Chart) SVG() []byte {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i := range s.X {
			y := s.Y[i]
			if c.LogY && y < minLogY {
				y = minLogY
			}
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	for _, m := range c.Marks {
		xmin, xmax = math.Min(xmin, m.X), math.Max(xmax, m.X)
	}
	for _, h := range c.HLines {
		ymin, ymax = math.Min(ymin, h.X), math.Max(ymax, h.X)
	}
	if math.IsInf(xmin, 1) {
		xmin, xmax, ymin, ymax = 0, 1, 1, 10
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	var yticks []float64
	if c.LogY {
		lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
		if hi == lo {
			hi++
		}
		ymin, ymax = math.Pow(10, lo), math.Pow(10, hi)
		for e := lo; e <= hi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	} else {
		ymin = math.Min(ymin, 0)
		step := niceStep((ymax - ymin) / 5)
		ymax = math.Ceil(ymax/step) * step
		if ymax == ymin {
			ymax = ymin + step
		}
		for v := ymin; v <= ymax+step/2; v += step {
			yticks = append(yticks, v)
		}
	}
	xstep := niceStep((xmax - xmin) / 8)
	xmin = math.Floor(xmin/xstep) * xstep
	xmax = math.Ceil(xmax/xstep) * xstep
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 {
		if c.LogY {
			y = math.Max(y, minLogY)
			return padT + plotH - (math.Log10(y)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))*plotH
		}
		return padT + plotH - (y-ymin)/(ymax-ymin)*plotH
	}

	legendRows := (len(c.Series) + 1) / 2
	height := chartH + legendRows*legendRowH
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n", chartW, height, chartW, height, fontFamily)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", padL, esc(c.Title))
	for _, bd := range c.Bands {
		x0, x1 := px(math.Max(bd.From, xmin)), px(math.Min(bd.To, xmax))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#f2f2f2"/>`+"\n", x0, padT, x1-x0, plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#777">%s</text>`+"\n", (x0+x1)/2, padT+14, esc(bd.Label))
	}
	// Grid and axes.
	for _, v := range yticks {
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", padL-6, y, tickLabel(v))
	}
	for x := xmin; x <= xmax+xstep/2; x += xstep {
		X := px(x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", X, padT, X, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", X, padT+plotH+16, tickLabel(x))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", padL, padT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, padT+plotH+36, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", padT+plotH/2, esc(c.YLabel))
	for i, h := range c.HLines {
		y := py(h.X)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="2 3"/>`+"\n", padL, y, padL+plotW, y)
		// Labels alternate between the right and left ends, so that two
		// close lines stay readable.
		if i%2 == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", padL+plotW-4, y-4, esc(h.Label))
		} else {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#555">%s</text>`+"\n", padL+4, y+14, esc(h.Label))
		}
	}
	for i, m := range c.Marks {
		X := px(m.X)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-dasharray="5 4"/>`+"\n", X, padT, X, padT+plotH)
		// Near the right edge the label goes left of its line; labels
		// step up so that close marks do not overprint.
		x, anchor := X+4, "start"
		if X > padL+0.8*plotW {
			x, anchor = X-4, "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#555">%s</text>`+"\n", x, padT+plotH-6-14*(i%3), anchor, esc(m.Label))
	}
	// Lines, clipped to the plot area.
	fmt.Fprintf(&b, `<clipPath id="plot"><rect x="%d" y="%d" width="%d" height="%d"/></clipPath>`+"\n", padL, padT, plotW, plotH)
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = Palette[i%len(Palette)]
		}
		dash := ""
		switch {
		case s.Dashed:
			dash = ` stroke-dasharray="7 4"`
		case s.Dotted:
			dash = ` stroke-dasharray="2 3"`
		}
		var pts bytes.Buffer
		for k := range s.X {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.X[k]), py(s.Y[k]))
		}
		fmt.Fprintf(&b, `<polyline clip-path="url(#plot)" fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, bytes.TrimSpace(pts.Bytes()))
		// Legend: two columns under the x label.
		lx := padL + (i%2)*(plotW/2)
		ly := chartH - 30 + (i/2)*legendRowH
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+28, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+34, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// WriteFile renders the chart to path.
func (c Chart) WriteFile(path string) error {
	if err := os.WriteFile(path, c.SVG(), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64) string {
	if math.Abs(v) >= 1000 {
		return Num(v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func esc(s string) string { return html.EscapeString(s) }
