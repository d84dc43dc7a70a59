package adminapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// maxFieldWarnings bounds the warnings one body earns: a body of ten
// thousand made-up keys gets a short answer.
const maxFieldWarnings = 10

// unknownFieldWarnings names the top-level keys of a JSON object body that
// the struct v does not take, each with the known field it most likely
// misspells. Such keys are accepted (other clients send extra ones) but
// ignored, so a misspelled "priorty" must not pass unnoticed. Keys match
// their field whatever their case, as encoding/json decodes them.
func unknownFieldWarnings(body []byte, v any) []string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	known := jsonFields(reflect.TypeOf(v))
	var out []string
	unknown := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if slices.ContainsFunc(known, func(f string) bool { return strings.EqualFold(f, k) }) {
			continue
		}
		if unknown++; unknown > maxFieldWarnings {
			continue
		}
		shown := k
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		msg := fmt.Sprintf("unknown field %q was ignored", shown)
		if near := config.Closest(k, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		out = append(out, msg)
	}
	if unknown > maxFieldWarnings {
		out = append(out, fmt.Sprintf("%d more unknown fields were ignored", unknown-maxFieldWarnings))
	}
	return out
}

// jsonFields lists the JSON names of a struct's fields.
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
