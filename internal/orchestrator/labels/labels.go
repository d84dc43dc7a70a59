// Package labels decides which labels a worker is matched against: the
// ones it reports, laid under the ones an admin set, or the admin's alone
// once an admin locked them.
package labels

import (
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Placement is the labels jobs are matched against after a worker
// reported its own: the admin's alone when an admin locked them, else the
// reported ones laid over the current ones (see Merge).
func Placement(current, admin, reported map[string]string, locked bool) map[string]string {
	if locked {
		return Copy(admin)
	}
	return Merge(current, admin, reported)
}

// Reported is the labels whose keys no admin set.
func Reported(labels, admin map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if _, owned := admin[k]; !owned {
			out[k] = v
		}
	}
	return out
}

// Merge lays reported labels over the current ones, except that a key an
// admin set is never overridden by the worker.
func Merge(current, admin, reported map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range current {
		out[k] = v
	}
	for k, v := range reported {
		if _, adminOwned := admin[k]; !adminOwned {
			out[k] = v
		}
	}
	for k, v := range admin {
		out[k] = v
	}
	return out
}

// Copy is a copy of m, never nil.
func Copy(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Valid refuses (422) labels that break the protocol's limits, naming field.
func Valid(field string, labels map[string]string) error {
	if err := protocol.CheckLabels(labels); err != nil {
		return web.Invalid("field %q: %v", field, err)
	}
	return nil
}
