package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// bar is one bar of a chart: a label and one value per series.
type bar struct {
	label  string
	values []float64 // NaN: no value
}

// barChart draws horizontal bars on a log10 axis (the figures span three
// orders of magnitude), one colour per series, each bar labelled with its
// value in unit.
func barChart(title, unit string, series []string, bars []bar) string {
	const (
		left, right, top = 230.0, 90.0, 50.0
		width            = 820.0
		barH, gap        = 16.0, 10.0
	)
	colours := []string{"#2b6cb0", "#dd6b20", "#38a169", "#805ad5"}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, b := range bars {
		for _, v := range b.values {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	plotW := width - left - right
	x := func(v float64) float64 {
		return left + plotW*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	groupH := float64(len(series))*barH + gap
	height := top + float64(len(bars))*groupH + 50
	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&s, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	// Legend.
	lx := left
	for i, name := range series {
		fmt.Fprintf(&s, `<rect x="%.0f" y="30" width="10" height="10" fill="%s"/><text x="%.0f" y="39">%s</text>`+"\n", lx, colours[i%len(colours)], lx+14, html.EscapeString(name))
		lx += 34 + 6.5*float64(len([]rune(name)))
	}
	// Decades of the log axis.
	axisY := top + float64(len(bars))*groupH
	for d := lo; d <= hi*1.0001; d *= 10 {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", x(d), top-4, x(d), axisY)
		fmt.Fprintf(&s, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%s</text>`+"\n", x(d), axisY+16, html.EscapeString(formatValue(d, unit)))
	}
	fmt.Fprintf(&s, `<text x="%.0f" y="%.0f" text-anchor="middle" fill="#555">log scale</text>`+"\n", left+plotW/2, axisY+34)
	for i, b := range bars {
		gy := top + float64(i)*groupH
		fmt.Fprintf(&s, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, gy+float64(len(series))*barH/2+4, html.EscapeString(b.label))
		for j, v := range b.values {
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			y := gy + float64(j)*barH
			fmt.Fprintf(&s, `<rect x="%.0f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", left, y, math.Max(x(v)-left, 1), barH-3, colours[j%len(colours)])
			fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" fill="#222">%s</text>`+"\n", x(v)+4, y+barH-6, html.EscapeString(formatValue(v, unit)))
		}
	}
	s.WriteString("</svg>\n")
	return s.String()
}

// formatValue writes v (in µs) as µs, ms or s.
func formatValue(v float64, unit string) string {
	if unit != "µs" {
		return fmt.Sprintf("%.3g %s", v, unit)
	}
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3g s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3g ms", v/1e3)
	default:
		return fmt.Sprintf("%.3g µs", v)
	}
}
