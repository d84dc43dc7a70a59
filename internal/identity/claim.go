package identity

import (
	"fmt"
	"strings"
)

// Claim reads a possibly nested claim by its dotted path ("groups",
// "realm_access.roles") as a list of strings: a string is one value, an
// array gives its strings (other elements are skipped), numbers and
// booleans are written out; anything missing or of another shape is none.
// A key that itself holds dots ("https://example.com/groups") is found
// as a whole before the path is split.
func Claim(claims map[string]any, dotted string) []string {
	if dotted == "" || claims == nil {
		return nil
	}
	if v, ok := claims[dotted]; ok {
		return values(v)
	}
	head, rest, found := strings.Cut(dotted, ".")
	if !found {
		return nil
	}
	nested, ok := claims[head].(map[string]any)
	if !ok {
		return nil
	}
	return Claim(nested, rest)
}

func values(v any) []string {
	switch v := v.(type) {
	case string:
		if v == "" {
			return nil
		}
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s := scalar(e); s != "" {
				out = append(out, s)
			}
		}
		return out
	case []string:
		var out []string
		for _, s := range v {
			if s != "" {
				out = append(out, s)
			}
		}
		return out
	default:
		if s := scalar(v); s != "" {
			return []string{s}
		}
		return nil
	}
}

// scalar writes out a string, number or boolean; "" for anything else.
func scalar(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64, int, int64, bool:
		return fmt.Sprint(v)
	}
	return ""
}
