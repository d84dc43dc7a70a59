// Package output renders simpletunerctl's human output: tables aligned with
// text/tabwriter that fit an 80-column terminal, optional colour for states,
// short ages ("5m"), and the API's JSON re-indented for -o json.
package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Format is the -o choice.
type Format int

const (
	TableFormat Format = iota // the default: fits 80 columns
	WideFormat                // every useful column, however wide
	JSONFormat                // the API's reply, indented
)

// ParseFormat reads -o.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "", "table":
		return TableFormat, nil
	case "wide":
		return WideFormat, nil
	case "json":
		return JSONFormat, nil
	}
	return TableFormat, fmt.Errorf("unknown output format %q (table, wide or json)", s)
}

// Styler colours state words, or does nothing when colour is off.
type Styler struct{ On bool }

// Every colour sequence has the same length (5 bytes in, 4 bytes out), and in
// a coloured column every cell gets one, so tabwriter, which counts bytes of
// escapes as width, still lines the columns up.
const (
	red     = "\x1b[31m"
	green   = "\x1b[32m"
	yellow  = "\x1b[33m"
	cyan    = "\x1b[36m"
	plain   = "\x1b[39m"
	dimmed  = "\x1b[90m"
	bold    = "\x1b[01m"
	resetSq = "\x1b[0m"
)

var stateColours = map[string]string{
	// jobs
	"completed": green, "failed": red, "cancelled": yellow, "canceling": yellow,
	"running": cyan, "dispatched": cyan,
	// workers
	"idle": green, "busy": cyan, "draining": yellow, "offline": red,
	// webhook deliveries ("failed" is the jobs' red)
	"delivered": green, "pending": yellow,
	// health
	"ready": green, "not ready": red, "ok": green, "FAIL": red, "revoked": dimmed,
	// people
	"disabled": dimmed,
}

// State colours a job, worker or health state.
func (s Styler) State(word string) string {
	if word == "" {
		word = "-"
	}
	if !s.On {
		return word
	}
	c, ok := stateColours[word]
	if !ok {
		c = plain
	}
	return c + word + resetSq
}

// Header makes a coloured column's header line up with its cells.
func (s Styler) Header(word string) string {
	if !s.On {
		return word
	}
	return bold + word + resetSq
}

// ownSequences are the only escape sequences Sanitize lets through: the
// colours this package writes itself.
var ownSequences = []string{red, green, yellow, cyan, plain, dimmed, bold, resetSq}

// Sanitize makes text that came from elsewhere (a worker's name, labels or
// GPU names, an error a worker reported) safe to print on a terminal: every
// control character but newline (C0, DEL, C1) and every Unicode direction
// override is shown escaped, as \x1b or \u202e, so that no such text can
// move the cursor, rewrite the screen, set the title or the clipboard, or
// reorder what is shown. The colour sequences this package adds pass.
func Sanitize(s string) string {
	if !needsSanitizing(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			if own := ownSequence(s[i:]); own != "" {
				b.WriteString(own)
				i += len(own)
				continue
			}
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsSanitizing(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if unsafeRune(r) {
			return true
		}
	}
	return false
}

func ownSequence(s string) string {
	for _, seq := range ownSequences {
		if strings.HasPrefix(s, seq) {
			return seq
		}
	}
	return ""
}

// unsafeRune: what protocol.Unprintable refuses in names, but newline.
func unsafeRune(r rune) bool { return r != '\n' && protocol.Unprintable(r) }

// layoutBreaks are what would break a table's layout, replaced by spaces.
var layoutBreaks = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

// Table collects rows and writes them aligned.
type Table struct {
	rows [][]string
}

// NewTable starts a table with a header row.
func NewTable(header ...string) *Table { return &Table{rows: [][]string{header}} }

// Row adds a row; empty cells print as "-" so that columns never collapse.
func (t *Table) Row(cells ...string) {
	row := make([]string, len(cells))
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		row[i] = c
	}
	t.rows = append(t.rows, row)
}

// Len is the number of data rows.
func (t *Table) Len() int { return len(t.rows) - 1 }

// Write prints the table with two spaces between columns.
func (t *Table) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, r := range t.rows {
		// A tab or newline inside a value would break the layout; other
		// control characters are shown escaped (see Sanitize).
		clean := make([]string, len(r))
		for i, c := range r {
			clean[i] = Sanitize(layoutBreaks.Replace(c))
		}
		fmt.Fprintln(tw, strings.Join(clean, "\t"))
	}
	return tw.Flush()
}

// Truncate shortens s to at most n characters, marking the cut with "…".
func Truncate(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Age is a short human duration since t ("4s", "12m", "3h", "5d"); "-" for
// the zero time. A time in the future (clock skew) shows as "0s".
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return Duration(now.Sub(t))
}

// Duration is a short human duration.
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// ParseTime reads the API's RFC 3339 timestamps; nil, "" or garbage is the
// zero time.
func ParseTime(s *string) time.Time {
	if s == nil || *s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// WriteJSON prints an API reply indented by two spaces, keys in the order the
// API sent them, with a final newline.
func WriteJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("the orchestrator's reply is not JSON: %v", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// MarshalJSON prints a value built by simpletunerctl (composite replies).
func MarshalJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return WriteJSON(w, b)
}
