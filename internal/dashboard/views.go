package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// The API's replies as the pages read them: package api's types, with what
// the templates want besides.

// workerView is a worker with what its row and page show besides.
type workerView struct{ api.Worker }

func workerViews(ws []api.Worker) []workerView {
	out := make([]workerView, len(ws))
	for i, w := range ws {
		out[i] = workerView{w}
	}
	return out
}

// Agent names the software on the worker: simpletuner-workerd speaks
// protocol 2, SimpleTuner's own agent protocol 1.
func (w workerView) Agent() string {
	name := "SimpleTuner agent"
	if w.Protocol >= 2 {
		name = "simpletuner-workerd"
	}
	if w.Protocol == 0 {
		return "not registered yet"
	}
	if w.AgentVersion != "" {
		name += " " + w.AgentVersion
	}
	return name
}

// gpuDevice is one GPU with its live numbers when a heartbeat brought them,
// and its condition when the worker keeps it out of use.
type gpuDevice struct {
	Index       int
	Name        string
	MemoryMiB   float64
	Live        bool
	Utilization float64
	MemUsedMiB  float64
	Temperature float64
	PowerW      float64
	Health      string // the live health: ok, or a warning
	Condition   *api.GPUCondition
}

// Devices pairs the GPUs the worker registered with its latest telemetry.
func (w workerView) Devices() []gpuDevice {
	live := map[string]protocol.GPUTelemetry{}
	var liveList []protocol.GPUTelemetry
	if w.GPUTelemetry != nil {
		liveList = w.GPUTelemetry.GPUs
		for _, g := range liveList {
			live[g.UUID] = g
		}
	}
	var out []gpuDevice
	for _, d := range protocol.ReportedDevices(w.GPUInfo) {
		g := gpuDevice{Index: d.Index, Name: d.Name, MemoryMiB: float64(d.MemoryMiB)}
		if l, ok := live[d.UUID]; ok {
			g.Live, g.Utilization, g.MemUsedMiB, g.Temperature = true, l.UtilizationPct, float64(l.MemoryUsedMiB), l.TemperatureC
			g.PowerW, g.Health = l.PowerW, l.Health
		}
		for i := range w.GPUConditions {
			if w.GPUConditions[i].Index == d.Index {
				g.Condition = &w.GPUConditions[i]
			}
		}
		out = append(out, g)
	}
	if len(out) == 0 { // telemetry without a device list (another agent)
		for i, l := range liveList {
			out = append(out, gpuDevice{Index: i, Live: true, Utilization: l.UtilizationPct, MemUsedMiB: float64(l.MemoryUsedMiB), Temperature: l.TemperatureC})
		}
	}
	return out
}

// cancellable reports whether a cancel request can still change the job.
func cancellable(j api.Job) bool { return !j.Terminal() && j.Status != "canceling" }

// gpuCharts are the worker's GPU charts, one per GPU.
func gpuCharts(h api.GPUHistory) []chart {
	var out []chart
	step := time.Duration(h.StepSeconds) * time.Second
	for _, g := range h.GPUs {
		out = append(out, timeChart(fmt.Sprintf("GPU #%d", g.Index), "utilisation and memory in use, percent", "%", 100, step,
			line{Class: "util", Label: "utilisation", Points: g.UtilizationPct},
			line{Class: "mem", Label: "memory in use", Points: g.MemoryUsedPct}))
	}
	return out
}

// fleetChart charts the fleet's GPUs.
func fleetChart(h api.FleetHistory) chart {
	return timeChart("The fleet's GPUs", "in use, asked for by queued jobs, online", "GPUs", 1, time.Duration(h.StepSeconds)*time.Second,
		line{Class: "online", Label: "online", Points: h.Online},
		line{Class: "asked", Label: "asked for by queued jobs", Points: h.Asked},
		line{Class: "util", Label: "in use", Points: h.InUse})
}

// workerNames maps worker ids to names, for pages that list jobs: a worker
// is shown by its name, with the id beside it.
type workerNames map[string]string

// namesOf looks up the named workers' names as the session's caller; an id
// the caller may not read (no admin.workers scope) or that is gone stays
// unnamed and is shown as the id alone.
func (d *Dashboard) namesOf(ctx context.Context, ids ...string) workerNames {
	names := workerNames{}
	for _, id := range ids {
		if _, seen := names[id]; seen || id == "" {
			continue
		}
		names[id] = ""
		if w, err := d.opt.API.Worker(ctx, api.WorkerRef{ID: id}); err == nil {
			names[id] = w.Name
		}
	}
	return names
}

// Link is a link to a worker's page showing its name and, smaller, its id.
// id is a string or a *string (nil: nothing).
func (n workerNames) Link(id any) template.HTML {
	var s string
	switch v := id.(type) {
	case string:
		s = v
	case *string:
		if v == nil {
			return ""
		}
		s = *v
	}
	if s == "" {
		return ""
	}
	esc := template.HTMLEscapeString
	href := "/ui/workers/" + template.URLQueryEscaper(s)
	if name := n[s]; name != "" {
		return template.HTML(`<a href="` + href + `">` + esc(name) + `</a> <small class="mono">` + esc(s) + `</small>`)
	}
	return template.HTML(`<a class="mono" href="` + href + `">` + esc(s) + `</a>`)
}
