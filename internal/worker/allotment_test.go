package worker

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// gpus is a job_submit's assignment; none at all is an empty list (a job
// that takes no GPU), which JSON must carry as [], not null.
func gpus(list ...protocol.AssignedGPU) *[]protocol.AssignedGPU {
	out := append([]protocol.AssignedGPU{}, list...)
	return &out
}

// jobEnvOf reads the environment a job wrote into env.txt in its directory.
func jobEnvOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	waitFile(t, filepath.Join(dir, "env.txt"), 10*time.Second)
	raw, _ := os.ReadFile(filepath.Join(dir, "env.txt"))
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Two jobs run at once on a two-GPU worker, each told only its own GPU;
// dispatches that would share a GPU, exceed max_jobs or take the whole
// worker are refused while they run; heartbeats carry both attempts.
func TestSeveralJobsOnTheirOwnGPUs(t *testing.T) {
	t.Parallel()
	var opt Options
	f, r := setup(t, func(o *Options) {
		o.Command = []string{"/bin/sh", "-c", "env > env.txt; exec " + demoTrainer}
		opt = *o
	})
	f.connected(1)
	long := json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)
	f.submit(protocol.JobSubmitEvent{JobID: "j_slot0000001", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 1, UUID: "GPU-bbbb"})})
	f.submit(protocol.JobSubmitEvent{JobID: "j_slot0000002", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0})})
	f.started("j_slot0000001")
	f.started("j_slot0000002")

	for id, want := range map[string]string{"j_slot0000001": "GPU-bbbb", "j_slot0000002": "GPU-aaaa"} {
		env := jobEnvOf(t, filepath.Join(opt.StateDir, "jobs", id))
		if env["CUDA_VISIBLE_DEVICES"] != want || env["NVIDIA_VISIBLE_DEVICES"] != want {
			t.Errorf("%s sees CUDA_VISIBLE_DEVICES=%q NVIDIA_VISIBLE_DEVICES=%q, want %s", id, env["CUDA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"], want)
		}
	}
	f.waitFor("a heartbeat with both attempts", 5*time.Second, func() bool {
		if len(f.heartbeats) == 0 {
			return false
		}
		var ids []string
		for _, a := range f.heartbeats[len(f.heartbeats)-1].Running {
			ids = append(ids, a.JobID)
		}
		return slices.Equal(ids, []string{"j_slot0000001", "j_slot0000002"})
	})

	// Refused while both run: a GPU in use, max_jobs (2, one per GPU), the
	// whole worker. None of them starts.
	f.submit(protocol.JobSubmitEvent{JobID: "j_slot0000003", Config: long, Attempt: 1, GPUs: gpus()})
	f.submit(protocol.JobSubmitEvent{JobID: "j_slot0000004", Config: long, Attempt: 1})
	waitLog(t, r, "max_jobs (2) jobs run here already")
	waitLog(t, r, "it asks for the whole worker and 2 job(s) run here")
	f.mu.Lock()
	for _, id := range []string{"j_slot0000003", "j_slot0000004"} {
		if f.hasReportLocked(id, "starting") {
			t.Errorf("%s was taken beside two running jobs", id)
		}
	}
	f.mu.Unlock()
	if s := r.w.Status(); !strings.Contains(s, "running 2 jobs (j_slot0000001, j_slot0000002)") {
		t.Errorf("status %q", s)
	}
}

// A dispatch naming a GPU that is busy, unknown, or given twice is refused.
func TestConflictingGPUsAreRefused(t *testing.T) {
	t.Parallel()
	f, r := setup(t, func(o *Options) { o.MaxJobs = 4 })
	f.connected(1)
	long := json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000001", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0})})
	f.started("j_conf0000001")
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000002", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0})})
	waitLog(t, r, "GPU 0 is in use by job j_conf0000001")
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000003", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 7})})
	waitLog(t, r, "it assigns GPU 7 and this worker has 2")
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000004", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 1}, protocol.AssignedGPU{Index: 1})})
	waitLog(t, r, "it assigns GPU 1 twice")
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000005", Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 1, UUID: "GPU-zzzz"})})
	waitLog(t, r, "it assigns GPU 1 as GPU-zzzz, which is GPU-bbbb here")
	// A job that takes no GPU may still run beside it (max_jobs 4).
	f.submit(protocol.JobSubmitEvent{JobID: "j_conf0000006", Config: long, Attempt: 1, GPUs: gpus()})
	f.started("j_conf0000006")
}

// Self-fencing stops every running job, each reported cancelled after the
// next registration.
func TestSelfFenceStopsEveryJob(t *testing.T) {
	t.Parallel()
	var opt Options
	f, _ := setup(t, func(o *Options) {
		o.SelfFenceAfter = 300 * time.Millisecond
		opt = *o
	})
	f.connected(1)
	long := json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)
	ids := []string{"j_fall00000001", "j_fall00000002"}
	for i, id := range ids {
		f.submit(protocol.JobSubmitEvent{JobID: id, Config: long, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: i})})
	}
	var pids []int
	for _, id := range ids {
		f.started(id)
		pids = append(pids, pidsOf(t, filepath.Join(opt.StateDir, "jobs", id))...)
	}
	f.down.Store(true)
	f.dropStreams()
	f.srv.CloseClientConnections()
	waitDead(t, pids, 5*time.Second)
	f.down.Store(false)
	for _, id := range ids {
		if rep := f.report(id, "cancelled"); rep.Error == nil || !strings.Contains(*rep.Error, "self-fenced") {
			t.Errorf("%s: %+v", id, rep)
		}
	}
}

// waitLog waits for the worker's log to contain s.
func waitLog(t *testing.T, r *running, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.logs.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never logged %q", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFencedJobNotResumedWhileItDies: the orchestrator comes back while a
// self-fenced job is still in its stop grace. The registration must not list
// the job (the orchestrator would resume an attempt that is being killed), and
// the job's cancelled report must go once it is dead, without waiting for yet
// another registration. The orchestrator comes back only once a registration
// composed after the fence has been tried: one composed before it, still on
// its way, lists the job by design (TestFencedWhileRegistering).
func TestFencedJobNotResumedWhileItDies(t *testing.T) {
	t.Parallel()
	f, r := setup(t, func(o *Options) {
		o.SelfFenceAfter = 300 * time.Millisecond
		o.CancelGrace = 3 * time.Second
	})
	f.connected(1)
	const id = "j_fencedie0001"
	f.submit(protocol.JobSubmitEvent{JobID: id, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0}),
		Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05,"ignore_sigterm":true}`)})
	f.started(id)
	f.down.Store(true)
	f.dropStreams()
	f.srv.CloseClientConnections()
	waitLog(t, r, "stopping the job: the orchestrator has not acknowledged")
	f.mu.Lock()
	before, drops := len(f.registers), f.regDrops
	f.mu.Unlock()
	// Registrations go one at a time: the first dropped from here on may
	// have been composed before the fence, the second was composed after.
	f.waitFor("a registration composed after the fence", 5*time.Second, func() bool { return f.regDrops >= drops+2 })
	f.down.Store(false)
	f.waitFor("a registration after the fence", 5*time.Second, func() bool { return len(f.registers) > before })
	f.mu.Lock()
	reg := f.registers[before]
	f.mu.Unlock()
	if len(reg.Running) != 0 || reg.CurrentJobID != nil {
		t.Errorf("the registration during the stop grace lists the fenced job: running %+v, current_job_id %v", reg.Running, reg.CurrentJobID)
	}
	if rep := f.report(id, "cancelled"); rep.Error == nil || !strings.Contains(*rep.Error, "self-fenced") {
		t.Errorf("%+v", rep)
	}
}

// TestFencedWhileRegistering: a job is self-fenced while a registration that
// lists it as running is on its way. The orchestrator resumes it; the worker
// must register again, leaving the job out, and then report it cancelled.
func TestFencedWhileRegistering(t *testing.T) {
	t.Parallel()
	f, r := setup(t, func(o *Options) { o.SelfFenceAfter = 300 * time.Millisecond })
	f.connected(1)
	const id = "j_fencereg0001"
	f.submit(protocol.JobSubmitEvent{JobID: id, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0}),
		Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started(id)
	const fenced = "stopping the job: the orchestrator has not acknowledged"
	var held sync.Once
	f.mu.Lock()
	f.regReply = func(req protocol.RegisterRequest) protocol.RegisterResponse {
		held.Do(func() { // answer the first registration only once the job was fenced
			for deadline := time.Now().Add(5 * time.Second); !strings.Contains(r.logs.String(), fenced) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			f.hbFail.Store(false)
		})
		return protocol.RegisterResponse{WorkerID: f.workerID, SSEURL: "/api/workers/stream?worker_id=" + f.workerID,
			Protocol: 2, HeartbeatIntervalSeconds: 30, HeartbeatTimeoutSeconds: 120, Resume: req.Running}
	}
	before := len(f.registers)
	f.mu.Unlock()
	f.hbFail.Store(true)
	f.dropStreams()
	f.waitFor("a second registration after the fence", 10*time.Second, func() bool { return len(f.registers) >= before+2 })
	f.mu.Lock()
	first, second := f.registers[before], f.registers[before+1]
	f.mu.Unlock()
	if len(first.Running) != 1 {
		t.Fatalf("the held registration should list the job, composed before the fence: %+v", first.Running)
	}
	if len(second.Running) != 0 || second.CurrentJobID != nil {
		t.Errorf("the registration after the fence lists the fenced job: running %+v, current_job_id %v", second.Running, second.CurrentJobID)
	}
	waitLog(t, r, "registering again without it")
	if rep := f.report(id, "cancelled"); rep.Error == nil || !strings.Contains(*rep.Error, "self-fenced") {
		t.Errorf("%+v", rep)
	}
}

// The self-fence limit counts from when the last acknowledged heartbeat was
// sent, not from when its answer came: the orchestrator may have heard it at
// any moment between. Answers that each take most of the limit leave the
// worker fenced, though one arrives more often than the limit.
func TestSelfFenceCountsFromTheSend(t *testing.T) {
	t.Parallel()
	f, r := setup(t, func(o *Options) { o.SelfFenceAfter = 300 * time.Millisecond })
	f.connected(1)
	const id = "j_fencesend001"
	f.submit(protocol.JobSubmitEvent{JobID: id, Attempt: 1, GPUs: gpus(protocol.AssignedGPU{Index: 0}),
		Config: json.RawMessage(`{"steps":100000,"step_seconds":0.05}`)})
	f.started(id)
	f.hbDelay.Store(int64(250 * time.Millisecond))
	waitLog(t, r, "stopping the job: the orchestrator has not acknowledged")
	f.hbDelay.Store(0)
	f.dropStreams() // the cancelled report goes after the next registration
	if rep := f.report(id, "cancelled"); rep.Error == nil || !strings.Contains(*rep.Error, "self-fenced") {
		t.Errorf("%+v", rep)
	}
}

// The allotment alone: a dispatch gets the GPUs it assigns and the other
// GPUs' device files are walled off; a second one that names a GPU in use,
// one that takes the whole worker beside it, and one over max_jobs are
// refused and take nothing; a release frees the room.
func TestAllotmentReservesAndReleases(t *testing.T) {
	t.Parallel()
	inv := gpu.Inventory{Count: 2, Devices: []gpu.Device{
		{GPUDevice: protocol.GPUDevice{Index: 0, UUID: "GPU-aaaa"}, DeviceNode: "/dev/nvidia0"},
		{GPUDevice: protocol.GPUDevice{Index: 1, UUID: "GPU-bbbb"}, DeviceNode: "/dev/nvidia1"}}}
	al := newAllotment(newGPUWatch(nil, t.TempDir(), slog.New(slog.DiscardHandler)))
	al.setInventory(inv, 0)
	attempt := func(id string, ev protocol.JobSubmitEvent) *runner {
		ev.JobID, ev.Attempt = id, 1
		return &runner{jobID: id, n: 1, ev: &ev}
	}
	a := attempt("j_a", protocol.JobSubmitEvent{GPUs: gpus(protocol.AssignedGPU{Index: 1, UUID: "GPU-bbbb"})})
	if cur, refused := al.reserve(a); cur != nil || refused != "" {
		t.Fatalf("first dispatch refused: %v %q", cur, refused)
	}
	if !a.grant.has(1) || a.grant.has(0) || a.grant.wholeWorker || !slices.Equal(a.grant.otherNodes, []string{"/dev/nvidia0"}) ||
		a.grant.env["CUDA_VISIBLE_DEVICES"] != "GPU-bbbb" {
		t.Fatalf("grant %+v", a.grant)
	}
	if cur, _ := al.reserve(attempt("j_a", protocol.JobSubmitEvent{GPUs: gpus()})); cur != a {
		t.Fatalf("a second attempt of a running job was taken (holder %v)", cur)
	}
	for _, tc := range []struct {
		ev   protocol.JobSubmitEvent
		want string
	}{
		{protocol.JobSubmitEvent{GPUs: gpus(protocol.AssignedGPU{Index: 1})}, "GPU 1 is in use by job j_a"},
		{protocol.JobSubmitEvent{GPUs: gpus(protocol.AssignedGPU{Index: 0, UUID: "GPU-zzzz"})}, "which is GPU-aaaa here"},
		{protocol.JobSubmitEvent{GPUs: gpus(protocol.AssignedGPU{Index: 0}), WholeWorker: true}, "it takes the whole worker and 1 job(s) run here"},
		{protocol.JobSubmitEvent{}, "it asks for the whole worker and 1 job(s) run here"},
	} {
		b := attempt("j_b", tc.ev)
		if _, refused := al.reserve(b); !strings.Contains(refused, tc.want) {
			t.Errorf("refused %q, want %q", refused, tc.want)
		}
	}
	if got := al.running(); len(got) != 1 || got[0] != a || al.onGPU(1) != a || al.onGPU(0) != nil {
		t.Fatalf("running %v after refusals", got)
	}
	b := attempt("j_b", protocol.JobSubmitEvent{GPUs: gpus(protocol.AssignedGPU{Index: 0})})
	if _, refused := al.reserve(b); refused != "" {
		t.Fatal(refused)
	}
	if _, refused := al.reserve(attempt("j_c", protocol.JobSubmitEvent{GPUs: gpus()})); refused != "max_jobs (2) jobs run here already" {
		t.Fatalf("third job: %q", refused)
	}
	al.release(a)
	al.release(b)
	if !al.idle() {
		t.Fatal("not idle after both released")
	}
	wholeWorker := attempt("j_w", protocol.JobSubmitEvent{})
	if _, refused := al.reserve(wholeWorker); refused != "" || !wholeWorker.grant.wholeWorker || len(wholeWorker.grant.devices) != 2 || len(wholeWorker.grant.otherNodes) != 0 {
		t.Fatalf("whole worker: %q %+v", refused, wholeWorker.grant)
	}
}
