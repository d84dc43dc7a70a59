package main

import (
	"bufio"
	"bytes"
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
	// logLevel is workerd's log level: info (the default; JSON, whose
	// "job received" splits the latency) or debug (also each launch step).
	logLevel string
	// base is an older build measured beside this one (-base-orchestratord-bin,
	// -base-workerd-bin); empty binaries: none.
	base   launchBuild
	rounds int // runs of each build per mode, alternating (ABBA)
}

// runs is how many runs each build gets per mode: -launch-rounds, else two
// with a base build (A B B A) and one without.
func (lf launchFlags) runs() int {
	switch {
	case lf.rounds > 0:
		return lf.rounds
	case lf.base.orchBin != "":
		return 2
	}
	return 1
}

// launchBuild is one pair of daemons the launch benchmark runs.
type launchBuild struct {
	name       string
	orchBin    string
	workerdBin string
}

// launchResult is one build's runs in one isolation mode, pooled.
type launchResult struct {
	build         string
	mode          string
	latency       dist // client submit → the job's first instruction
	received      dist // client submit → workerd's "job received" (the orchestrator's half)
	toFirst       dist // "job received" → the job's first instruction (workerd's half)
	runs          []launchRun
	phases        map[string]dist // workerd's launch timing per step (with -launch-log debug)
	workerdCPUJob time.Duration   // workerd processes' CPU time per job
	orchCPUJob    time.Duration   // the orchestrator's
	jobCPUJob     time.Duration   // the jobs' own, from fork to exit (reaped by workerd)
	machineCPUJob time.Duration   // the whole machine's busy time per job
	stolen        float64         // the share of the cores' time a hypervisor took (steal)
}

// launchRun is what one run of one build measured.
type launchRun struct {
	latency, received, toFirst []time.Duration
	jobsPerS                   float64
	elapsed                    time.Duration
	workerdCPU, orchCPU        time.Duration // during the throughput
	jobCPU, machineCPU         time.Duration
	steal                      float64 // share of the cores' time
	load                       string
	phases                     map[string][]time.Duration // workerd's launch steps (debug)
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

// runLaunch measures this tree's daemons and, when a base build is named,
// the base's beside them: per mode, rounds runs of each, in the order A B
// B A A B ..., so that a machine that slows down or speeds up during the
// benchmark weighs on both alike.
func runLaunch(lf launchFlags, orchBin, tmp string) ([]launchResult, error) {
	// Jobs may run as other uids: they pass through tmp to their directories.
	if err := os.Chmod(tmp, 0o711); err != nil {
		return nil, err
	}
	stampBin, err := zeroJobPart(tmp)
	if err != nil {
		return nil, err
	}
	this := launchBuild{name: "this tree", orchBin: orchBin, workerdBin: lf.workerdBin}
	if this.workerdBin == "" {
		if this.workerdBin, err = workerdPart(tmp); err != nil {
			return nil, err
		}
	}
	builds := []launchBuild{this}
	if lf.base.orchBin != "" || lf.base.workerdBin != "" {
		if lf.base.orchBin == "" || lf.base.workerdBin == "" {
			return nil, fmt.Errorf("-base-orchestratord-bin and -base-workerd-bin go together: the base build is both daemons")
		}
		builds = append(builds, lf.base)
	}
	rounds := lf.runs()
	var out []launchResult
	for _, mode := range launchModes(lf.modes) {
		runs := make([][]launchRun, len(builds))
		for round := range rounds {
			for k := range builds {
				i := k
				if round%2 == 1 {
					i = len(builds) - 1 - k // the second round runs them the other way round
				}
				b := builds[i]
				log.Printf("launch %s: %s, run %d of %d", mode, b.name, round+1, rounds)
				r, err := launchMode(lf, mode, b, stampBin, tmp)
				if err != nil {
					return nil, fmt.Errorf("launch %s, %s: %w", mode, b.name, err)
				}
				runs[i] = append(runs[i], r)
			}
		}
		for i, b := range builds {
			out = append(out, pool(b.name, mode, lf.jobs, runs[i]))
		}
	}
	return out, nil
}

// pool merges one build's runs: the latency samples of every run, the CPU
// over every run's jobs.
func pool(build, mode string, jobs int, runs []launchRun) launchResult {
	r := launchResult{build: build, mode: mode, runs: runs}
	var lat, rec, first []time.Duration
	var elapsed time.Duration
	steps := map[string][]time.Duration{}
	for _, run := range runs {
		for k, d := range run.phases {
			steps[k] = append(steps[k], d...)
		}
		lat, rec, first = append(lat, run.latency...), append(rec, run.received...), append(first, run.toFirst...)
		r.workerdCPUJob += run.workerdCPU
		r.orchCPUJob += run.orchCPU
		r.jobCPUJob += run.jobCPU
		r.machineCPUJob += run.machineCPU
		r.stolen += run.steal * run.elapsed.Seconds()
		elapsed += run.elapsed
	}
	r.latency, r.received, r.toFirst = summarize(lat), summarize(rec), summarize(first)
	if len(steps) > 0 {
		r.phases = map[string]dist{}
		for k, d := range steps {
			r.phases[k] = summarize(d)
		}
	}
	if n := time.Duration(jobs * len(runs)); n > 0 {
		r.workerdCPUJob /= n
		r.orchCPUJob /= n
		r.jobCPUJob /= n
		r.machineCPUJob /= n
	}
	if elapsed > 0 {
		r.stolen /= elapsed.Seconds()
	}
	return r
}

// launchMode runs both measurements for one isolation mode with one build's
// daemons; mode "default" writes no isolation keys (a workerd that predates
// them).
func launchMode(lf launchFlags, mode string, b launchBuild, stampBin, tmp string) (r launchRun, err error) {
	r.load = loadAvg()
	dir, err := os.MkdirTemp(tmp, "launch-"+mode+"-")
	if err != nil {
		return r, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return r, err
	}
	o, err := startOrch(b.orchBin, dir, "", lf.inProcess)
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
	var logs []string
	for i, w := range ws {
		isolation := "" // "default": a workerd that predates the isolation keys
		if mode != "default" {
			isolation = fmt.Sprintf("isolation = %q\n", mode) + jobUser()
		}
		wdir := filepath.Join(workerdDir, fmt.Sprintf("w%02d", i))
		// At info or debug, in JSON: each "job received" line, to the nanosecond,
		// splits the latency into the orchestrator's half and workerd's.
		p, err := startWorkerdLogging(b.workerdBin, wdir, o.url, w, stampBin, sock, isolation, "backend = \"none\"\n", lf.workerdLogLevel(), "json")
		if err != nil {
			return r, err
		}
		defer func() { _ = p.Process.Kill(); _ = p.Wait() }()
		pids = append(pids, p.Process.Pid)
		logs = append(logs, filepath.Join(wdir, "workerd.log"))
	}
	if err := c.waitIdle(ctx, lf.workers); err != nil {
		return r, err
	}
	log.Printf("launch %s: %d workerd processes idle", mode, lf.workers)

	// One job at a time, every worker idle.
	submitted := map[string]time.Time{}
	started := map[string]time.Time{}
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
		submitted[id], started[id] = start, at
		r.latency = append(r.latency, at.Sub(start))
		if err := c.waitCompleted(ctx, len(r.latency)); err != nil {
			return r, err
		}
	}
	received, err := jobsReceived(logs)
	if err != nil {
		return r, err
	}
	if lf.workerdLogLevel() == "debug" {
		if r.phases, err = launchSteps(logs, submitted); err != nil {
			return r, err
		}
	}
	for id, start := range submitted {
		if at, ok := received[id]; ok {
			r.received = append(r.received, at.Sub(start))
			r.toFirst = append(r.toFirst, started[id].Sub(at))
		}
	}
	log.Printf("launch %s: %s: submit → first instruction p50/p90/p99/max %s; submit → job received %s", mode, b.name, summarize(slices.Clone(r.latency)), summarize(slices.Clone(r.received)))

	// Throughput: jobs submitted by concurrent clients, all through.
	before := len(r.latency)
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
	r.workerdCPU = cpuOf(pids) - w0
	r.orchCPU = cpuOf([]int{o.pid()}) - o0
	r.jobCPU = childCPUOf(pids) - j0
	r.machineCPU = machineCPU() - m0
	_, steal := machineSeconds()
	r.steal = (steal - steal0) / (r.elapsed.Seconds() * float64(runtime.NumCPU()))
	perJob := func(d time.Duration) time.Duration { return perJobCPU(d / time.Duration(lf.jobs)) }
	log.Printf("launch %s: %s: %d jobs in %s: %.0f jobs/s; CPU per job: workerd %s, orchestrator %s, job %s, machine %s; stolen %.0f%%",
		mode, b.name, lf.jobs, r.elapsed.Round(time.Millisecond), r.jobsPerS, perJob(r.workerdCPU), perJob(r.orchCPU), perJob(r.jobCPU), perJob(r.machineCPU), 100*r.steal)
	return r, nil
}

// jobsReceived reads workerd's JSON logs for each job's "job received"
// line: when workerd took the job off its event stream.
func jobsReceived(paths []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if !bytes.Contains(line, []byte(`"job received"`)) {
				continue
			}
			var rec struct {
				Time  time.Time `json:"time"`
				Msg   string    `json:"msg"`
				JobID string    `json:"job_id"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "job received" && rec.JobID != "" {
				out[rec.JobID] = rec.Time
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return out, nil
}

// startWorkerd configures and starts one workerd for worker w, whose job is
// stampBin reporting on sock. jobKeys are more [job] keys; gpuKeys the [gpu]
// table's.
func startWorkerd(bin, dir, url string, w *worker, stampBin, sock, jobKeys, gpuKeys string) (*exec.Cmd, error) {
	return startWorkerdLogging(bin, dir, url, w, stampBin, sock, jobKeys, gpuKeys, "warn", "text")
}

// startWorkerdLogging is startWorkerd with workerd's log level and format.
func startWorkerdLogging(bin, dir, url string, w *worker, stampBin, sock, jobKeys, gpuKeys, level, format string) (*exec.Cmd, error) {
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
level = %q
format = %q
`, url, filepath.Join(dir, "token"), w.id, filepath.Join(dir, "state"), stampBin, sock, jobKeys, gpuKeys, level, format)
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
	runs := lf.runs()
	fmt.Printf("\nlaunch: %d simpletuner-workerd processes, SQLite orchestrator; per build and isolation mode %d run(s) of %d latency samples and %d jobs by %d submitters",
		lf.workers, runs, lf.samples, lf.jobs, lf.submitters)
	if lf.base.orchBin != "" {
		fmt.Printf(", alternating with %s (ABBA)", lf.base.name)
	}
	fmt.Print("\n\n| build | isolation | submit → first instruction p50 / p90 / p99 / max | submit → job received p50 / p90 / p99 | job received → first instruction p50 / p90 / p99 | zero-work jobs/s, each run | CPU per job: workerd | orchestrator | the job | whole machine | stolen by the hypervisor | load before each run |\n")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	perJob := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range rs {
		var rates, loads []string
		for _, run := range r.runs {
			rates = append(rates, fmt.Sprintf("%.0f", run.jobsPerS))
			loads = append(loads, run.load)
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.0f %% | %s |\n", r.build, r.mode, r.latency,
			r.received.short(), r.toFirst.short(), strings.Join(rates, ", "),
			perJob(r.workerdCPUJob), perJob(r.orchCPUJob), perJob(r.jobCPUJob), perJob(r.machineCPUJob), 100*r.stolen, strings.Join(loads, ", "))
	}
	for _, r := range rs {
		if len(r.phases) == 0 {
			continue
		}
		fmt.Printf("\n%s, %s: workerd's launch steps p50 / p90 / p99 / max:\n", r.build, r.mode)
		for _, k := range slices.Sorted(maps.Keys(r.phases)) {
			fmt.Printf("  %s: %s\n", k, r.phases[k])
		}
	}
	fmt.Println("\ngoals: submit → first instruction p50 ≤ 8 ms and p99 ≤ 20 ms, no slower than the base build; zero-work jobs/s at least the base's; ≤ 5 ms of workerd CPU per job")
}

// launchSteps reads the debug-level "launch timing" lines of the sampled
// jobs from workerd's JSON logs: each field ending in _us is one step.
func launchSteps(paths []string, sampled map[string]time.Time) (map[string][]time.Duration, error) {
	steps := map[string][]time.Duration{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "launch timing" {
				continue
			}
			if _, ok := sampled[fmt.Sprint(rec["job_id"])]; !ok {
				continue
			}
			for k, v := range rec {
				if us, ok := v.(float64); ok && strings.HasSuffix(k, "_us") {
					steps[k] = append(steps[k], time.Duration(us*float64(time.Microsecond)))
				}
			}
		}
	}
	return steps, nil
}

// workerdLogLevel is the level the launch benchmark's workerds log at: at
// least info, whose "job received" lines the latency split needs.
func (lf launchFlags) workerdLogLevel() string {
	if lf.logLevel == "debug" {
		return "debug"
	}
	return "info"
}
