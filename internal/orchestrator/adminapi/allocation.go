package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/web"
)

// What GPUs a job gets, in this order:
//
//   - gpu_count when the submit gives one; 0 is a CPU-only job;
//   - otherwise the training config's --num_processes (or num_processes):
//     SimpleTuner starts one process per GPU, so that is the count it needs;
//   - otherwise the whole worker, all its GPUs and alone, which is how
//     SimpleTuner's own agent runs a job.

// numProcessesKeys are the spellings of the trainer's process count in a
// SimpleTuner config, the command-line one first.
var numProcessesKeys = []string{"--num_processes", "num_processes"}

// maxGPUCount bounds a job's GPU count, given or derived.
const maxGPUCount = 1024

// gpuRequest decides a job's GPUs from the submit's gpu_count (nil when not
// given) and its resolved training config.
func gpuRequest(gpuCount *int, cfg json.RawMessage) (count int, whole bool, err error) {
	if gpuCount != nil {
		if *gpuCount < 0 || *gpuCount > maxGPUCount {
			return 0, false, web.Invalid("field \"gpu_count\" must be from 0 to %d; got %d", maxGPUCount, *gpuCount)
		}
		return *gpuCount, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &m); err != nil {
		return 0, true, nil // not an object: normalizeConfig refused it already
	}
	found := ""
	for _, key := range numProcessesKeys {
		raw, ok := m[key]
		if !ok {
			continue
		}
		n, err := processCount(raw)
		if err != nil {
			return 0, false, web.Invalid("field \"config.%s\" %v", key, err)
		}
		if found != "" && n != count {
			return 0, false, web.Invalid("fields \"config.%s\" (%d) and \"config.%s\" (%d) disagree: give one", found, count, key, n)
		}
		found, count = key, n
	}
	if found == "" {
		return 0, true, nil
	}
	return count, false, nil
}

// processCount reads a process count: a whole number from 1 to maxGPUCount,
// as a JSON number or a string holding one (configs saved by a web form
// carry strings).
func processCount(raw json.RawMessage) (int, error) {
	text := string(bytes.TrimSpace(raw))
	var s string
	if json.Unmarshal(raw, &s) == nil {
		text = strings.TrimSpace(s)
	}
	n, err := strconv.Atoi(text)
	if err != nil || n < 1 || n > maxGPUCount {
		return 0, fmt.Errorf("must be a whole number from 1 to %d (the GPUs the trainer starts a process on); got %s", maxGPUCount, raw)
	}
	return n, nil
}
