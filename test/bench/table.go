package main

import (
	"fmt"
	"strings"
)

// resultTable is a markdown table of measurements: a row per measurement, a
// column per result (one per store) and one for the goal.
type resultTable[R any] struct {
	b  strings.Builder
	rs []R
}

// newResultTable starts a table whose first column is headed title and
// whose result columns are headed by name.
func newResultTable[R any](title string, rs []R, name func(R) string) *resultTable[R] {
	t := &resultTable[R]{rs: rs}
	fmt.Fprintf(&t.b, "| %s | %s | goal |\n|---|%s---|\n", title, t.cells(name), strings.Repeat("---|", len(rs)))
	return t
}

func (t *resultTable[R]) cells(get func(R) string) string {
	cells := make([]string, len(t.rs))
	for i, r := range t.rs {
		cells[i] = get(r)
	}
	return strings.Join(cells, " | ")
}

// row adds a measurement, what each result measured and its goal.
func (t *resultTable[R]) row(what, goal string, get func(R) string) {
	fmt.Fprintf(&t.b, "| %s | %s | %s |\n", what, t.cells(get), goal)
}

func (t *resultTable[R]) String() string { return t.b.String() }
