package ctl

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
)

// The API's objects are package api's; ctl adds what its tables derive.
// -o json prints the reply itself, so fields added by newer orchestrators
// reach scripts without a new client.

// Worker is an entry of GET /api/admin/workers.
type Worker struct{ api.Worker }

// Job is an entry of GET /api/queue, or GET /api/queue/{id} with attempts.
type Job = api.Job

// Attempt is one dispatch of a job.
type Attempt = api.Attempt

// Token is an entry of GET /api/admin/tokens.
type Token = api.Token

// Artifact is one file a job produced.
type Artifact = api.Artifact

// GPUsOut says how many GPUs the worker keeps out of use, for the tables:
// "1 unhealthy", "2 held"; "" when none.
func (w Worker) GPUsOut() string {
	n := map[string]int{}
	for _, c := range w.GPUConditions {
		n[c.State]++
	}
	var parts []string
	for _, st := range []string{"unhealthy", "held"} {
		if n[st] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[st], st))
		}
	}
	return strings.Join(parts, ", ")
}

// Jobs lists the jobs the worker runs now as far as the listing names them:
// its current job, and how many more run beside it.
func (w Worker) Jobs() (ids []string, extra int) {
	if w.CurrentJobID != nil && *w.CurrentJobID != "" {
		return []string{*w.CurrentJobID}, max(w.RunningJobs-1, 0)
	}
	return nil, w.RunningJobs
}

// GPUsFreeText is "free/total", and how many GPUs the worker keeps out of
// use: "0/8 (1 held)".
func (w Worker) GPUsFreeText() string {
	if out := w.GPUsOut(); out != "" {
		return w.gpusFree() + " (" + out + ")"
	}
	return w.gpusFree()
}

// gpusFree is "free/total"; "-/total" for a worker that is not there.
func (w Worker) gpusFree() string {
	if w.Status == "offline" || w.Status == "connecting" {
		return fmt.Sprintf("-/%d", w.GPUCount)
	}
	return fmt.Sprintf("%d/%d", w.GPUsFree, w.GPUCount)
}

// decodeArtifacts reads GET /api/queue/{id}/artifacts.
func decodeArtifacts(raw []byte) ([]Artifact, error) {
	var reply api.JobArtifacts
	if err := json.Unmarshal(raw, &reply); err != nil {
		return nil, fmt.Errorf("the artifact listing is not the API's: %v", err)
	}
	return reply.Artifacts, nil
}

// labelsText is "k=v,k2=v2" in key order.
func labelsText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// parseLabels reads k=v arguments; flag names the option for messages.
func parseLabels(flag string, args []string) (map[string]string, error) {
	out := map[string]string{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, usagef("%s %q: want key=value", flag, a)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("%s: the key %q is given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
