package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The launch benchmark measures the worker side with real processes: one
// orchestrator on the embedded store, real simpletuner-workerd processes, and
// a job (test/bench/zerojob, in C) whose first instruction reads the clock
// and reports it over a unix socket. Per isolation mode it measures client submit
// → the job's first instruction, one job at a time, and zero-work jobs per
// second through every worker, with workerd's CPU time per job.

type launchFlags struct {
	modes      string // comma-separated isolation modes; "" skips the launch benchmark
	workers    int
	jobs       int
	samples    int
	submitters int
	workerdBin string // a prebuilt workerd (an older version, to compare); "" builds this tree's
	workerdDir string // where the workerd processes keep their state and job directories; "" the bench's temporary directory
	inProcess  bool   // the orchestrator runs inside the bench (for -cpuprofile)
	// logLevel is workerd's log level; at info or debug workerd logs JSON
	// and the bench times 'job received' → first instruction from it.
	logLevel string
}

type launchResult struct {
	mode          string
	latency       dist
	received      dist            // workerd's 'job received' → first instruction (with -launch-log info or debug)
	phases        map[string]dist // workerd's launch timing (with -launch-log debug)
	jobsPerS      float64
	elapsed       time.Duration
	workerdCPUJob time.Duration // workerd processes' CPU time per job
	orchCPUJob    time.Duration // the orchestrator's
	jobCPUJob     time.Duration // the jobs' own, from fork to exit (reaped by workerd)
	machineCPUJob time.Duration // the whole machine's busy time per job
	stolen        float64       // the share of the cores' time a hypervisor took (steal)
	load          string
}

// launchModes resolves "auto": every mode this machine offers.
func launchModes(spec string) []string {
	if spec != "auto" {
		return strings.Split(spec, ",")
	}
	if os.Geteuid() == 0 {
		return []string{"cgroup", "process-group"}
	}
	return []string{"process-group"}
}

func runLaunch(lf launchFlags, orchBin, tmp string) ([]launchResult, error) {
	// Jobs may run as other uids: they pass through tmp to their directories.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return nil, err
	}
	stampBin, err := zeroJobPart(tmp)
	if err != nil {
		return nil, err
	}
	workerdBin := lf.workerdBin
	if workerdBin == "" {
		if workerdBin, err = workerdPart(tmp); err != nil {
			return nil, err
		}
	}
	var out []launchResult
	for _, mode := range launchModes(lf.modes) {
		r, err := launchMode(lf, mode, orchBin, workerdBin, stampBin, tmp)
		if err != nil {
			return nil, fmt.Errorf("launch %s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// launchMode runs both measurements for one isolation mode; mode "default"
// writes no isolation keys (a workerd that predates them).
func launchMode(lf launchFlags, mode, orchBin, workerdBin, stampBin, tmp string) (r launchResult, err error) {
	r.mode = mode
	r.load = loadAvg()
	dir, err := os.MkdirTemp(tmp, "launch-"+mode+"-")
	if err != nil {
		return r, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return r, err
	}
	o, err := startOrch(orchBin, dir, "", lf.inProcess)
	if err != nil {
		return r, err
	}
	defer o.stop()
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	stamps, sock, err := listenStamps(ctx, filepath.Join(dir, "stamp.sock"))
	if err != nil {
		return r, err
	}
	ws, err := c.createWorkers(ctx, 0, lf.workers, 8)
	if err != nil {
		return r, err
	}
	workerdDir := dir
	if lf.workerdDir != "" {
		if workerdDir, err = os.MkdirTemp(lf.workerdDir, "launch-"+mode+"-"); err != nil {
			return r, err
		}
		defer os.RemoveAll(workerdDir)
		if err := os.Chmod(workerdDir, 0o711); err != nil {
			return r, err
		}
	}
	var pids []int
	for i, w := range ws {
		isolation := "" // "default": a workerd that predates the isolation keys
		if mode != "default" {
			isolation = fmt.Sprintf("isolation = %q\n", mode) + jobUser()
		}
		p, err := startWorkerd(workerdBin, filepath.Join(workerdDir, fmt.Sprintf("w%02d", i)), o.url, w, stampBin, sock, isolation, "backend = \"none\"\n", lf.logLevel)
		if err != nil {
			return r, err
		}
		defer func() { _ = p.Process.Kill(); _ = p.Wait() }()
		pids = append(pids, p.Process.Pid)
	}
	if err := c.waitIdle(ctx, lf.workers); err != nil {
		return r, err
	}
	log.Printf("launch %s: %d workerd processes idle", mode, lf.workers)

	// One job at a time, every worker idle.
	var lat []time.Duration
	firsts := map[string]time.Time{}
	for range lf.samples {
		start := time.Now()
		id, err := c.submit(ctx)
		if err != nil {
			return r, err
		}
		at, err := stamps.wait(id, 30*time.Second)
		if err != nil {
			return r, err
		}
		lat = append(lat, at.Sub(start))
		firsts[id] = at
		if err := c.waitCompleted(ctx, len(lat)); err != nil {
			return r, err
		}
	}
	r.latency = summarize(lat)
	log.Printf("launch %s: submit → first instruction p50/p90/p99/max %s", mode, r.latency)
	if lf.logLevel == "info" || lf.logLevel == "debug" {
		r.received, r.phases = receivedToFirst(workerdDir, len(ws), firsts)
		log.Printf("launch %s: workerd's job received → first instruction p50/p90/p99/max %s", mode, r.received)
	}

	// Throughput: jobs submitted by concurrent clients, all through.
	before := len(lat)
	w0, o0, j0, m0 := cpuOf(pids), cpuOf([]int{o.pid()}), childCPUOf(pids), machineCPU()
	_, steal0 := machineSeconds()
	start := time.Now()
	var next atomic.Int64
	errc := make(chan error, lf.submitters)
	for range lf.submitters {
		go func() {
			for next.Add(1) <= int64(lf.jobs) {
				if _, err := c.submit(ctx); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	done := make(chan error, 1)
	go func() {
		// The jobs' own stamps tell progress without asking the
		// orchestrator being measured; its count is read only for the
		// last reports.
		if err := stamps.waitCount(before+lf.jobs, 5*time.Minute); err != nil {
			done <- err
			return
		}
		done <- c.waitCompleted(ctx, before+lf.jobs)
	}()
	select {
	case err := <-errc:
		return r, err
	case err := <-done:
		if err != nil {
			return r, err
		}
	}
	r.elapsed = time.Since(start)
	r.jobsPerS = float64(lf.jobs) / r.elapsed.Seconds()
	r.workerdCPUJob = (cpuOf(pids) - w0) / time.Duration(lf.jobs)
	r.orchCPUJob = (cpuOf([]int{o.pid()}) - o0) / time.Duration(lf.jobs)
	r.jobCPUJob = (childCPUOf(pids) - j0) / time.Duration(lf.jobs)
	r.machineCPUJob = (machineCPU() - m0) / time.Duration(lf.jobs)
	_, steal := machineSeconds()
	r.stolen = (steal - steal0) / (r.elapsed.Seconds() * float64(runtime.NumCPU()))
	log.Printf("launch %s: %d jobs in %s: %.0f jobs/s; CPU per job: workerd %s, orchestrator %s, job %s, machine %s; stolen %.0f%%",
		mode, lf.jobs, r.elapsed.Round(time.Millisecond), r.jobsPerS, perJobCPU(r.workerdCPUJob), perJobCPU(r.orchCPUJob), perJobCPU(r.jobCPUJob), perJobCPU(r.machineCPUJob), 100*r.stolen)
	return r, nil
}

// startWorkerd configures and starts one workerd for worker w, whose job is
// stampBin reporting on sock. jobKeys are more [job] keys; gpuKeys the [gpu]
// table's.
// logLevel "" is warn, in text; any other level logs JSON, whose times
// have the nanoseconds receivedToFirst needs.
func startWorkerd(bin, dir, url string, w *worker, stampBin, sock, jobKeys, gpuKeys, logLevel string) (*exec.Cmd, error) {
	logKeys := "level = \"warn\"\nformat = \"text\"\n"
	if logLevel != "" && logLevel != "warn" {
		logKeys = fmt.Sprintf("level = %q\nformat = \"json\"\n", logLevel)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(w.token+"\n"), 0o600); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`[orchestrator]
url = %q
token_file = %q
[worker]
name = %q
persistent = true
state_dir = %q
[job]
command = [%q]
env = { BENCH_STAMP_SOCKET = %q }
%s[gpu]
%s[log]
%s`, url, filepath.Join(dir, "token"), w.id, filepath.Join(dir, "state"), stampBin, sock, jobKeys, gpuKeys, logKeys)
	path := filepath.Join(dir, "workerd.toml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "workerd.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
	return cmd, cmd.Start()
}

// jobUser is the [job] user key for a workerd run as root: jobs then run as
// a uid of their own, with nobody standing in for the packaged user.
func jobUser() string {
	if os.Geteuid() == 0 {
		return "user = \"nobody\"\n"
	}
	return ""
}

// stampBox collects the jobs' first-instruction times.
type stampBox struct {
	mu  sync.Mutex
	at  map[string]time.Time   // the first stamp of each key
	all map[string][]time.Time // every stamp of each key: a preempted job starts again
	ch  chan struct{}          // poked on every arrival
	// kept, when set, answers each start stamp with the seconds of the job
	// that its earlier attempts kept (the two-team trace's resume).
	kept func(jobID string) float64
}

func listenStamps(ctx context.Context, path string) (*stampBox, string, error) {
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", err
	}
	if err := os.Chmod(path, 0o777); err != nil { // jobs run as other uids
		return nil, "", err
	}
	go func() { <-ctx.Done(); l.Close() }()
	b := &stampBox{at: map[string]time.Time{}, all: map[string][]time.Time{}, ch: make(chan struct{}, 1)}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				line, _ := bufio.NewReader(conn).ReadString('\n')
				f := strings.Fields(line)
				if len(f) != 2 {
					return
				}
				ns, _ := strconv.ParseInt(f[1], 10, 64)
				b.mu.Lock()
				if _, seen := b.at[f[0]]; !seen {
					b.at[f[0]] = time.Unix(0, ns)
				}
				b.all[f[0]] = append(b.all[f[0]], time.Unix(0, ns))
				kept := b.kept
				b.mu.Unlock()
				if kept != nil && !strings.Contains(f[0], ":") {
					fmt.Fprintf(conn, "%g\n", kept(f[0]))
				}
				select {
				case b.ch <- struct{}{}:
				default:
				}
			}()
		}
	}()
	return b, path, nil
}

func (b *stampBox) wait(jobID string, timeout time.Duration) (time.Time, error) {
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		at, ok := b.at[jobID]
		b.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-b.ch:
		case <-deadline:
			return time.Time{}, fmt.Errorf("job %s never started (no stamp within %s)", jobID, timeout)
		}
	}
}

// waitCount waits until n jobs have stamped their first instruction.
func (b *stampBox) waitCount(n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		got := len(b.at)
		b.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-b.ch:
		case <-deadline:
			return fmt.Errorf("%d of %d jobs started within %s", got, n, timeout)
		}
	}
}

// queueStats is the part of GET /api/queue/stats the benchmark reads.
type queueStats struct {
	ByStatus map[string]int `json:"by_status"`
	Workers  struct {
		Idle int `json:"idle"`
	} `json:"workers"`
}

func (c *client) stats(ctx context.Context) (queueStats, error) {
	var s queueStats
	err := c.call(ctx, "GET", "/api/queue/stats", c.adminHdr(), nil, &s, 200)
	return s, err
}

func (c *client) waitIdle(ctx context.Context, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := c.stats(ctx)
		if err == nil && s.Workers.Idle >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d workers idle after 60 s (%v)", s.Workers.Idle, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitCompleted waits until n jobs in all have completed; a failed job ends
// the benchmark.
func (c *client) waitCompleted(ctx context.Context, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		s, err := c.stats(ctx)
		if err != nil {
			return err
		}
		if f := s.ByStatus["failed"]; f > 0 {
			return fmt.Errorf("%d jobs failed; see the workerd logs (-keep)", f)
		}
		if s.ByStatus["completed"] >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs completed after 5 minutes", s.ByStatus["completed"], n)
		}
		// Often enough for the throughput's end (1 % of a 1 s run), seldom
		// enough not to load the orchestrator being measured.
		time.Sleep(10 * time.Millisecond)
	}
}

// cpuOf is the CPU time (user + system) the processes have used so far.
func cpuOf(pids []int) time.Duration { return statCPU(pids, 11) }

// childCPUOf is the CPU time of the processes pids reaped: for workerd, its
// jobs, from the fork to the exit.
func childCPUOf(pids []int) time.Duration { return statCPU(pids, 13) }

// statCPU sums two /proc/<pid>/stat times, utime and stime (field 11 after
// the comm) or cutime and cstime (13).
func statCPU(pids []int, field int) time.Duration {
	var total float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		ut, _ := strconv.ParseFloat(f[field], 64)
		st, _ := strconv.ParseFloat(f[field+1], 64)
		total += (ut + st) / clockTick
	}
	return time.Duration(total * float64(time.Second))
}

// machineCPU is the busy time of every core so far.
func machineCPU() time.Duration {
	return time.Duration(busySeconds() * float64(time.Second))
}

// perJobCPU is a per-job CPU time as the log shows it.
func perJobCPU(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func printLaunch(lf launchFlags, rs []launchResult) {
	fmt.Printf("\nlaunch: %d simpletuner-workerd processes, SQLite orchestrator, %d latency samples, %d jobs by %d submitters\n\n",
		lf.workers, lf.samples, lf.jobs, lf.submitters)
	fmt.Println("| isolation | submit → first instruction p50 / p90 / p99 / max | zero-work jobs/s | CPU per job: workerd | orchestrator | the job | whole machine | stolen by the hypervisor | load before |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	perJob := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range rs {
		fmt.Printf("| %s | %s | %.0f/s (%s) | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.0f %% | %s |\n", r.mode, r.latency, r.jobsPerS, r.elapsed.Round(time.Millisecond),
			perJob(r.workerdCPUJob), perJob(r.orchCPUJob), perJob(r.jobCPUJob), perJob(r.machineCPUJob), 100*r.stolen, r.load)
	}
	for _, r := range rs {
		if r.received.n == 0 {
			continue
		}
		fmt.Printf("\n%s: workerd's 'job received' → first instruction p50 / p90 / p99 / max: %s\n", r.mode, r.received)
		steps := slices.Sorted(maps.Keys(r.phases))
		for _, k := range steps {
			fmt.Printf("  %s: %s\n", k, r.phases[k])
		}
	}
	fmt.Println("\ngoals: p50 ≤ 10 ms, ≥ 400 jobs/s, ≤ 5 ms of workerd CPU per job")
}

// receivedToFirst reads the workerd logs under dir (w00 … w<n-1>) for each
// sampled job's 'job received' and times it to the job's first
// instruction; it also gathers the steps of debug-level 'launch timing'
// lines (each field ending in _us), per step.
func receivedToFirst(dir string, n int, firsts map[string]time.Time) (dist, map[string]dist) {
	var lat []time.Duration
	steps := map[string][]time.Duration{}
	for i := range n {
		data, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("w%02d", i), "workerd.log"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			id, _ := rec["job_id"].(string)
			first, sampled := firsts[id]
			if !sampled {
				continue
			}
			switch rec["msg"] {
			case "job received":
				at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(rec["time"]))
				if err == nil {
					lat = append(lat, first.Sub(at))
				}
			case "launch timing":
				for k, v := range rec {
					if us, ok := v.(float64); ok && strings.HasSuffix(k, "_us") {
						steps[k] = append(steps[k], time.Duration(us*float64(time.Microsecond)))
					}
				}
			}
		}
	}
	phases := map[string]dist{}
	for k, d := range steps {
		phases[k] = summarize(d)
	}
	return summarize(lat), phases
}
