package dashboard

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// form is what the user typed, kept to fill the form again, and the errors to
// show beside the fields they concern.
type form struct {
	Values map[string]string
	Errors map[string]string
	// Error is a problem that names no field of this form.
	Error string
}

func newForm() *form { return &form{Values: map[string]string{}, Errors: map[string]string{}} }

// formFrom keeps the posted values of the named fields.
func formFrom(r *http.Request, names ...string) *form {
	f := newForm()
	for _, n := range names {
		f.Values[n] = r.PostFormValue(n)
	}
	return f
}

// V is a field's value; E its error.
func (f *form) V(name string) string { return f.Values[name] }
func (f *form) E(name string) string { return f.Errors[name] }

// Failed reports whether any error was recorded.
func (f *form) Failed() bool { return f.Error != "" || len(f.Errors) > 0 }

func (f *form) fail(field, msg string) {
	if _, seen := f.Errors[field]; !seen {
		f.Errors[field] = msg
	}
}

// apiError puts the API's refusal beside the form field it names; fields maps
// API field names to form field names when they differ.
func (f *form) apiError(res apiResult, fields map[string]string) {
	name := res.Field()
	if mapped, ok := fields[name]; ok {
		name = mapped
	}
	if _, ok := f.Values[name]; ok && name != "" {
		f.fail(name, res.Detail)
		return
	}
	if res.Status == http.StatusForbidden {
		f.Error = "Your token may not do this: " + res.Detail
		return
	}
	f.Error = res.Detail
}

// parseLabels reads "key=value" lines (blank lines skipped).
func parseLabels(text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("line %d: write one label per line as key=value; got %q", i+1, line)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// optionalInt reads a whole number field; empty means absent.
func (f *form) optionalInt(name string) *int {
	v := strings.TrimSpace(f.V(name))
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		f.fail(name, fmt.Sprintf("must be a whole number; got %q", v))
		return nil
	}
	return &n
}

// optionalFloat reads a number field; empty means absent.
func (f *form) optionalFloat(name string) *float64 {
	v := strings.TrimSpace(f.V(name))
	if v == "" {
		return nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		f.fail(name, fmt.Sprintf("must be a number; got %q", v))
		return nil
	}
	return &n
}
