package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The two-team trace (-gpu-teams) asks what fair share and preemption do
// when one team floods the fleet: team "flood" submits a sweep at t = 0
// that fills every GPU two and a half times over, team "late" submits its
// jobs 6 s later, when the flood holds every GPU; both have a share of 1
// (50/50). The same trace runs on the orchestrator with teams and
// preemption, with teams and no preemption, and with no teams at all
// (today's scheduler: one queue, first come, first served), and through
// Slurm (test/bench/slurm/run.sh with TEAMS=1). The analyzer reports the
// late team's wait for its first GPU, each team's part of the GPU time
// while both have work, the preemptions and the makespan.

const (
	teamFlood = "flood"
	teamLate  = "late"
)

// teamsFlags are the two-team trace's flags.
type teamsFlags struct {
	on    bool   // replay (or write, or judge) the two-team trace instead
	modes string // orchestrator configurations to run, comma-separated
	// checkpoint is how often, in seconds of its own progress, a job of the
	// trace keeps a checkpoint: a preempted attempt loses what it ran since
	// its last one.
	checkpoint float64
	minRuntime time.Duration // [jobs] min_runtime
	grace      time.Duration // [jobs] cancel_grace
}

// makeTeamsTrace draws the two-team trace for fleetGPUs GPUs. Both teams
// ask for 1/2/4/8 GPUs at 30/30/25/15 %; the flood's jobs run 20 to 30 s
// and add up to 2.5 fleets × 25 s, the late team's run 10 to 20 s and add
// up to half the fleet for 40 s. Each team submits its jobs 50 ms apart.
// scale stretches every time.
func makeTeamsTrace(seed uint64, fleetGPUs int, scale float64) []traceJob {
	r := rand.New(rand.NewPCG(seed, 0x7ea5))
	fleet := float64(fleetGPUs)
	out := appendTeamJobs(nil, r, teamFlood, 0, 2.5*fleet*25, 20, 30, scale)
	return appendTeamJobs(out, r, teamLate, 6, 0.5*fleet*40, 10, 20, scale)
}

// appendTeamJobs appends a team's jobs, submitted from at seconds on,
// until they add up to work GPU-seconds.
func appendTeamJobs(out []traceJob, r *rand.Rand, team string, at, work, shortest, longest, scale float64) []traceJob {
	for k, sum := 0, 0.0; sum < work; k++ {
		gpus := 8
		switch u := r.Float64(); {
		case u < .30:
			gpus = 1
		case u < .60:
			gpus = 2
		case u < .85:
			gpus = 4
		}
		seconds := shortest + (longest-shortest)*r.Float64()
		out = append(out, traceJob{ID: len(out), At: round3((at + .05*float64(k)) * scale), GPUs: gpus,
			Seconds: round3(seconds * scale), Team: team})
		sum += float64(gpus) * seconds
	}
	return out
}

// teamsMode is one orchestrator configuration the trace runs on.
type teamsMode struct {
	name  string
	label string
	teams bool   // configure the two teams and give each its own token
	jobs  string // [jobs] preemption
}

var teamsModes = []teamsMode{
	{"preempt", "orchestratord, teams 50/50, preemption on", true, "on"},
	{"no-preempt", "orchestratord, teams 50/50, preemption off", true, "off"},
	{"one-team", "orchestratord, no teams (one queue, FIFO)", false, "off"},
}

// config is the orchestrator's TOML for the mode: the timers scaled down to
// the trace's seconds (min_runtime, cancel_grace); a half-life of an hour,
// against a trace of two minutes, leaves usage as good as undecayed, as the
// default of 7 days does over a day of hour-long jobs.
func (m teamsMode) config(tf teamsFlags) string {
	s := fmt.Sprintf("\n[jobs]\npreemption = %q\nmin_runtime = \"%s\"\ncancel_grace = \"%s\"\nusage_half_life = \"1h\"\n",
		m.jobs, tomlSeconds(tf.minRuntime), tomlSeconds(tf.grace))
	if m.teams {
		for _, t := range []string{teamFlood, teamLate} {
			s += fmt.Sprintf("[[teams]]\nname = %q\nshare = 1\n", t)
		}
	}
	return s
}

// tomlSeconds writes d in whole seconds, which every duration key takes.
func tomlSeconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
}

// runTeams replays the two-team trace on real workerd processes once per
// configured mode.
func runTeams(gf gpuFlags, orchBin, tmp string) ([]teamsResult, error) {
	var out []teamsResult
	for _, name := range strings.Split(gf.teams.modes, ",") {
		i := slices.IndexFunc(teamsModes, func(m teamsMode) bool { return m.name == name })
		if i < 0 {
			return out, fmt.Errorf("-gpu-teams-modes: no mode %q (preempt, no-preempt, one-team)", name)
		}
		r, err := runTeamsMode(gf, teamsModes[i], orchBin, tmp)
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// teamsRun is one mode's replay in progress.
type teamsRun struct {
	c      *client
	stamps *stampBox
	trace  []traceJob
	tokens map[string]string // team → its token
	ids    []string
	start  time.Time
	submit []time.Time
}

func runTeamsMode(gf gpuFlags, m teamsMode, orchBin, tmp string) (teamsResult, error) {
	fleet := gf.workers * gf.perHost
	trace := makeTeamsTrace(gf.seed, fleet, gf.scale)
	stampBin, err := stampPart(tmp)
	if err != nil {
		return teamsResult{}, err
	}
	workerdBin, err := workerdPart(tmp)
	if err != nil {
		return teamsResult{}, err
	}
	dir, err := os.MkdirTemp(tmp, "teams-"+m.name+"-")
	if err != nil {
		return teamsResult{}, err
	}
	if err := os.Chmod(tmp, 0o711); err != nil {
		return teamsResult{}, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return teamsResult{}, err
	}
	o, err := startOrchWith(orchBin, dir, "", false, m.config(gf.teams))
	if err != nil {
		return teamsResult{}, err
	}
	defer o.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := &teamsRun{c: newClient(o), trace: trace}
	var sock string
	if run.stamps, sock, err = listenStamps(ctx, filepath.Join(dir, "stamp.sock")); err != nil {
		return teamsResult{}, err
	}
	run.stamps.mu.Lock()
	run.stamps.kept = func(id string) float64 { return run.kept(id, gf.teams.checkpoint) }
	run.stamps.mu.Unlock()
	if run.tokens, err = run.c.teamTokens(ctx, m.teams); err != nil {
		return teamsResult{}, err
	}
	stopFleet, err := startGPUFleet(ctx, run.c, gf, dir, o.url, workerdBin, stampBin, sock)
	defer stopFleet()
	if err != nil {
		return teamsResult{}, err
	}
	load := loadAvg()
	log.Printf("teams %s: %d workers × %d GPUs idle; replaying %d jobs", m.name, gf.workers, gf.perHost, len(trace))
	if err := run.replay(ctx, gf.teams.checkpoint); err != nil {
		return teamsResult{}, err
	}
	if err := run.c.waitCompleted(ctx, len(trace)); err != nil {
		return teamsResult{}, err
	}
	recs, err := run.records(ctx, m.teams)
	if err != nil {
		return teamsResult{}, err
	}
	if err := writeRecords(filepath.Join(tmp, "teams-"+m.name+".json"), recs); err != nil {
		return teamsResult{}, err
	}
	res, err := judgeTeams(m.label, trace, recs, fleet)
	res.load = load
	return res, err
}

// teamTokens makes one token per team through the admin API: with teams,
// each in its team; without, both in the default team, as tokens were
// before teams.
func (c *client) teamTokens(ctx context.Context, teams bool) (map[string]string, error) {
	out := map[string]string{}
	for _, t := range []string{teamFlood, teamLate} {
		body := map[string]any{"name": t, "scopes": []string{"queue.submit", "queue.view"}}
		if teams {
			body["team"] = t
		}
		var r struct {
			Token string `json:"token"`
			Team  string `json:"team"`
		}
		if err := c.call(ctx, "POST", "/api/admin/tokens", c.adminHdr(), body, &r, 201); err != nil {
			return nil, err
		}
		if teams && r.Team != t {
			log.Printf("teams: the token made for team %q is in team %q", t, r.Team)
		}
		out[t] = r.Token
	}
	return out, nil
}

// replay submits each job at its time with its team's token.
func (r *teamsRun) replay(ctx context.Context, checkpoint float64) error {
	r.start = time.Now()
	r.ids = make([]string, len(r.trace))
	r.submit = make([]time.Time, len(r.trace))
	for i, j := range r.trace {
		time.Sleep(time.Until(r.start.Add(time.Duration(j.At * float64(time.Second)))))
		r.submit[i] = time.Now()
		var out struct {
			JobID string `json:"job_id"`
		}
		body := map[string]any{"config": map[string]any{"bench_seconds": j.Seconds, "bench_checkpoint_seconds": checkpoint},
			"target": "worker", "max_retries": 0, "gpu_count": j.GPUs}
		hdr := map[string]string{"Authorization": "Bearer " + r.tokens[j.Team]}
		if err := r.c.call(ctx, "POST", "/api/queue/submit", hdr, body, &out, 201); err != nil {
			return err
		}
		r.ids[i] = out.JobID
	}
	return nil
}

// kept is what the job's earlier attempts kept in checkpoints: of each
// stopped attempt's run, the whole checkpoint intervals.
func (r *teamsRun) kept(id string, checkpoint float64) float64 {
	r.stamps.mu.Lock()
	defer r.stamps.mu.Unlock()
	starts, stops := r.stamps.all[id], r.stamps.all[id+":stop"]
	sum := 0.0
	for i := 0; i < len(stops) && i < len(starts); i++ {
		sum += math.Floor(stops[i].Sub(starts[i]).Seconds()/checkpoint) * checkpoint
	}
	return sum
}

// records reads each job's attempts from the API and its runs from the
// stamps, in seconds since the replay began.
func (r *teamsRun) records(ctx context.Context, teams bool) ([]jobRecord, error) {
	var recs []jobRecord
	elsewhere := 0 // jobs not in their token's team
	for i, id := range r.ids {
		j := r.trace[i]
		team, preempted, err := r.c.checkAttempts(ctx, id, j)
		if err != nil {
			return nil, err
		}
		if want := map[bool]string{true: j.Team, false: "default"}[teams]; team != want {
			elsewhere++
		}
		end, err := r.stamps.wait(id+":end", time.Second)
		if err != nil {
			return nil, err
		}
		rec := jobRecord{ID: j.ID, GPUs: j.GPUs, Team: j.Team, Submit: r.since(r.submit[i]), End: r.since(end), Preempted: preempted}
		r.stamps.mu.Lock()
		starts, stops := r.stamps.all[id], r.stamps.all[id+":stop"]
		r.stamps.mu.Unlock()
		if len(starts) != len(stops)+1 {
			return nil, fmt.Errorf("job %s (trace %d): %d starts and %d stops", id, j.ID, len(starts), len(stops))
		}
		rec.Start = r.since(starts[0])
		if len(stops) > 0 {
			ends := append(slices.Clone(stops), end)
			for k, s := range starts {
				rec.Runs = append(rec.Runs, jobSpan{r.since(s), r.since(ends[k])})
			}
		}
		if len(stops) != preempted {
			log.Printf("teams: job %s (trace %d): %d attempts preempted, %d stopped", id, j.ID, preempted, len(stops))
		}
		recs = append(recs, rec)
	}
	if elsewhere > 0 {
		log.Printf("teams: %d of %d jobs are not in their token's team (GET /api/queue/{id} \"team\")", elsewhere, len(recs))
	}
	return recs, nil
}

func (r *teamsRun) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

// checkAttempts checks that every attempt of the job held as many GPUs as
// it asked for and that all but the last were preempted; it returns the
// job's team and the number preempted.
func (c *client) checkAttempts(ctx context.Context, id string, tj traceJob) (string, int, error) {
	var j struct {
		Team     string `json:"team"`
		Attempts []struct {
			GPUs    []int   `json:"gpus"`
			Outcome *string `json:"outcome"`
		} `json:"attempts"`
	}
	if err := c.call(ctx, "GET", "/api/queue/"+id, c.adminHdr(), nil, &j, 200); err != nil {
		return "", 0, err
	}
	preempted := 0
	for k, a := range j.Attempts {
		outcome := ""
		if a.Outcome != nil {
			outcome = *a.Outcome
		}
		if len(a.GPUs) != tj.GPUs {
			return "", 0, fmt.Errorf("job %s (trace %d): attempt %d held %d GPUs, want %d", id, tj.ID, k+1, len(a.GPUs), tj.GPUs)
		}
		last := k == len(j.Attempts)-1
		if (last && outcome != "completed") || (!last && outcome != "preempted") {
			return "", 0, fmt.Errorf("job %s (trace %d): attempt %d of %d ended %q", id, tj.ID, k+1, len(j.Attempts), outcome)
		}
		if outcome == "preempted" {
			preempted++
		}
	}
	return j.Team, preempted, nil
}

func writeRecords(path string, recs []jobRecord) error {
	data, err := json.MarshalIndent(recs, "", " ")
	if err != nil {
		return err
	}
	log.Printf("records in %s", path)
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// teamsResult is the judgement of one run of the two-team trace.
type teamsResult struct {
	gpuResult
	lateWait     float64 // the late team's first start − its first submit
	lateWaitMean float64 // the mean of its jobs' waits
	busy         float64 // seconds during which both teams had work queued or running
	busyGPUs     map[string]float64
	preemptions  int
	heldGPUs     float64 // GPU-seconds held, preempted runs included
	series       []map[string]float64
}

// judgeTeams judges records of the two-team trace.
func judgeTeams(name string, trace []traceJob, recs []jobRecord, fleetGPUs int) (teamsResult, error) {
	base, err := judge(name, trace, recs, fleetGPUs)
	res := teamsResult{gpuResult: base, busyGPUs: map[string]float64{}}
	if err != nil {
		return res, err
	}
	firstSubmit, firstStart := math.Inf(1), math.Inf(1)
	first, last := math.Inf(1), 0.0
	lateJobs := 0
	for _, r := range recs {
		res.preemptions += r.Preempted
		first, last = min(first, r.Submit), max(last, r.End)
		for _, s := range r.runs() {
			res.heldGPUs += float64(r.GPUs) * (s.End - s.Start)
		}
		if r.Team == teamLate {
			firstSubmit, firstStart = min(firstSubmit, r.Submit), min(firstStart, r.Start)
			res.lateWaitMean += r.Start - r.Submit
			lateJobs++
		}
	}
	res.lateWait = firstStart - firstSubmit
	res.lateWaitMean /= float64(lateJobs)
	// Between consecutive moments at which anything changes, who has work
	// and who holds how many GPUs is constant.
	cuts := []float64{}
	for _, r := range recs {
		cuts = append(cuts, r.Submit, r.End)
		for _, s := range r.runs() {
			cuts = append(cuts, s.Start, s.End)
		}
	}
	for w := range 10 {
		cuts = append(cuts, first+float64(w)*(last-first)/10)
	}
	slices.Sort(cuts)
	res.series = make([]map[string]float64, 10)
	for i := range res.series {
		res.series[i] = map[string]float64{}
	}
	for i := 1; i < len(cuts); i++ {
		a, b := cuts[i-1], cuts[i]
		if b <= a {
			continue
		}
		mid := (a + b) / 2
		held, working := holding(recs, mid)
		window := min(9, int(10*(mid-first)/(last-first)))
		for team, g := range held {
			res.series[window][team] += g * (b - a) / (float64(fleetGPUs) * (last - first) / 10)
		}
		if working[teamFlood] && working[teamLate] {
			res.busy += b - a
			for team, g := range held {
				res.busyGPUs[team] += g * (b - a)
			}
		}
	}
	return res, nil
}

// holding says how many GPUs each team holds at t, and which teams have
// work queued or running then.
func holding(recs []jobRecord, t float64) (map[string]float64, map[string]bool) {
	held, working := map[string]float64{}, map[string]bool{}
	for _, r := range recs {
		if r.Submit <= t && t < r.End {
			working[r.Team] = true
		}
		for _, s := range r.runs() {
			if s.Start <= t && t < s.End {
				held[r.Team] += float64(r.GPUs)
			}
		}
	}
	return held, working
}

// analyzeTeams judges a run's records of the two-team trace, from the file
// path; the row is named after the file.
func analyzeTeams(gf gpuFlags, path string) (teamsResult, error) {
	recs, err := readRecords(path)
	if err != nil {
		return teamsResult{}, err
	}
	trace := makeTeamsTrace(gf.seed, gf.workers*gf.perHost, gf.scale)
	return judgeTeams(strings.TrimSuffix(filepath.Base(path), ".json"), trace, recs, gf.workers*gf.perHost)
}

// writeTeamsTrace writes the two-team trace as JSON for another scheduler.
func writeTeamsTrace(gf gpuFlags) error {
	data, err := json.MarshalIndent(makeTeamsTrace(gf.seed, gf.workers*gf.perHost, gf.scale), "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(gf.traceOut, append(data, '\n'), 0o644)
}

func printTeams(gf gpuFlags, rs []teamsResult) {
	if len(rs) == 0 {
		return
	}
	trace := makeTeamsTrace(gf.seed, gf.workers*gf.perHost, gf.scale)
	work := map[string]float64{}
	jobs := map[string]int{}
	for _, j := range trace {
		work[j.Team] += float64(j.GPUs) * j.Seconds
		jobs[j.Team]++
	}
	timers := "" // another scheduler's are its own
	if gf.analyze == "" {
		timers = fmt.Sprintf("; min_runtime %s, cancel_grace %s", gf.teams.minRuntime, gf.teams.grace)
	}
	fmt.Printf("\nteams: %d workers × %d GPUs; team flood submits %d jobs (%.0f GPU-s) at 0 s, team late %d jobs (%.0f GPU-s) from %.0f s; shares 50/50 (seed %d, scale %g); a job keeps a checkpoint every %g s of its run%s\n\n",
		gf.workers, gf.perHost, jobs[teamFlood], work[teamFlood], jobs[teamLate], work[teamLate], 6*gf.scale, gf.seed, gf.scale,
		gf.teams.checkpoint, timers)
	fmt.Println("| scheduler | late team's wait for its first GPU (mean over its jobs) | GPU-hours while both teams have work: flood / late (part of the GPUs used; shares 50 / 50 %) | GPUs held then ÷ fleet | preemptions | GPU-time redone (held − work) | ideal ÷ makespan (makespan, ideal) | load before |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		used := r.busyGPUs[teamFlood] + r.busyGPUs[teamLate]
		fmt.Printf("| %s | %.1f s (%.1f s) | %.3f / %.3f GPU-h (%.0f / %.0f %%) over %.0f s | %.1f %% | %d | %.0f GPU-s (%.1f %%) | %.1f %% (%.1f s, %.1f s) | %s |\n",
			r.scheduler, r.lateWait, r.lateWaitMean, r.busyGPUs[teamFlood]/3600, r.busyGPUs[teamLate]/3600,
			100*r.busyGPUs[teamFlood]/used, 100*r.busyGPUs[teamLate]/used, r.busy, 100*used/(float64(gf.workers*gf.perHost)*r.busy), r.preemptions,
			r.heldGPUs-r.workGPUs, 100*(r.heldGPUs-r.workGPUs)/r.workGPUs, 100*r.idealSpan/r.makespan, r.makespan, r.idealSpan, r.load)
	}
	fmt.Println("\nGPU time over the run, per tenth of each run's makespan: part of the fleet's GPUs held by flood / late")
	fmt.Println()
	head, rule := "| part of the makespan |", "|---|"
	for _, r := range rs {
		head += " " + r.scheduler + " |"
		rule += "---|"
	}
	fmt.Println(head)
	fmt.Println(rule)
	for w := range 10 {
		row := fmt.Sprintf("| %d–%d %% |", 10*w, 10*w+10)
		for _, r := range rs {
			row += fmt.Sprintf(" %.0f / %.0f %% |", 100*r.series[w][teamFlood], 100*r.series[w][teamLate])
		}
		fmt.Println(row)
	}
}
