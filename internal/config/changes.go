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
		*out = append(*out, Change{Key: key, Old: fmt.Sprint(av.Interface()), New: fmt.Sprint(bv.Interface())})
	}
}
