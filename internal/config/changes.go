package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Change is one key whose value differs between two loaded configurations.
// Old and New are printed values; a Secret prints masked.
type Change struct {
	Key, Old, New string
}

// Changes lists, in file order, the keys whose values differ between old
// and next, two configurations of the same kind (*Orchestrator or *Worker).
// A reload logs them so that an admin sees what a SIGHUP actually changed.
func Changes(old, next any) []Change {
	var out []Change
	diffValues("", reflect.Indirect(reflect.ValueOf(old)), reflect.Indirect(reflect.ValueOf(next)), &out)
	return out
}

func diffValues(prefix string, a, b reflect.Value, out *[]Change) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		av, bv := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != durationType && f.Type != secretType {
			diffValues(key, av, bv, out)
			continue
		}
		if reflect.DeepEqual(av.Interface(), bv.Interface()) {
			continue
		}
		*out = append(*out, Change{Key: key, Old: printed(av), New: printed(bv)})
	}
}

// printed is a value as a reload logs it. Tables in arrays ([[teams]],
// [[webhooks]]) print by their keys, e.g. vision(share=1, max_gpus=2,
// max_queued=3, borrow=false), not as Go's bare {vision 1 2 3 false}.
func printed(v reflect.Value) string {
	switch {
	case (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && isTableType(v.Type().Elem()):
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = printed(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case isTableType(v.Type()):
		if s, ok := v.Interface().(fmt.Stringer); ok {
			return s.String() // a table that says best how it reads ([[teams]]: the effective max_priority)
		}
		return printedTable(v)
	}
	return fmt.Sprint(v.Interface()) // Secret and Duration print through their String
}

// isTableType is a struct that TOML writes as a table (not a Duration or Secret).
func isTableType(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && t != durationType && t != secretType
}

// printedTable is name(key=value, ...) for a table with a name, else
// {key=value, ...}.
func printedTable(v reflect.Value) string {
	t := v.Type()
	var name string
	var fields []string
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if !f.IsExported() || key == "" || key == "-" {
			continue
		}
		if key == "name" && f.Type.Kind() == reflect.String {
			name = v.Field(i).String()
			continue
		}
		fields = append(fields, key+"="+printed(v.Field(i)))
	}
	if name == "" {
		return "{" + strings.Join(fields, ", ") + "}"
	}
	return name + "(" + strings.Join(fields, ", ") + ")"
}
