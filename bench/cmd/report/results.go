package main

import (
	"bufio"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// results holds every value each benchmark reported, by name (without the
// -GOMAXPROCS suffix) and unit, across rounds.
type results map[string]map[string][]float64

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// parse adds the benchmark lines of go test -bench output in r.
func (rs results) parse(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			if rs[m[1]] == nil {
				rs[m[1]] = map[string][]float64{}
			}
			rs[m[1]][f[i+1]] = append(rs[m[1]][f[i+1]], v)
		}
	}
}

// median returns the median of name's values in unit, and whether there
// were any.
func (rs results) median(name, unit string) (float64, bool) {
	vs := slices.Clone(rs[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2, true
	}
	return vs[len(vs)/2], true
}

// count is how many rounds name reported unit.
func (rs results) count(name, unit string) int { return len(rs[name][unit]) }
