package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Layers, lowest precedence first; a value remembers the layer that set it.
const (
	layerDefault = iota
	layerFile
	layerEnv
	layerFlag
)

type origin struct {
	where string // "file.toml:12", "SIMPLETUNER_X", "--port"
	layer int
}

// set reports whether anything above the defaults set the key.
func (o origin) set() bool { return o.layer > layerDefault }

// loader fills one config struct and collects every problem on the way.
type loader struct {
	fields map[string]reflect.Value // dotted key → settable leaf field
	tables map[string]bool          // dotted table names ("server")
	src    map[string]origin
	errs   []error
	failed map[string]bool // keys whose value could not be decoded: not validated again
	// entries holds, per array of tables, where each entry was written.
	entries map[string][]string
	// fileUnread: the file could not be read or parsed, so what it sets is
	// unknown (a key may look unset that the file sets).
	fileUnread bool
}

var (
	durationType = reflect.TypeFor[Duration]()
	secretType   = reflect.TypeFor[Secret]()
)

func newLoader(cfg any) *loader {
	l := &loader{fields: map[string]reflect.Value{}, tables: map[string]bool{}, src: map[string]origin{}, failed: map[string]bool{},
		entries: map[string][]string{}}
	walk(reflect.ValueOf(cfg).Elem(), "", func(key string, v reflect.Value, leaf bool) {
		if leaf {
			l.fields[key] = v
		} else {
			l.tables[key] = true
		}
	})
	return l
}

// walk visits every toml-tagged field; structs other than Duration are tables.
func walk(v reflect.Value, prefix string, visit func(key string, v reflect.Value, leaf bool)) {
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		f := v.Field(i)
		if f.Kind() == reflect.Struct && f.Type() != durationType {
			visit(key, f, false)
			walk(f, key+".", visit)
			continue
		}
		visit(key, f, true)
	}
}

// keysOf lists the dotted leaf keys of a config type, in declaration order.
func keysOf(cfg any) []string {
	var keys []string
	walk(reflect.ValueOf(cfg).Elem(), "", func(key string, _ reflect.Value, leaf bool) {
		if leaf {
			keys = append(keys, key)
		}
	})
	return keys
}

func (l *loader) errf(key, format string, args ...any) {
	l.errs = append(l.errs, &Error{Where: l.src[key].where, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) errAt(where, key, format string, args ...any) {
	l.errs = append(l.errs, &Error{Where: where, Key: key, Msg: fmt.Sprintf(format, args...)})
}

// decodeTOML applies a TOML document. BurntSushi stops at the first type
// error, so we decode into a generic map and convert key by key ourselves:
// that way a file with three mistakes yields three errors.
func (l *loader) decodeTOML(path string, data []byte) {
	text := string(data)
	var raw map[string]any
	md, err := toml.Decode(text, &raw)
	if err != nil {
		l.fileUnread = true
		var pe toml.ParseError
		if errors.As(err, &pe) {
			l.errAt(fmt.Sprintf("%s:%d", path, pe.Position.Line), pe.LastKey, "%s", pe.Message)
		} else {
			l.errAt(path, "", "%v", err)
		}
		return
	}
	lines := keyLines(text)
	where := func(k toml.Key) string {
		if n := lines.find(k); n > 0 {
			return fmt.Sprintf("%s:%d", path, n)
		}
		return path
	}
	for _, k := range md.Keys() {
		dotted := strings.Join(k, ".")
		parent := strings.Join(k[:len(k)-1], ".")
		switch f, ok := l.fields[dotted]; {
		case ok && isTableArray(f):
			if !l.src[dotted].set() {
				val, _ := lookup(raw, k)
				l.setTables(f, dotted, val, arrayTableLines(text, dotted), path)
			}
		case ok && len(strings.Split(dotted, ".")) == len(k):
			val, found := lookup(raw, k)
			if !found {
				continue // under an array of tables; the table error covers it
			}
			if err := setValue(f, val); err != nil {
				l.errAt(where(k), dotted, "%v", err)
				continue
			}
			l.src[dotted] = origin{where(k), layerFile}
		case l.tables[dotted]:
			if val, _ := lookup(raw, k); !isTable(val) {
				l.errAt(where(k), dotted, "must be a table ([%s]), got %s", dotted, tomlType(val))
			}
		case parent == "" || l.tables[parent]:
			// Keys under a bad table or inside a map value (labels, env)
			// are not reported here; only the first unknown level is.
			msg := "unknown key"
			if why, refused := refusedKeys[dotted]; refused {
				msg = why
			} else if near := l.nearest(dotted); near != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", near)
			}
			l.errAt(where(k), k.String(), "%s", msg)
		}
	}
}

// nearest is the known key (or table) closest to an unknown one, when it is
// close enough to be a typo: at most 2 edits, or 3 for a long name, within
// the same table, or the same name under another table.
func (l *loader) nearest(unknown string) string {
	parent, name := "", unknown
	if i := strings.LastIndexByte(unknown, '.'); i >= 0 {
		parent, name = unknown[:i], unknown[i+1:]
	}
	best, bestDist := "", 1<<30
	consider := func(known string) {
		kp, kn := "", known
		if i := strings.LastIndexByte(known, '.'); i >= 0 {
			kp, kn = known[:i], known[i+1:]
		}
		var d int
		switch {
		case kp == parent:
			d = editDistance(name, kn)
		case kn == name:
			d = 1 // the right key in the wrong table
		default:
			return
		}
		if d < bestDist || (d == bestDist && known < best) {
			best, bestDist = known, d
		}
	}
	for k := range l.fields {
		consider(k)
	}
	for k := range l.tables {
		consider(k)
	}
	if bestDist > typoLimit(name) {
		return ""
	}
	return best
}

// typoLimit is how many edits still make a misspelling of name: 2, or 3
// for a long name.
func typoLimit(name string) int {
	if len(name) >= 10 {
		return 3
	}
	return 2
}

// Closest is the name in known that name is most likely a misspelling of
// (at most 2 edits away, 3 for a long name, ignoring case), or "".
func Closest(name string, known []string) string {
	best, bestDist := "", typoLimit(name)+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(name), strings.ToLower(k)); d < bestDist || (d == bestDist && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance counts the single-character insertions, deletions,
// substitutions and swaps of neighbours that turn a into b.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

func isTable(v any) bool { _, ok := v.(map[string]any); return ok }

func lookup(raw map[string]any, k toml.Key) (any, bool) {
	var cur any = raw
	for _, part := range k {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// setValue stores a decoded TOML value into a leaf field, checking its type.
func setValue(f reflect.Value, val any) error {
	switch {
	case f.Type() == durationType:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("want a duration string like \"30s\", got %s", tomlType(val))
		}
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return err
		}
		f.Set(reflect.ValueOf(d))
	case f.Kind() == reflect.String:
		s, ok := val.(string)
		if !ok {
			return fmt.Errorf("want a string, got %s", tomlType(val))
		}
		f.SetString(s)
	case f.Kind() == reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			return fmt.Errorf("want true or false, got %s", tomlType(val))
		}
		f.SetBool(b)
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		n, ok := val.(int64)
		if !ok {
			return fmt.Errorf("want an integer, got %s", tomlType(val))
		}
		f.SetInt(n)
	case f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Int: // *int: nil when not set
		p := reflect.New(f.Type().Elem())
		if err := setValue(p.Elem(), val); err != nil {
			return err
		}
		f.Set(p)
	case f.Kind() == reflect.Float64:
		switch n := val.(type) {
		case float64:
			f.SetFloat(n)
		case int64:
			f.SetFloat(float64(n))
		default:
			return fmt.Errorf("want a number, got %s", tomlType(val))
		}
	case f.Kind() == reflect.Slice: // []string
		arr, ok := val.([]any)
		if !ok {
			return fmt.Errorf("want an array of strings, got %s", tomlType(val))
		}
		out := make([]string, len(arr))
		for i, e := range arr {
			if out[i], ok = e.(string); !ok {
				return fmt.Errorf("want an array of strings, element %d is %s", i, tomlType(e))
			}
		}
		f.Set(reflect.ValueOf(out))
	case f.Kind() == reflect.Map: // map[string]string
		m, ok := val.(map[string]any)
		if !ok {
			return fmt.Errorf("want a table of strings like {a = \"b\"}, got %s", tomlType(val))
		}
		out := make(map[string]string, len(m))
		for k, e := range m {
			if out[k], ok = e.(string); !ok {
				return fmt.Errorf("want a table of strings, %q is %s", k, tomlType(e))
			}
		}
		f.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("unsupported field type %s", f.Type()) // a bug in this package
	}
	return nil
}

func isTableArray(f reflect.Value) bool {
	return f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct
}

// setTables fills a slice of structs from an array of tables ([[gpu.devices]]),
// with an error per bad entry at its own line. The entries are kept even with
// errors, so that indices stay as written; failed records that validation
// must not judge them again.
func (l *loader) setTables(f reflect.Value, key string, val any, lines []int, path string) {
	where := func(i int) string {
		if i < len(lines) {
			return fmt.Sprintf("%s:%d", path, lines[i])
		}
		return path
	}
	tables, ok := val.([]map[string]any)
	if !ok {
		l.errAt(where(0), key, "want an array of tables ([[%s]]), got %s", key, tomlType(val))
		l.failed[key] = true
		return
	}
	out := reflect.MakeSlice(f.Type(), len(tables), len(tables))
	for i := range tables {
		l.entries[key] = append(l.entries[key], where(i))
	}
	for i, t := range tables {
		if err := setTable(out.Index(i), t); err != nil {
			l.errAt(where(i), key, "entry %d: %v", i+1, err)
			l.failed[key] = true
		}
	}
	f.Set(out)
	l.src[key] = origin{where(0), layerFile}
}

// entryErrf reports a problem with entry i (from 0) of an array of tables,
// at the entry's own line.
func (l *loader) entryErrf(key string, i int, format string, args ...any) {
	where := l.src[key].where
	if i < len(l.entries[key]) {
		where = l.entries[key][i]
	}
	l.errAt(where, key, "entry %d: %s", i+1, fmt.Sprintf(format, args...))
}

// arrayTableLines lists the lines of each [[key]] header, in order.
func arrayTableLines(text, key string) []int {
	var out []int
	for i, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		if strings.HasPrefix(s, "[[") && strings.Join(splitKey(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(s, "]]"), "[["), " ")), ".") == key {
			out = append(out, i+1)
		}
	}
	return out
}

// setTable fills a struct from one table of an array of tables, by its
// fields' toml tags; an unknown key is an error.
func setTable(v reflect.Value, t map[string]any) error {
	fields := map[string]reflect.Value{}
	for i := range v.NumField() {
		if tag := v.Type().Field(i).Tag.Get("toml"); tag != "" && tag != "-" {
			fields[tag] = v.Field(i)
		}
	}
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(t)) {
		f, ok := fields[k]
		if !ok {
			known := slices.Sorted(maps.Keys(fields))
			errs = append(errs, fmt.Sprintf("unknown key %q (known: %s)", k, strings.Join(known, ", ")))
			continue
		}
		if err := setValue(f, t[k]); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k, err))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func tomlType(v any) string {
	switch v := v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case time.Time:
		return "a date/time"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// setText stores an env or flag value (always a string) into a leaf field.
// Durations also accept a plain number of seconds ("180"); lists are
// comma-separated; booleans accept true/false/1/0/yes/no.
func setText(f reflect.Value, s string) error {
	switch {
	case f.Type() == durationType:
		d, err := parseDurationOrSeconds(s)
		if err != nil {
			return err
		}
		f.Set(reflect.ValueOf(d))
	case f.Kind() == reflect.String:
		f.SetString(s)
	case f.Kind() == reflect.Bool:
		b, err := parseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return fmt.Errorf("invalid integer %q", s)
		}
		f.SetInt(n)
	case f.Kind() == reflect.Slice:
		var out []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		f.Set(reflect.ValueOf(out))
	default:
		return fmt.Errorf("cannot be set from text (%s)", f.Type())
	}
	return nil
}

func parseDurationOrSeconds(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return D(time.Duration(n) * time.Second), nil
	}
	var d Duration
	err := d.UnmarshalText([]byte(s))
	return d, err
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, fmt.Errorf("invalid boolean %q (want true/false, 1/0 or yes/no)", s)
}

// keyLineMap maps dotted keys and table names to the line they first appear on.
type keyLineMap map[string]int

// keyLines finds "key =" lines and [table] headers by scanning the text,
// since the TOML library keeps key positions private. It is a heuristic (a
// multi-line string could fool it) good enough to point a human at a line.
func keyLines(text string) keyLineMap {
	m := keyLineMap{}
	add := func(path []string, line int) {
		k := strings.Join(path, ".")
		if _, ok := m[k]; !ok {
			m[k] = line
		}
	}
	var table []string
	for i, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		switch {
		case s == "" || s[0] == '#':
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				continue
			}
			table = splitKey(strings.TrimLeft(s[:end], "["))
			add(table, i+1)
		default:
			if eq := strings.IndexByte(s, '='); eq > 0 {
				add(append(append([]string(nil), table...), splitKey(s[:eq])...), i+1)
			}
		}
	}
	return m
}

// find returns the line of k, or of its nearest enclosing key or table; 0 if unknown.
func (m keyLineMap) find(k toml.Key) int {
	for n := len(k); n > 0; n-- {
		if line, ok := m[strings.Join(k[:n], ".")]; ok {
			return line
		}
	}
	return 0
}

func splitKey(s string) []string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
	}
	return parts
}
