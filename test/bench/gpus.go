package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// The GPU packing benchmark replays a fixed, seeded trace of jobs asking for
// 1, 2, 4 or 8 GPUs on a fleet of real simpletuner-workerd processes with
// the static GPU backend (no GPU needed), and judges the schedule: makespan
// against the ideal bound, GPU utilization while jobs wait, and waits per
// GPU count. The same trace can be written out (-gpu-trace-out) for another
// scheduler, and that scheduler's record of the run judged the same way
// (-gpu-analyze).

type gpuFlags struct {
	run      bool
	only     bool
	workers  int
	perHost  int
	jobs     int
	seed     uint64
	scale    float64
	traceOut string // write the trace here and exit
	analyze  string // judge these records (JSON) against the trace and exit
	teams    teamsFlags
}

// traceJob is one job of the trace: submitted At seconds after the start,
// asking for GPUs GPUs and running for Seconds. A Whole job is submitted as
// SimpleTuner's documentation shows, without a GPU count, and takes a whole
// worker (GPUs is then a worker's GPU count: another scheduler asks for
// that many). Team is the submitting team in the two-team trace.
type traceJob struct {
	ID      int     `json:"id"`
	At      float64 `json:"submit_s"`
	GPUs    int     `json:"gpus"`
	Whole   bool    `json:"whole,omitempty"`
	Seconds float64 `json:"seconds"`
	Team    string  `json:"team,omitempty"`
}

// jobRecord is what happened to one job, in seconds since the trace started:
// when it was submitted, and when the job's own process began (its first
// attempt) and ended (its last). A job that was preempted also lists every
// attempt's run in Runs, the last one included, and how many were
// preempted.
type jobRecord struct {
	ID        int       `json:"id"`
	GPUs      int       `json:"gpus"`
	Team      string    `json:"team,omitempty"`
	Submit    float64   `json:"submit_s"`
	Start     float64   `json:"start_s"`
	End       float64   `json:"end_s"`
	Runs      []jobSpan `json:"runs,omitempty"`
	Preempted int       `json:"preempted,omitempty"`
}

// jobSpan is one attempt's run: from the job's first instruction to its
// end or its stop.
type jobSpan struct {
	Start float64 `json:"start_s"`
	End   float64 `json:"end_s"`
}

// runs are the spans the job held its GPUs.
func (r jobRecord) runs() []jobSpan {
	if len(r.Runs) == 0 {
		return []jobSpan{{r.Start, r.End}}
	}
	return r.Runs
}

// makeTrace draws n jobs: gpu_count 1/2/4/8 with probability 60/20/12/8 %,
// every other 8-GPU job submitted without a count (the whole worker),
// durations from a Pareto distribution (shape 1.8, minimum 1.5 s, capped at
// 60 s: most jobs short, a few very long), Poisson arrivals offering 1.2
// times what fleetGPUs can do, so that a queue builds. scale stretches
// every time.
func makeTrace(n int, seed uint64, fleetGPUs int, scale float64) []traceJob {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	const shape, minimum, limit = 1.8, 1.5, 60.0
	meanGPUs := .6*1 + .2*2 + .12*4 + .08*8
	meanSeconds := minimum * shape / (shape - 1)
	rate := 1.2 * float64(fleetGPUs) / (meanGPUs * meanSeconds) // jobs per second
	var out []traceJob
	at := 0.0
	for i := range n {
		var gpus int
		switch u := r.Float64(); {
		case u < .60:
			gpus = 1
		case u < .80:
			gpus = 2
		case u < .92:
			gpus = 4
		default:
			gpus = 8
		}
		seconds := min(minimum/math.Pow(1-r.Float64(), 1/shape), limit)
		out = append(out, traceJob{ID: i, At: round3(at * scale), GPUs: gpus, Whole: gpus == 8 && i%2 == 0, Seconds: round3(seconds * scale)})
		at += r.ExpFloat64() / rate
	}
	return out
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// gpuResult is the judgement of one run of the trace.
type gpuResult struct {
	scheduler    string
	jobs         int
	makespan     float64 // first submit → last end
	idealSpan    float64 // max(total GPU-seconds ÷ fleet, latest submit + its duration)
	workGPUs     float64 // GPU-seconds of work in the trace
	utilPending  float64 // GPUs held ÷ GPUs there while some job waited
	utilOverall  float64 // work ÷ (fleet × makespan)
	waitMean     map[int]float64
	waitP95      map[int]float64
	longest8Wait float64
	longestJob   float64
	load         string
}

// judge computes the result of records for trace on fleetGPUs GPUs.
func judge(name string, trace []traceJob, recs []jobRecord, fleetGPUs int) (gpuResult, error) {
	res := gpuResult{scheduler: name, jobs: len(recs), waitMean: map[int]float64{}, waitP95: map[int]float64{}}
	if len(recs) != len(trace) {
		return res, fmt.Errorf("%d records for %d jobs", len(recs), len(trace))
	}
	byID := map[int]traceJob{}
	for _, j := range trace {
		byID[j.ID] = j
		res.workGPUs += float64(j.GPUs) * j.Seconds
		res.longestJob = max(res.longestJob, j.Seconds)
		res.idealSpan = max(res.idealSpan, j.At+j.Seconds)
	}
	res.idealSpan = max(res.idealSpan, res.workGPUs/float64(fleetGPUs))

	type event struct {
		at           float64
		waiting, gpu int
	}
	var events []event
	waits := map[int][]float64{}
	first, last := math.Inf(1), 0.0
	for _, r := range recs {
		j, ok := byID[r.ID]
		if !ok || j.GPUs != r.GPUs || j.Team != r.Team {
			return res, fmt.Errorf("record of job %d does not match the trace", r.ID)
		}
		if err := r.check(); err != nil {
			return res, err
		}
		first, last = min(first, r.Submit), max(last, r.End)
		w := r.Start - r.Submit
		waits[r.GPUs] = append(waits[r.GPUs], w)
		if r.GPUs == 8 {
			res.longest8Wait = max(res.longest8Wait, w)
		}
		events = append(events, event{r.Submit, 1, 0}, event{r.Start, -1, 0})
		// A preempted job waits again between its runs.
		runs := r.runs()
		for i, s := range runs {
			events = append(events, event{s.Start, 0, r.GPUs}, event{s.End, 0, -r.GPUs})
			if i > 0 {
				events = append(events, event{runs[i-1].End, 1, 0}, event{s.Start, -1, 0})
			}
		}
	}
	res.makespan = last - first
	res.utilOverall = res.workGPUs / (float64(fleetGPUs) * res.makespan)
	// Sweep: GPU-seconds held, and there, while at least one job waited.
	sort.SliceStable(events, func(a, b int) bool { return events[a].at < events[b].at })
	waiting, held := 0, 0
	var pendingSpan, pendingHeld float64
	for i, e := range events {
		if i > 0 && waiting > 0 {
			dt := e.at - events[i-1].at
			pendingSpan += dt
			pendingHeld += dt * float64(held)
		}
		waiting += e.waiting
		held += e.gpu
	}
	if pendingSpan > 0 {
		res.utilPending = pendingHeld / (float64(fleetGPUs) * pendingSpan)
	}
	for g, ws := range waits {
		slices.Sort(ws)
		sum := 0.0
		for _, w := range ws {
			sum += w
		}
		res.waitMean[g] = sum / float64(len(ws))
		res.waitP95[g] = ws[min(len(ws)-1, int(.95*float64(len(ws))))]
	}
	return res, nil
}

// check says what is out of order in the record, if anything.
func (r jobRecord) check() error {
	at := r.Submit
	runs := r.runs()
	for _, s := range runs {
		if s.Start < at || s.End < s.Start {
			return fmt.Errorf("job %d: submit %.3f, runs %v out of order", r.ID, r.Submit, runs)
		}
		at = s.End
	}
	if runs[0].Start != r.Start || runs[len(runs)-1].End != r.End {
		return fmt.Errorf("job %d: start %.3f and end %.3f are not its first run's start and last run's end", r.ID, r.Start, r.End)
	}
	return nil
}

// runGPUs replays the trace on real workerd processes.
func runGPUs(gf gpuFlags, orchBin, tmp string) (gpuResult, error) {
	fleet := gf.workers * gf.perHost
	trace := makeTrace(gf.jobs, gf.seed, fleet, gf.scale)
	if err := os.Chmod(tmp, 0o711); err != nil {
		return gpuResult{}, err
	}
	stampBin, err := stampPart(tmp)
	if err != nil {
		return gpuResult{}, err
	}
	workerdBin, err := workerdPart(tmp)
	if err != nil {
		return gpuResult{}, err
	}
	dir, err := os.MkdirTemp(tmp, "gpus-")
	if err != nil {
		return gpuResult{}, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return gpuResult{}, err
	}
	o, err := startOrch(orchBin, dir, "", false)
	if err != nil {
		return gpuResult{}, err
	}
	defer o.stop()
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stamps, sock, err := listenStamps(ctx, filepath.Join(dir, "stamp.sock"))
	if err != nil {
		return gpuResult{}, err
	}
	stopFleet, err := startGPUFleet(ctx, c, gf, dir, o.url, workerdBin, stampBin, sock)
	defer stopFleet()
	if err != nil {
		return gpuResult{}, err
	}
	res := gpuResult{load: loadAvg()}
	log.Printf("gpus: %d workers × %d GPUs idle; replaying %d jobs (last submitted at %.0f s)", gf.workers, gf.perHost, len(trace), trace[len(trace)-1].At)

	start := time.Now()
	ids := make([]string, len(trace))
	submitted := make([]time.Time, len(trace))
	for i, j := range trace {
		time.Sleep(time.Until(start.Add(time.Duration(j.At * float64(time.Second)))))
		submitted[i] = time.Now()
		var out struct {
			JobID string `json:"job_id"`
		}
		body := map[string]any{"config": map[string]any{"bench_seconds": j.Seconds}, "target": "worker", "max_retries": 0}
		if !j.Whole || gf.perHost != j.GPUs {
			body["gpu_count"] = j.GPUs
		}
		if err := c.call(ctx, "POST", "/api/queue/submit", c.adminHdr(), body, &out, 201); err != nil {
			return res, err
		}
		ids[i] = out.JobID
	}
	if err := c.waitCompleted(ctx, len(trace)); err != nil {
		return res, err
	}
	if err := c.checkGPUs(ctx, trace, ids); err != nil {
		return res, err
	}
	var recs []jobRecord
	for i, id := range ids {
		began, err := stamps.wait(id, time.Second)
		if err != nil {
			return res, err
		}
		ended, err := stamps.wait(id+":end", time.Second)
		if err != nil {
			return res, err
		}
		recs = append(recs, jobRecord{ID: trace[i].ID, GPUs: trace[i].GPUs, Submit: submitted[i].Sub(start).Seconds(),
			Start: began.Sub(start).Seconds(), End: ended.Sub(start).Seconds()})
	}
	load := res.load
	res, err = judge("simpletuner-orchestratord", trace, recs, fleet)
	res.load = load
	return res, err
}

// checkGPUs checks that every job ran once, on as many GPUs as it asked
// for.
func (c *client) checkGPUs(ctx context.Context, trace []traceJob, ids []string) error {
	for i, id := range ids {
		var j struct {
			Attempts []struct {
				GPUs []int `json:"gpus"`
			} `json:"attempts"`
		}
		if err := c.call(ctx, "GET", "/api/queue/"+id, c.adminHdr(), nil, &j, 200); err != nil {
			return err
		}
		if len(j.Attempts) != 1 || len(j.Attempts[0].GPUs) != trace[i].GPUs {
			return fmt.Errorf("job %s (trace %d): %d attempts, want 1 holding %d GPUs", id, i, len(j.Attempts), trace[i].GPUs)
		}
	}
	return nil
}

// startGPUFleet creates gf.workers workers, starts a workerd of gf.perHost
// static GPUs for each (in dir/wNN) and waits until all are idle. stop
// kills the workerds started, whatever the error.
func startGPUFleet(ctx context.Context, c *client, gf gpuFlags, dir, url, workerdBin, stampBin, sock string) (stop func(), err error) {
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}
	ws, err := c.createWorkers(ctx, 0, gf.workers, 4)
	if err != nil {
		return stop, err
	}
	for i, w := range ws {
		p, err := startGPUWorkerd(workerdBin, filepath.Join(dir, fmt.Sprintf("w%02d", i)), url, w, gf.perHost, stampBin, sock)
		if err != nil {
			return stop, err
		}
		procs = append(procs, p)
	}
	return stop, c.waitIdle(ctx, gf.workers)
}

// startGPUWorkerd starts a workerd whose static backend describes gpus GPUs
// and whose job holds them for the trace's seconds, stamping its start and
// end on sock.
func startGPUWorkerd(bin, dir, url string, w *worker, gpus int, stampBin, sock string) (*exec.Cmd, error) {
	devices := "backend = \"static\"\n"
	for i := range gpus {
		devices += fmt.Sprintf("[[gpu.devices]]\nname = \"Bench GPU\"\nmemory_gb = 80\nuuid = \"GPU-%s-%d\"\n", w.id, i)
	}
	return startWorkerd(bin, dir, url, w, stampBin, sock, jobUser(), devices)
}

// writeTrace writes the trace as JSON for another scheduler.
func writeTrace(gf gpuFlags) error {
	if gf.teams.on {
		return writeTeamsTrace(gf)
	}
	data, err := json.MarshalIndent(makeTrace(gf.jobs, gf.seed, gf.workers*gf.perHost, gf.scale), "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(gf.traceOut, append(data, '\n'), 0o644)
}

// readRecords reads another scheduler's records of the trace.
func readRecords(path string) ([]jobRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []jobRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

// analyzeRecords judges another scheduler's records of the same trace,
// from the file path; the row is named after the file.
func analyzeRecords(gf gpuFlags, path string) (gpuResult, error) {
	recs, err := readRecords(path)
	if err != nil {
		return gpuResult{}, err
	}
	trace := makeTrace(gf.jobs, gf.seed, gf.workers*gf.perHost, gf.scale)
	return judge(strings.TrimSuffix(filepath.Base(path), ".json"), trace, recs, gf.workers*gf.perHost)
}

func printGPUs(gf gpuFlags, rs []gpuResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Printf("\ngpus: %d workers × %d GPUs, %d jobs (seed %d, scale %g): gpu_count 1/2/4/8 at 60/20/12/8 %% (half the 8-GPU jobs without a count: the whole worker), Pareto durations, offered load 1.2×\n\n",
		gf.workers, gf.perHost, gf.jobs, gf.seed, gf.scale)
	fmt.Println("| scheduler | makespan (ideal bound) | ideal ÷ makespan | GPU use while jobs wait | work ÷ capacity | wait mean / p95 by gpu_count 1, 2, 4, 8 | longest 8-GPU wait (longest job) | load before |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		var waits []string
		for _, g := range []int{1, 2, 4, 8} {
			waits = append(waits, fmt.Sprintf("%.1f / %.1f s", r.waitMean[g], r.waitP95[g]))
		}
		fmt.Printf("| %s | %.1f s (%.1f s) | %.1f %% | %.1f %% | %.1f %% | %s | %.1f s (%.1f s) | %s |\n",
			r.scheduler, r.makespan, r.idealSpan, 100*r.idealSpan/r.makespan, 100*r.utilPending, 100*r.utilOverall,
			strings.Join(waits, "; "), r.longest8Wait, r.longestJob, r.load)
	}
	fmt.Println("\ngoals: ideal ÷ makespan ≥ 90 %; no 8-GPU job waits more than 3× the longest job")
}
