// Command bench measures simpletuner-orchestratord on one machine, in one run,
// with simulated protocol-2 workers speaking real HTTP/SSE to the real binary:
//
//   - submit → job_submit latency with idle workers waiting,
//   - full job cycles per second (submit → dispatch → starting → completed),
//   - memory and heartbeat latency with 10,000 connected idle workers, and
//     submit → job_submit latency with all of them connected,
//
// on the embedded store and on a throwaway PostgreSQL cluster; then, with real
// simpletuner-workerd processes (launch.go), submit → a job's first
// instruction and zero-work jobs per second, per job isolation mode. Run it
// with `make bench` (go run ./test/bench); see docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	_ "net/http/pprof" // served only with -pprof
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/pgtest"
)

type flags struct {
	stores        string
	workers       int
	cycleWorkers  int
	jobs          int
	submitters    int
	backlog       int
	samples       int
	fleetSamples  int
	hbWindow      time.Duration
	createPar     int
	connectPar    int
	inProcess     bool
	cpuProfile    string
	mutexProfile  string
	blockProfile  string
	allocsProfile string
	orchProcs     int
	pprofAddr     string
	keep          bool
	launch        launchFlags
	launchOnly    bool
	gpus          gpuFlags
	orchBin       string
	// The dashboard measurement.
	dashboard     bool
	dashboardOnly bool
	dashWorkers   int
	dashJobs      int
	dashSamples   int
	dashWindow    time.Duration
	// The history scenario.
	history          int
	historySamples   int
	oldBinary        bool
	newBinary        bool
	retention        bool
	retentionWorkers int
	controlWindow    time.Duration
	skipReads        bool
	// The webhook scenario.
	webhooks webhookFlags
}

func main() {
	var f flags
	flag.StringVar(&f.stores, "store", "both", "stores to measure: sqlite, postgres or both")
	flag.IntVar(&f.workers, "workers", 10000, "connected idle workers for the memory and heartbeat measurement (0 skips it)")
	flag.IntVar(&f.cycleWorkers, "cycle-workers", 50, "workers for the latency and job-cycle measurements")
	flag.IntVar(&f.jobs, "jobs", 5000, "zero-work jobs for the job-cycle measurement")
	flag.IntVar(&f.submitters, "submitters", 8, "concurrent submitters in the job-cycle measurement")
	flag.IntVar(&f.backlog, "backlog", 200, "most jobs submitted but not yet completed in the job-cycle measurement")
	flag.IntVar(&f.samples, "samples", 2000, "latency samples with -cycle-workers idle workers")
	flag.IntVar(&f.fleetSamples, "fleet-samples", 500, "latency samples with -workers idle workers (at most 60 s)")
	flag.DurationVar(&f.hbWindow, "hb-window", 30*time.Second, "heartbeat measurement window (one heartbeat interval: every worker beats once)")
	flag.IntVar(&f.createPar, "create-par", 32, "concurrent admin requests when creating workers")
	flag.IntVar(&f.connectPar, "connect-par", 64, "concurrent register+connect sequences")
	flag.BoolVar(&f.inProcess, "inprocess", false, "run the orchestrator inside the bench process (for -cpuprofile/-pprof; RSS is then the sum of both)")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to this file")
	flag.StringVar(&f.mutexProfile, "mutexprofile", "", "write a mutex contention profile of the bench process to this file (with -inprocess: the orchestrator's)")
	flag.StringVar(&f.blockProfile, "blockprofile", "", "write a blocking profile of the bench process to this file (with -inprocess: the orchestrator's)")
	flag.StringVar(&f.allocsProfile, "allocsprofile", "", "write the allocation profile of the bench process to this file at the end (with -inprocess: the orchestrator's too)")
	flag.IntVar(&f.orchProcs, "orch-procs", 0, "GOMAXPROCS of the orchestrator (0: the Go default, one per core); with -inprocess it applies to the whole bench process")
	flag.StringVar(&f.pprofAddr, "pprof", "", "serve net/http/pprof of the bench process on this address")
	flag.BoolVar(&f.keep, "keep", false, "keep the temporary directory (configs, orchestrator logs)")
	flag.StringVar(&f.launch.modes, "launch", "auto", "isolation modes for the launch benchmark with real workerd processes, comma-separated (cgroup, process-group; default: a workerd without isolation keys); auto: what this machine offers; empty skips it")
	flag.BoolVar(&f.launchOnly, "launch-only", false, "run only the launch benchmark")
	flag.IntVar(&f.launch.workers, "launch-workers", 16, "workerd processes in the launch benchmark")
	flag.IntVar(&f.launch.jobs, "launch-jobs", 600, "zero-work jobs for the launch throughput")
	flag.IntVar(&f.launch.samples, "launch-samples", 200, "launch latency samples (one job at a time)")
	flag.StringVar(&f.launch.logLevel, "launch-log", "info", "workerd's log level in the launch benchmark: info (its 'job received' splits the latency) or debug (also its launch timing per step)")
	flag.IntVar(&f.launch.submitters, "launch-submitters", 8, "concurrent submitters for the launch throughput")
	flag.StringVar(&f.launch.base.orchBin, "base-orchestratord-bin", "", "an older build's simpletuner-orchestratord: the launch benchmark runs it beside this tree's daemons, alternating (with -base-workerd-bin; make bench-launch-ab builds both from a git revision)")
	flag.StringVar(&f.launch.base.workerdBin, "base-workerd-bin", "", "the older build's simpletuner-workerd (with -base-orchestratord-bin)")
	flag.StringVar(&f.launch.base.name, "base-name", "base", "what the launch table calls the older build (its git revision)")
	flag.IntVar(&f.launch.rounds, "launch-rounds", 0, "runs of each build per isolation mode, with a base build in the order this, base, base, this, ... (0: two with a base build, else one)")
	flag.StringVar(&f.launch.workerdDir, "launch-workerd-dir", "", "directory for the launch benchmark's workerd state and job directories (a tmpfs such as /dev/shm takes the disk out of the measurement); default: the bench's temporary directory")
	flag.BoolVar(&f.gpus.run, "gpus", true, "replay the GPU packing trace on real workerd processes with static GPUs")
	flag.BoolVar(&f.gpus.only, "gpus-only", false, "run only the GPU packing benchmark")
	flag.IntVar(&f.gpus.workers, "gpu-workers", 4, "workerd processes in the GPU packing benchmark")
	flag.IntVar(&f.gpus.perHost, "gpu-per-worker", 8, "static GPUs per workerd")
	flag.IntVar(&f.gpus.jobs, "gpu-jobs", 400, "jobs in the GPU packing trace")
	flag.Uint64Var(&f.gpus.seed, "gpu-seed", 1, "seed of the GPU packing trace")
	flag.Float64Var(&f.gpus.scale, "gpu-scale", 1, "stretch every time of the GPU packing trace by this factor")
	flag.StringVar(&f.gpus.traceOut, "gpu-trace-out", "", "write the GPU packing trace as JSON to this file and exit (to replay it on another scheduler)")
	flag.StringVar(&f.gpus.analyze, "gpu-analyze", "", "judge other schedulers' runs of the trace (JSON: [{id, gpus, submit_s, start_s, end_s}]; several files comma-separated, one row each) and exit")
	flag.BoolVar(&f.gpus.teams.on, "gpu-teams", false, "replay (with -gpu-trace-out: write; with -gpu-analyze: judge) the two-team trace instead: team flood fills the fleet at 0 s, team late submits 6 s later, shares 50/50; -gpu-jobs is then unused")
	flag.StringVar(&f.gpus.teams.modes, "gpu-teams-modes", "preempt,no-preempt,one-team", "orchestrator configurations the two-team trace runs on, comma-separated: preempt (teams, preemption on), no-preempt (teams, preemption off), one-team (no teams: today's FIFO)")
	flag.Float64Var(&f.gpus.teams.checkpoint, "gpu-teams-checkpoint", 5, "seconds of a two-team trace job's run between its checkpoints (a preempted job resumes from its last)")
	flag.DurationVar(&f.gpus.teams.minRuntime, "gpu-teams-min-runtime", 3*time.Second, "[jobs] min_runtime for the two-team trace")
	flag.DurationVar(&f.gpus.teams.grace, "gpu-teams-grace", 2*time.Second, "[jobs] cancel_grace for the two-team trace")
	flag.StringVar(&f.orchBin, "orchestratord-bin", "", "a prebuilt simpletuner-orchestratord; default: build this tree's")
	flag.StringVar(&bundleDir, "bundle", "", "take every program the benchmark runs prebuilt from this folder (make bench-bundle) instead of building them")
	flag.StringVar(&f.launch.workerdBin, "workerd-bin", "", "a prebuilt simpletuner-workerd for the launch benchmark (an older version, to compare); default: build this tree's")
	flag.BoolVar(&f.dashboard, "dashboard", true, "also measure the web dashboard on a store filled with -dash-workers and -dash-jobs")
	flag.BoolVar(&f.dashboardOnly, "dashboard-only", false, "measure only the web dashboard")
	flag.IntVar(&f.dashWorkers, "dash-workers", 10000, "workers in the dashboard measurement's store")
	flag.IntVar(&f.dashJobs, "dash-jobs", 1000000, "finished jobs in the dashboard measurement's store")
	flag.IntVar(&f.dashSamples, "dash-samples", 30, "requests timed per dashboard page")
	flag.DurationVar(&f.dashWindow, "dash-window", time.Minute, "how long the orchestrator's CPU is measured with and without an open dashboard")
	flag.IntVar(&f.history, "history", 0, "instead of the measurements above, load this many finished jobs (with attempts, logs and audit records) and measure the read endpoints, start-up and dispatch on them")
	flag.IntVar(&f.historySamples, "history-samples", 300, "requests per endpoint in the history scenario")
	flag.BoolVar(&f.oldBinary, "old-binary", false, "the -orchestratord-bin binary predates [retention], cursors and the audit verify endpoint: measure only what it has")
	flag.BoolVar(&f.retention, "retention", true, "in the history scenario, also run a retention pass under load")
	flag.IntVar(&f.retentionWorkers, "retention-workers", 200, "workers heartbeating every second during the retention pass")
	flag.DurationVar(&f.controlWindow, "control-window", time.Minute, "before the retention pass, measure the same load this long without it")
	flag.BoolVar(&f.skipReads, "skip-reads", false, "in the history scenario, skip the read endpoints, dispatch and verify (to iterate on the retention pass)")
	flag.BoolVar(&f.webhooks.run, "webhooks", false, "also measure dispatch with a webhook subscription whose receiver answers at once, then after -webhook-delay")
	flag.BoolVar(&f.webhooks.only, "webhooks-only", false, "measure only the webhook scenario")
	flag.DurationVar(&f.webhooks.delay, "webhook-delay", 30*time.Second, "how long the slow webhook receiver takes to answer each request")
	flag.DurationVar(&f.webhooks.window, "webhook-window", 45*time.Second, "how long each webhook phase measures latency (longer than -webhook-delay, so requests are held throughout)")
	flag.IntVar(&f.webhooks.jobs, "webhook-jobs", 2000, "zero-work jobs per webhook phase's job-cycle measurement")
	flag.Parse()
	f.newBinary = !f.oldBinary
	f.launch.inProcess = f.inProcess
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	switch {
	case f.gpus.traceOut != "":
		if err := writeTrace(f.gpus); err != nil {
			log.Fatal(err)
		}
		return
	case f.gpus.analyze != "" && f.gpus.teams.on:
		var rs []teamsResult
		for _, path := range strings.Split(f.gpus.analyze, ",") {
			r, err := analyzeTeams(f.gpus, path)
			if err != nil {
				log.Fatal(err)
			}
			rs = append(rs, r)
		}
		printTeams(f.gpus, rs)
		return
	case f.gpus.analyze != "":
		var rs []gpuResult
		for _, path := range strings.Split(f.gpus.analyze, ",") {
			r, err := analyzeRecords(f.gpus, path)
			if err != nil {
				log.Fatal(err)
			}
			rs = append(rs, r)
		}
		printGPUs(f.gpus, rs)
		return
	}
	only := f.launchOnly || f.gpus.only || f.dashboardOnly || f.webhooks.only

	limit := raiseFileLimit()
	if f.inProcess && uint64(2*f.workers+1000) > limit {
		// Both ends of every stream are then in this one process.
		log.Fatalf("-inprocess with %d workers needs about %d descriptors; RLIMIT_NOFILE is %d: lower -workers", f.workers, 2*f.workers+1000, limit)
	}
	if f.pprofAddr != "" {
		go func() { log.Println(http.ListenAndServe(f.pprofAddr, nil)) }()
	}
	defer startProfiles(f.mutexProfile, f.blockProfile, f.allocsProfile)()
	if f.orchProcs > 0 {
		orchProcs = f.orchProcs
		if f.inProcess {
			runtime.GOMAXPROCS(f.orchProcs)
		}
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	tmp, err := os.MkdirTemp("", "simpletuner-bench-")
	if err != nil {
		log.Fatal(err)
	}
	if f.keep {
		log.Printf("keeping %s", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	bin := f.orchBin
	if bin == "" {
		if bin, err = orchestratordPart(tmp); err != nil {
			log.Fatal(err)
		}
	}
	if f.history > 0 {
		var hrs []historyResult
		for _, name := range []string{"sqlite", "postgres"} {
			if f.stores != "both" && f.stores != name {
				continue
			}
			r, err := runHistory(f, name, bin, tmp)
			if err != nil {
				log.Fatalf("%s: %v", name, err)
			}
			hrs = append(hrs, r)
		}
		printHistory(f, hrs)
		return
	}

	var results []result
	var dash []dashResult
	for _, name := range []string{"sqlite", "postgres"} {
		if (only && !f.dashboardOnly) || (f.stores != "both" && f.stores != name) {
			continue
		}
		if !f.dashboardOnly {
			r, err := runStore(f, name, bin, tmp)
			if err != nil {
				pprof.StopCPUProfile()
				log.Fatalf("%s: %v", name, err)
			}
			results = append(results, r)
		}
		if f.dashboard || f.dashboardOnly {
			r, err := runDashboard(f, name, bin, tmp)
			if err != nil {
				pprof.StopCPUProfile()
				log.Fatalf("%s dashboard: %v", name, err)
			}
			dash = append(dash, r)
		}
	}
	var hooks []webhookResult
	for _, name := range []string{"sqlite", "postgres"} {
		if (!f.webhooks.run && !f.webhooks.only) || (f.stores != "both" && f.stores != name) {
			continue
		}
		r, err := runWebhooks(f, name, bin, tmp)
		if err != nil {
			log.Fatalf("%s webhooks: %v", name, err)
		}
		hooks = append(hooks, r)
	}
	var launches []launchResult
	if f.launch.modes != "" && (!only || f.launchOnly) {
		if launches, err = runLaunch(f.launch, bin, tmp); err != nil {
			log.Fatal(err)
		}
	}
	var gpus []gpuResult
	var teams []teamsResult
	if f.gpus.run && (!only || f.gpus.only) && f.gpus.teams.on {
		if teams, err = runTeams(f.gpus, bin, tmp); err != nil {
			log.Fatalf("teams: %v", err)
		}
	} else if f.gpus.run && (!only || f.gpus.only) {
		r, err := runGPUs(f.gpus, bin, tmp)
		if err != nil {
			log.Fatalf("gpus: %v", err)
		}
		gpus = append(gpus, r)
	}
	if len(results) > 0 {
		printTable(f, results)
	}
	printDashboard(dash)
	printWebhooks(f, hooks)
	if len(launches) > 0 {
		printLaunch(f.launch, launches)
	}
	printGPUs(f.gpus, gpus)
	printTeams(f.gpus, teams)
}

// raiseFileLimit lifts RLIMIT_NOFILE to its hard limit; the orchestrator child
// inherits it. 10,000 streams need about 10,000 descriptors on each side.
func raiseFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Fatal(err)
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Fatal(err)
	}
	log.Printf("RLIMIT_NOFILE %d", rl.Cur)
	return rl.Cur
}

// result is what one store measured.
type result struct {
	store       string
	latency     dist
	cyclesPerS  float64
	cycleTime   time.Duration
	cycleCPU    string // CPU seconds by process during the cycles
	hbCPU       string // and during the heartbeat window
	pgWaits     string // PostgreSQL wait events during the cycles
	createTime  time.Duration
	connectTime time.Duration
	rssBase     int64 // after the small fleet's measurements
	rssFleet    int64 // peak with the full fleet connected
	benchRSS    int64
	heartbeat   dist
	fleetLat    dist
	errors      int64
	// loadBefore and loadAfter are /proc/loadavg's 1-minute figure: anything
	// else running on the machine skews the numbers.
	loadBefore, loadAfter string
}

func runStore(f flags, name, bin, tmp string) (r result, err error) {
	r.store = name
	dir, err := os.MkdirTemp(tmp, name+"-")
	if err != nil {
		return r, err
	}
	dbURL := ""
	if name == "postgres" {
		log.Printf("postgres: starting a throwaway cluster")
		u, stop, err := pgtest.StartCluster()
		if err != nil {
			return r, err
		}
		defer stop()
		dbURL = u
	}
	r.loadBefore = loadAvg()
	defer func() { r.loadAfter = loadAvg() }()
	o, err := startOrch(bin, dir, dbURL, f.inProcess)
	if err != nil {
		return r, err
	}
	defer o.stop()
	c := newClient(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	log.Printf("%s: orchestrator at %s; %d workers for latency and cycles", name, o.url, f.cycleWorkers)
	small, err := c.createWorkers(ctx, 0, f.cycleWorkers, f.createPar)
	if err != nil {
		return r, err
	}
	if err := connectAll(ctx, small, f.connectPar); err != nil {
		return r, err
	}
	if r.latency, err = c.latency(ctx, f.samples, 2*time.Minute); err != nil {
		return r, err
	}
	log.Printf("%s: submit→job_submit p50/p90/p99/max %s", name, r.latency)
	orchPID := 0
	if o.cmd != nil {
		orchPID = o.cmd.Process.Pid
	}
	cpu0 := sampleCPU(orchPID)
	var waits <-chan string
	waitCtx, stopWaits := context.WithCancel(ctx)
	if dbURL != "" {
		waits = pgWaits(waitCtx, dbURL)
	}
	r.cyclesPerS, r.cycleTime, err = c.cycles(ctx, f.jobs, f.submitters, f.backlog)
	stopWaits()
	if err != nil {
		return r, err
	}
	r.cycleCPU = sampleCPU(orchPID).since(cpu0)
	if waits != nil {
		r.pgWaits = <-waits
		log.Printf("%s: during the cycles, %s", name, r.pgWaits)
	}
	log.Printf("%s: %d job cycles in %s: %.0f/s; CPU: %s", name, f.jobs, r.cycleTime.Round(time.Millisecond), r.cyclesPerS, r.cycleCPU)
	r.rssBase, _ = o.rss()

	if more := f.workers - f.cycleWorkers; more > 0 {
		log.Printf("%s: creating %d more workers (%d concurrent)", name, more, f.createPar)
		start := time.Now()
		big, err := c.createWorkers(ctx, f.cycleWorkers, more, f.createPar)
		if err != nil {
			return r, err
		}
		r.createTime = time.Since(start)
		log.Printf("%s: created in %s; registering and connecting (%d concurrent)", name, r.createTime.Round(time.Millisecond), f.connectPar)
		start = time.Now()
		if err := connectAll(ctx, big, f.connectPar); err != nil {
			return r, err
		}
		r.connectTime = time.Since(start)
		log.Printf("%s: %d streams open after %s; measuring heartbeats for %s", name, f.workers, r.connectTime.Round(time.Millisecond), f.hbWindow)
		cpu0 := sampleCPU(orchPID)
		waitCtx, stopWaits := context.WithCancel(ctx)
		if dbURL != "" {
			waits = pgWaits(waitCtx, dbURL)
		}
		c.hbOn.Store(true)
		end := time.Now().Add(f.hbWindow)
		for time.Now().Before(end) {
			if v, err := o.rss(); err == nil {
				r.rssFleet = max(r.rssFleet, v)
			}
			time.Sleep(500 * time.Millisecond)
		}
		c.hbOn.Store(false)
		stopWaits()
		r.hbCPU = sampleCPU(orchPID).since(cpu0)
		if waits != nil {
			log.Printf("%s: during the heartbeat window, %s", name, <-waits)
		}
		c.hbMu.Lock()
		r.heartbeat = summarize(c.hb)
		c.hbMu.Unlock()
		log.Printf("%s: heartbeat p50/p90/p99/max %s; orchestrator RSS %s", name, r.heartbeat, mib(r.rssFleet))
		for sec, n := range c.hbSlow {
			log.Printf("%s: %d heartbeats over 100 ms started at %s", name, n, sec.Format("15:04:05"))
		}
		if r.fleetLat, err = c.latency(ctx, f.fleetSamples, time.Minute); err != nil {
			return r, err
		}
		if v, err := o.rss(); err == nil {
			r.rssFleet = max(r.rssFleet, v)
		}
		log.Printf("%s: with %d idle workers, submit→job_submit p50/p90/p99/max %s", name, f.workers, r.fleetLat)
		r.benchRSS, _ = readRSS(os.Getpid())
	}
	r.errors = c.errors.Load()
	log.Printf("%s: stopping", name)
	cancel()
	return r, nil
}

// connectAll registers each worker, opens its stream and starts its heartbeats.
func connectAll(ctx context.Context, ws []*worker, par int) error {
	return parallel(len(ws), par, func(i int) error {
		w := ws[i]
		if err := w.register(ctx); err != nil {
			return err
		}
		if err := w.connect(ctx); err != nil {
			return err
		}
		go w.heartbeats(ctx)
		return nil
	})
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(data))[0]
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func printTable(f flags, rs []result) {
	b := newResultTable("measurement", rs, func(r result) string { return r.store })
	row := b.row
	row(fmt.Sprintf("submit → job_submit, %d idle workers, p50 / p90 / p99 / max", f.cycleWorkers), "p99 < 50 ms",
		func(r result) string { return r.latency.String() })
	row(fmt.Sprintf("job cycles/s, %d workers, %d zero-work jobs, %d submitters", f.cycleWorkers, f.jobs, f.submitters), "≥ 1,000/s (embedded)",
		func(r result) string {
			return fmt.Sprintf("%.0f/s (%s)", r.cyclesPerS, r.cycleTime.Round(time.Millisecond))
		})
	row("CPU used during the job cycles", "—", func(r result) string { return r.cycleCPU })
	if f.workers > f.cycleWorkers {
		row(fmt.Sprintf("orchestrator RSS, %d connected idle workers (peak)", f.workers), "< 1 GiB",
			func(r result) string { return mib(r.rssFleet) })
		row(fmt.Sprintf("heartbeat round trip, %d workers, %s window, p50 / p90 / p99 / max", f.workers, f.hbWindow), "p99 < 100 ms",
			func(r result) string { return r.heartbeat.String() })
		row("CPU used during the heartbeat window", "—", func(r result) string { return r.hbCPU })
		row(fmt.Sprintf("submit → job_submit, %d idle workers, p50 / p90 / p99 / max", f.workers), "p99 < 50 ms",
			func(r result) string { return r.fleetLat.String() })
		row(fmt.Sprintf("orchestrator RSS with %d workers (after latency and cycles)", f.cycleWorkers), "—",
			func(r result) string { return mib(r.rssBase) })
		row(fmt.Sprintf("create %d workers (admin API, %d concurrent)", f.workers-f.cycleWorkers, f.createPar), "—",
			func(r result) string { return r.createTime.Round(time.Millisecond).String() })
		row(fmt.Sprintf("register + open stream, %d workers (%d concurrent)", f.workers-f.cycleWorkers, f.connectPar), "—",
			func(r result) string { return r.connectTime.Round(time.Millisecond).String() })
		row("bench process RSS (simulated workers)", "—", func(r result) string { return mib(r.benchRSS) })
	}
	row("request errors seen by simulated workers", "0", func(r result) string { return fmt.Sprint(r.errors) })
	row("1-minute load average before / after (2 CPUs)", "—", func(r result) string { return r.loadBefore + " / " + r.loadAfter })
	fmt.Printf("\nsimpletuner-orchestratord benchmark, %s, %s, %d CPUs, %s%s\n\n%s",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.Version(), runtime.NumCPU(), strings.Join(os.Args[1:], " "),
		map[bool]string{true: " (in-process)", false: ""}[f.inProcess], b.String())
}
