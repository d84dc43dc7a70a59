package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// Job isolation, checked on real processes: workerd as root (as CI runs the
// tests) starts each job as a uid of its own in a cgroup of its own.

// needRoot skips where workerd cannot switch users: only root makes the
// walls between uids real.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("job isolation by uid needs workerd to run as root (CI runs the tests as root)")
	}
}

// isolationOf is the isolation a worker announced at registration.
func isolationOf(o *Orch, workerID string) string {
	caps, _ := o.Worker(workerID)["capabilities"].(map[string]any)
	s, _ := caps["isolation"].(string)
	return s
}

// needCgroups fails when a root workerd did not get a cgroup per job: the
// development and CI machines have a writable cgroup v2, so the cgroup path is
// tested there, not skipped.
func needCgroups(t *testing.T, o *Orch, w *Wrk) {
	t.Helper()
	if got := isolationOf(o, w.ID); !strings.HasPrefix(got, "cgroup") {
		t.Fatalf("workerd runs as root but isolates jobs with %q, not a cgroup per job:\n%s", got, w.P.Output())
	}
}

// readPid waits for a job to write its pid into file.
func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	Eventually(t, 30*time.Second, file, func() bool {
		b, _ := os.ReadFile(file)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	return pid
}

// jobCgroup waits for workerd to log the start of a job's attempt (the job
// may run before the line is written) and returns the cgroup it names, ""
// without one.
func jobCgroup(t *testing.T, w *Wrk, jobID string) string {
	t.Helper()
	re := regexp.MustCompile(`"training started","job_id":"` + jobID + `".*?"cgroup":"([^"]*)"`)
	var m []string
	Eventually(t, 30*time.Second, "workerd to log the start of "+jobID, func() bool {
		m = re.FindStringSubmatch(w.P.Output())
		return m != nil
	})
	return m[1]
}

// A job that ignores SIGTERM and leaves a child in a session of its own that
// ignores everything: after a cancel nothing of it is left, and its cgroup is
// gone.
func TestCancelLeavesNothingOfTheJob(t *testing.T) {
	needRoot(t)
	t.Parallel()
	o := StartOrchestrator(t, "")
	script := `trap '' TERM INT HUP
setsid sh -c 'trap "" TERM INT HUP; echo $$ > escaped.pid; exec sleep 300' &
echo $$ > leader.pid
sleep 300`
	w := o.StartWorker(WorkerSpec{Name: "walls", Persistent: true, Command: []string{"/bin/sh", "-c", script}})
	needCgroups(t, o, w)
	id := o.Submit(map[string]any{}, nil)
	dir := filepath.Join(w.Dir, "state", "jobs", id)
	leader, escaped := readPid(t, filepath.Join(dir, "leader.pid")), readPid(t, filepath.Join(dir, "escaped.pid"))
	if !testutil.Running(leader) || !testutil.Running(escaped) {
		t.Fatal("the job is not running")
	}
	cg := jobCgroup(t, w, id)
	if cg == "" {
		t.Fatalf("no cgroup logged for %s", id)
	}

	if code, _ := o.Do("POST", "/api/queue/"+id+"/cancel", nil); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	o.WaitJob(id, "cancelled", 20*time.Second)
	for _, pid := range []int{leader, escaped} {
		if testutil.Running(pid) {
			t.Errorf("pid %d of the cancelled job still runs", pid)
		}
	}
	if procs := JobProcs(id); len(procs) > 0 {
		t.Errorf("processes of the cancelled job are left: %v", procs)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the job's cgroup %s is still there (%v)", cg, err)
	}
}

// A job cannot read the worker's token through any channel: the token file,
// workerd's configuration, the systemd credential directory, workerd's
// environment, or workerd's command line (where --worker-token is blanked).
func TestJobCannotReadTheWorkersSecrets(t *testing.T) {
	needRoot(t)
	t.Parallel()
	o := StartOrchestrator(t, "")
	id, token := o.CreateWorker("secrets", true, nil)
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(creds, "worker-token"), []byte(token+"\n"), 0o600)

	// The job finds workerd's configuration (and the token file beside it)
	// through workerd's command line, as a curious job would. It prints its
	// environment but for its own upload token: workerd echoes job output
	// to its log, which the harness scans for every token it has seen.
	script := `probe() { if cat "$1" > /dev/null 2>&1; then echo "READABLE $1"; else echo "DENIED $1"; fi; }
conf=$(tr '\0' '\n' < /proc/$PPID/cmdline | sed -n '/^--config$/{n;p;}')
probe "$conf"
probe "$(dirname "$conf")/token"
probe "$CRED_DIR/worker-token"
if ls "$CRED_DIR" > /dev/null 2>&1; then echo "READABLE $CRED_DIR"; else echo "DENIED $CRED_DIR"; fi
probe /proc/$PPID/environ
echo "cmdline: $(tr '\0' ' ' < /proc/$PPID/cmdline)"
echo "environment:"; env | grep -v '^SIMPLETUNER_UPLOAD_TOKEN='`
	o.StartWorkerFor(id, token, WorkerSpec{Name: "secrets", Persistent: true,
		Command: []string{"/bin/sh", "-c", script},
		JobTOML: fmt.Sprintf("env = { CRED_DIR = %q }\n", creds),
		Args:    []string{"--worker-token", token},
		Env:     []string{"CREDENTIALS_DIRECTORY=" + creds, "SIMPLETUNER_WORKER_TOKEN=" + token},
	})
	job := o.Submit(map[string]any{}, nil)
	o.WaitJob(job, "completed", 20*time.Second)
	logs := o.Logs(job)
	if strings.Count(logs, "DENIED ") != 5 || strings.Contains(logs, "READABLE") {
		t.Errorf("the job could read what it must not:\n%s", logs)
	}
	if !strings.Contains(logs, "--worker-token") || strings.Contains(logs, token[:12]) {
		t.Errorf("the job saw the worker token:\n%s", logs)
	}
}

// A job that outlives the start of the next job on the same machine cannot
// read that job's environment, directory or config.
func TestJobsCannotSeeEachOther(t *testing.T) {
	needRoot(t)
	t.Parallel()
	o := StartOrchestrator(t, "")
	targets := t.TempDir()
	OpenToJobs(t, targets)
	os.Chmod(targets, 0o777)
	spy := fmt.Sprintf(`until [ -s %[1]s/targets ]; do sleep 0.05; done
while read -r path; do
	if [ -d "$path" ]; then read_it="ls"; else read_it="cat"; fi
	if $read_it "$path" > /dev/null 2>&1; then echo "READABLE $path"; $read_it "$path"; else echo "DENIED $path"; fi
done < %[1]s/targets`, targets)
	o.StartWorker(WorkerSpec{Name: "spy", Persistent: true, Labels: map[string]string{"role": "spy"}, Command: []string{"/bin/sh", "-c", spy}})
	b := o.StartWorker(WorkerSpec{Name: "victim", Persistent: true, Labels: map[string]string{"role": "victim"},
		Command: []string{"/bin/sh", "-c", `echo $$ > pid; exec sleep 300`}})

	spyJob := o.Submit(map[string]any{}, map[string]any{"worker_labels": map[string]string{"role": "spy"}})
	victim := o.Submit(map[string]any{"secret_setting": "victim-config"}, map[string]any{
		"worker_labels": map[string]string{"role": "victim"}, "hf_token": "hf_victim_secret"})
	dir := filepath.Join(b.Dir, "state", "jobs", victim)
	pid := readPid(t, filepath.Join(dir, "pid"))
	list := strings.Join([]string{
		fmt.Sprintf("/proc/%d/environ", pid),
		filepath.Join(dir, "config.json"),
		dir,
	}, "\n") + "\n"
	os.WriteFile(filepath.Join(targets, "targets"), []byte(list), 0o644)
	o.WaitJob(spyJob, "completed", 20*time.Second)
	logs := o.Logs(spyJob)
	if strings.Count(logs, "DENIED ") != 3 || strings.Contains(logs, "hf_victim_secret") || strings.Contains(logs, "victim-config") {
		t.Errorf("one job read another's environment or files:\n%s", logs)
	}
	o.Do("POST", "/api/queue/"+victim+"/cancel", nil)
}

// Every job starts with SIGTERM, SIGINT and SIGHUP at their defaults, in
// every isolation mode, so a cancel reaches a trainer that saves a checkpoint.
func TestJobStartsWithDefaultSignals(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"auto", "process-group"} {
		t.Run(mode, func(t *testing.T) {
			o := StartOrchestrator(t, "")
			o.StartWorker(WorkerSpec{Name: mode, Persistent: true, Command: []string{"/bin/grep", "^Sig", "/proc/self/status"},
				JobTOML: fmt.Sprintf("isolation = %q\n", mode)})
			id := o.Submit(map[string]any{}, nil)
			o.WaitJob(id, "completed", 20*time.Second)
			logs := o.Logs(id)
			m := regexp.MustCompile(`SigIgn:\s*([0-9a-f]+)`).FindStringSubmatch(logs)
			if m == nil {
				t.Fatalf("no SigIgn in the job's output:\n%s", logs)
			}
			ign, _ := strconv.ParseUint(m[1], 16, 64)
			for _, sig := range []struct {
				name string
				n    uint
			}{{"SIGHUP", 1}, {"SIGINT", 2}, {"SIGTERM", 15}} {
				if ign&(1<<(sig.n-1)) != 0 {
					t.Errorf("the job starts with %s ignored (SigIgn %s)", sig.name, m[1])
				}
			}
		})
	}
}

// kill -9 of workerd mid-job: the whole job, its children included, is gone
// at once (the reaper ends it), well before the orchestrator could give the
// job to another worker; in every isolation mode.
func TestKill9WorkerdEndsItsJob(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cgroup", "process-group"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "cgroup" {
				needRoot(t)
			}
			o := StartOrchestrator(t, "")
			w := o.StartWorker(WorkerSpec{Name: mode, Persistent: true, SelfFenceAfter: "30s",
				Command: []string{"/bin/sh", "-c", `sleep 300 & echo $! > child.pid; echo $$ > leader.pid; wait`},
				JobTOML: fmt.Sprintf("isolation = %q\n", mode)})
			id := o.Submit(map[string]any{}, nil)
			dir := filepath.Join(w.Dir, "state", "jobs", id)
			leader, child := readPid(t, filepath.Join(dir, "leader.pid")), readPid(t, filepath.Join(dir, "child.pid"))
			cg := jobCgroup(t, w, id)

			w.P.Kill9()
			killed := time.Now()
			// Until the orchestrator gives the job up (heartbeat timeout,
			// 3 s here), sample the job's status, then its processes: a
			// job already requeued while one of them still runs could run
			// twice once it is dispatched again.
			var took time.Duration
			for {
				requeued := o.Job(id)["status"] == "queued"
				alive := testutil.Running(leader) || testutil.Running(child)
				if requeued && alive {
					t.Fatalf("the job was requeued %s after workerd's SIGKILL while its processes still ran", time.Since(killed))
				}
				if !alive && took == 0 {
					took = time.Since(killed)
				}
				if requeued {
					break
				}
				if time.Since(killed) > 20*time.Second {
					t.Fatalf("the job was not requeued within 20 s of workerd's SIGKILL (gone after %s)", took)
				}
				time.Sleep(time.Millisecond)
			}
			t.Logf("%s: the job was gone %s after workerd's SIGKILL and requeued %s after it", mode, took, time.Since(killed))
			if took > time.Second {
				t.Errorf("the job outlived workerd by %s", took)
			}
			if procs := JobProcs(id); len(procs) > 0 {
				t.Errorf("processes of the job outlived workerd: %v", procs)
			}
			if cg != "" {
				Eventually(t, 30*time.Second, "the job's cgroup to go", func() bool {
					_, err := os.Stat(cg)
					return os.IsNotExist(err)
				})
			}
		})
	}
}

// CPU time and peak memory come back with the job's end, stored on its
// attempt: plausible numbers for a trainer that burns 1 s of CPU.
func TestJobUsageIsAccounted(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"auto", "process-group"} {
		t.Run(mode, func(t *testing.T) {
			o := StartOrchestrator(t, "")
			o.StartWorker(WorkerSpec{Name: mode, Persistent: true, JobTOML: fmt.Sprintf("isolation = %q\n", mode)})
			id := o.Submit(map[string]any{"steps": 1, "step_seconds": 0.01, "burn_cpu_seconds": 1.0}, nil)
			j := o.WaitJob(id, "completed", 30*time.Second)
			at := Attempts(j)
			if len(at) != 1 {
				t.Fatalf("attempts: %v", at)
			}
			cpu, _ := at[0]["cpu_seconds"].(float64)
			peak, _ := at[0]["peak_memory_bytes"].(float64)
			t.Logf("%s: cpu %.3f s, peak memory %.1f MiB", mode, cpu, peak/(1<<20))
			if cpu < 1.0 || cpu > 3.0 {
				t.Errorf("cpu_seconds %v for a job that burned 1 s", at[0]["cpu_seconds"])
			}
			if peak < 1<<20 || peak > 1<<30 {
				t.Errorf("peak_memory_bytes %v for a small Go program", at[0]["peak_memory_bytes"])
			}
		})
	}
}

// memory_max and tasks_max hold each job through its cgroup.
func TestJobLimits(t *testing.T) {
	needRoot(t)
	t.Parallel()
	o := StartOrchestrator(t, "")
	// Its first instruction already runs inside every limit (where the
	// machine has v1 controllers, the leader is forked inside them; see
	// also TestJobStartsInsideItsCgroups); then a 200 MB line held whole in memory, by a process forked at
	// once; then more processes than allowed.
	script := `echo "cgroups at start: $(grep -E ':(memory|pids):' /proc/self/cgroup | tr '\n' ' ')"
head -c 200M /dev/zero | tail > /dev/null; echo "memory rc=$?"
(for i in $(seq 1 30); do sleep 2 & done; wait) 2>&1; echo "tasks done"`
	w := o.StartWorker(WorkerSpec{Name: "limits", Persistent: true, Command: []string{"/bin/sh", "-c", script},
		JobTOML: "memory_max = \"64M\"\ntasks_max = 10\n"})
	needCgroups(t, o, w)
	id := o.Submit(map[string]any{}, nil)
	o.WaitJob(id, "completed", 30*time.Second)
	logs := o.Logs(id)
	start, _, _ := strings.Cut(logs[strings.Index(logs, "cgroups at start:"):], "\n")
	for _, c := range strings.Fields(strings.TrimPrefix(start, "cgroups at start:")) {
		if !strings.Contains(c, "/job-"+id+"-1") {
			t.Errorf("the job started outside its cgroup: %s", c)
		}
	}
	if !strings.Contains(logs, "memory rc=137") {
		t.Errorf("a job over memory_max was not killed:\n%s", logs)
	}
	if !strings.Contains(strings.ToLower(logs), "fork") {
		t.Errorf("a job over tasks_max could start every process:\n%s", logs)
	}
	j := o.Job(id)
	if peak, _ := Attempts(j)[0]["peak_memory_bytes"].(float64); peak > 80<<20 {
		t.Errorf("peak memory %.0f above the 64M limit", peak)
	}
}

// A job's first instruction already runs inside every cgroup of its job,
// memory and pids included where they are v1 hierarchies (a hybrid
// machine): the trainer here is cat, which reads its cgroups as soon as it
// runs, before a workerd that moved it after the fork could have.
func TestJobStartsInsideItsCgroups(t *testing.T) {
	needRoot(t)
	t.Parallel()
	o := StartOrchestrator(t, "")
	w := o.StartWorker(WorkerSpec{Name: "first", Persistent: true, Command: []string{"cat", "/proc/self/cgroup"},
		JobTOML: "memory_max = \"256M\"\ntasks_max = 10\n"})
	needCgroups(t, o, w)
	for range 5 {
		id := o.Submit(map[string]any{}, nil)
		o.WaitJob(id, "completed", 30*time.Second)
		logs := o.Logs(id)
		if !strings.Contains(logs, "0::") {
			t.Fatalf("job %s printed no cgroups:\n%s", id, logs)
		}
		for _, line := range strings.Split(logs, "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) == 3 && (parts[1] == "" || parts[1] == "memory" || parts[1] == "pids") && !strings.HasSuffix(parts[2], "/job-"+id+"-1") {
				t.Errorf("job %s started outside its cgroup: %s", id, line)
			}
		}
	}
}
