package adminapi

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

// A job's GPUs: gpu_count when given (0: CPU only), else the config's process
// count, else the whole worker; a process count that is not a whole number
// from 1 up is refused naming the field.
func TestGPURequest(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, tc := range []struct {
		name     string
		gpuCount *int
		config   string
		count    int
		whole    bool
		err      string
	}{
		{"nothing said: the whole worker", nil, `{"model_type":"lora"}`, 0, true, ""},
		{"gpu_count given", n(2), `{"--num_processes":4}`, 2, false, ""},
		{"gpu_count 0 is CPU only", n(0), `{}`, 0, false, ""},
		{"the trainer's flag", nil, `{"--num_processes":4}`, 4, false, ""},
		{"the plain key", nil, `{"num_processes":2}`, 2, false, ""},
		{"a string from a web form", nil, `{"--num_processes":" 3 "}`, 3, false, ""},
		{"both spellings agreeing", nil, `{"--num_processes":2,"num_processes":"2"}`, 2, false, ""},
		{"both spellings disagreeing", nil, `{"--num_processes":2,"num_processes":3}`, 0, false, `"config.--num_processes" (2) and "config.num_processes" (3) disagree`},
		{"zero processes", nil, `{"--num_processes":0}`, 0, false, `field "config.--num_processes" must be a whole number from 1`},
		{"a fraction", nil, `{"num_processes":1.5}`, 0, false, `field "config.num_processes" must be a whole number`},
		{"a word", nil, `{"--num_processes":"all"}`, 0, false, `got "all"`},
		{"null", nil, `{"--num_processes":null}`, 0, false, `got null`},
		{"too many", nil, `{"--num_processes":5000}`, 0, false, `from 1 to 1024`},
		{"gpu_count negative", n(-1), `{}`, 0, false, `field "gpu_count" must be from 0 to 1024`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count, whole, err := gpuRequest(tc.gpuCount, json.RawMessage(tc.config))
			if tc.err != "" {
				var he *api.Error
				if !errors.As(err, &he) || he.Status != 422 || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a 422 containing %q", err, tc.err)
				}
				return
			}
			if err != nil || count != tc.count || whole != tc.whole {
				t.Fatalf("got count %d whole %v err %v, want %d %v", count, whole, err, tc.count, tc.whole)
			}
		})
	}
}
