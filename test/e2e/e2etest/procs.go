package e2etest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// JobProcs lists the live processes of a job by the SIMPLETUNER_JOB_ID and
// SIMPLETUNER_ATTEMPT in their environment: what really runs, not what anyone
// reports. The map is pid → attempt.
func JobProcs(jobID string) map[int]string {
	out := map[int]string{}
	for pid, jp := range scanJobProcs(nil) {
		if jp.job == jobID {
			out[pid] = jp.attempt
		}
	}
	return out
}

// JobProc is one live process of some job.
type JobProc struct {
	Pid     int
	Job     string
	Attempt string
	Comm    string
	// Stopped: the process exists but is stopped (SIGSTOP): it runs nothing.
	Stopped bool
}

// AllJobProcs lists every live process that belongs to a job.
func AllJobProcs() []JobProc {
	var out []JobProc
	for pid, jp := range scanJobProcs(nil) {
		out = append(out, JobProc{Pid: pid, Job: jp.job, Attempt: jp.attempt, Comm: jp.comm, Stopped: jp.stopped})
	}
	return out
}

type jobProc struct {
	job, attempt, comm string
	gpus               string // CUDA_VISIBLE_DEVICES as workerd set it: the attempt's GPUs
	stopped            bool   // state T or t: it exists but runs nothing
}

// procCache remembers, per pid, start time and command name, what environ
// said. A process's environment changes only when it executes another
// program, which changes its name too, so each program is read once. A read
// that found the job but not the attempt is not kept: environ read while the
// process is between fork and exec can be cut short, and such a sample would
// name an attempt that never ran.
type procCache map[string]*jobProc

func scanJobProcs(cache procCache) map[int]jobProc {
	out := map[int]jobProc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// comm may hold spaces: the fields after the last ')' are fixed.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
			continue // a zombie runs nothing
		}
		key := e.Name() + ":" + f[19] + ":" + s[strings.IndexByte(s, '(')+1:i] // pid, starttime, comm
		stopped := f[0] == "T" || f[0] == "t"
		if cache != nil {
			if jp, ok := cache[key]; ok {
				if jp != nil {
					p := *jp
					p.stopped = stopped
					out[pid] = p
				}
				continue
			}
		}
		var jp *jobProc
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if bytes.Contains(env, []byte("SIMPLETUNER_JOB_ID=")) {
			p := jobProc{}
			if j := strings.Index(s, "("); j >= 0 {
				p.comm = s[j+1 : i]
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if v, ok := bytes.CutPrefix(kv, []byte("SIMPLETUNER_ATTEMPT=")); ok {
					p.attempt = string(v)
				}
				if v, ok := bytes.CutPrefix(kv, []byte("SIMPLETUNER_JOB_ID=")); ok {
					p.job = string(v)
				}
				if v, ok := bytes.CutPrefix(kv, []byte("SIMPLETUNER_UPLOAD_TOKEN=")); ok {
					NoteSecret("upload token", string(v))
				}
				if v, ok := bytes.CutPrefix(kv, []byte("HF_TOKEN=")); ok {
					NoteSecret("hf_token", string(v))
				}
				if v, ok := bytes.CutPrefix(kv, []byte("CUDA_VISIBLE_DEVICES=")); ok {
					p.gpus = string(v)
				}
			}
			if p.job != "" && p.attempt == "" {
				continue // a torn read: try again at the next sample
			}
			if p.job != "" {
				jp = &p
				p.stopped = stopped
				out[pid] = p
			}
		}
		if cache != nil {
			cache[key] = jp
		}
	}
	return out
}

// OverlapWatch samples a job's processes until stopped and records whether two
// attempts were ever alive at the same moment.
type OverlapWatch struct {
	cancel  context.CancelFunc
	done    chan struct{}
	Overlap []string
	Seen    map[string]bool
}

// WatchOverlap starts sampling jobID's processes every 10 ms.
func WatchOverlap(jobID string) *OverlapWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &OverlapWatch{cancel: cancel, done: make(chan struct{}), Seen: map[string]bool{}}
	go func() {
		defer close(w.done)
		cache := procCache{}
		for ctx.Err() == nil {
			attempts := map[string]bool{}
			for _, jp := range scanJobProcs(cache) {
				if jp.job != jobID {
					continue
				}
				attempts[jp.attempt] = true
				w.Seen[jp.attempt] = true
			}
			if len(attempts) > 1 {
				w.Overlap = append(w.Overlap, fmt.Sprint(attempts))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w
}

// Stop ends the sampling (idempotent).
func (w *OverlapWatch) Stop() { w.cancel(); <-w.done }

// Span is the observed life of one attempt's processes. Lives are the
// stretches in which some process of the attempt was running: a stopped
// process (SIGSTOP, a frozen host) runs nothing, so a freeze splits a life.
type Span struct {
	Job, Attempt        string
	FirstSeen, LastSeen time.Time
	Alive               bool
	Lives               []Interval
}

// Interval is a stretch of time, both ends included.
type Interval struct{ From, To time.Time }

// Overlaps reports whether two intervals share a moment.
func (i Interval) Overlaps(j Interval) bool { return !i.From.After(j.To) && !j.From.After(i.To) }

// Sampler watches every job's processes (one /proc scan every interval) and
// records, per attempt, when its processes were running, and every sample in
// which two attempts of one job were running together. Stopped processes are
// left out: they exist but run nothing.
type Sampler struct {
	mu       sync.Mutex
	spans    map[string]*Span // job/attempt
	overlaps []overlap
	// gpuShares lists samples in which two live attempts held one GPU (by
	// the UUIDs workerd gave them in CUDA_VISIBLE_DEVICES).
	gpuShares []gpuShare
	samples   int
	onEvent   func(kind, job, attempt string, at time.Time)
	cancel    context.CancelFunc
	done      chan struct{}
}

// StartSampler starts sampling every interval; onEvent (may be nil) hears
// "proc_start" and "proc_exit" as attempts start and stop running.
func StartSampler(interval time.Duration, onEvent func(kind, job, attempt string, at time.Time)) *Sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sampler{spans: map[string]*Span{}, onEvent: onEvent, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		cache := procCache{}
		for ctx.Err() == nil {
			s.sample(cache)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
		s.sample(cache)
	}()
	return s
}

func (s *Sampler) sample(cache procCache) {
	procs := scanJobProcs(cache)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	live := map[string]map[string]bool{}
	holders := map[string]map[string]bool{} // GPU → job/attempt
	for _, jp := range procs {
		if jp.stopped {
			continue
		}
		if live[jp.job] == nil {
			live[jp.job] = map[string]bool{}
		}
		live[jp.job][jp.attempt] = true
		for _, g := range strings.Split(jp.gpus, ",") {
			if g == "" {
				continue
			}
			if holders[g] == nil {
				holders[g] = map[string]bool{}
			}
			holders[g][jp.job+"/"+jp.attempt] = true
		}
	}
	for g, hs := range holders {
		if len(hs) > 1 {
			s.gpuShares = append(s.gpuShares, gpuShare{gpu: g, at: now, holders: keys(hs)})
		}
	}
	for job, as := range live {
		if len(as) > 1 {
			s.overlaps = append(s.overlaps, overlap{job: job, at: now, attempts: keys(as)})
		}
		for a := range as {
			k := job + "/" + a
			sp := s.spans[k]
			if sp == nil {
				sp = &Span{Job: job, Attempt: a, FirstSeen: now}
				s.spans[k] = sp
			}
			if !sp.Alive {
				sp.Lives = append(sp.Lives, Interval{From: now, To: now})
				if s.onEvent != nil {
					s.onEvent("proc_start", job, a, now)
				}
			}
			sp.LastSeen, sp.Alive = now, true
			sp.Lives[len(sp.Lives)-1].To = now
		}
	}
	for _, sp := range s.spans {
		if sp.Alive && !live[sp.Job][sp.Attempt] {
			sp.Alive = false
			if s.onEvent != nil {
				s.onEvent("proc_exit", sp.Job, sp.Attempt, now)
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Stop takes a last sample and ends sampling (idempotent).
func (s *Sampler) Stop() { s.cancel(); <-s.done }

// Spans returns a copy of every attempt's observed life.
func (s *Sampler) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, sp := range s.spans {
		c := *sp
		c.Lives = append([]Interval(nil), sp.Lives...)
		out = append(out, c)
	}
	return out
}

// gpuShare is one GPU seen in the environment of several live attempts.
type gpuShare struct {
	gpu     string
	at      time.Time
	holders []string // job/attempt
}

// GPUShares lists the samples in which two live attempts of jobs mine
// accepts held one GPU. The filter matters: tests running beside this one
// may give their fake GPUs the same UUIDs.
func (s *Sampler) GPUShares(mine func(job string) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, sh := range s.gpuShares {
		var ours []string
		for _, h := range sh.holders {
			if job, _, _ := strings.Cut(h, "/"); mine(job) {
				ours = append(ours, h)
			}
		}
		if len(ours) > 1 {
			out = append(out, fmt.Sprintf("GPU %s at %s: held by %v", sh.gpu, sh.at.Format("15:04:05.000"), ours))
		}
	}
	return out
}

// overlap is one sample in which several attempts of a job were alive.
type overlap struct {
	job      string
	at       time.Time
	attempts []string
}

// Overlaps lists the samples in which two attempts of a job mine accepts
// were alive together. Tests beside this one run jobs of their own, some
// of them frozen on purpose.
func (s *Sampler) Overlaps(mine func(job string) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, o := range s.overlaps {
		if mine(o.job) {
			out = append(out, fmt.Sprintf("%s at %s: attempts %v alive together", o.job, o.at.Format("15:04:05.000"), o.attempts))
		}
	}
	return out
}

// Samples is the number of /proc scans taken.
func (s *Sampler) Samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// BurnCPU keeps n busy-looping shell processes running until the test ends,
// so that every core is contended.
func BurnCPU(t testing.TB, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// FreezeJob stops (SIGSTOP) pids and every process of job jobID, scanning
// again until no process of the job is left running: a process forked
// between a scan and the stops (a trainer its wrapper starts just then)
// is caught by the next scan. It returns every pid it stopped, to thaw.
func FreezeJob(jobID string, pids ...int) []int {
	frozen := map[int]bool{}
	stop := func(pid int) {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		frozen[pid] = true
	}
	for _, pid := range pids {
		stop(pid)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		running := false
		for pid, jp := range scanJobProcs(nil) {
			if jp.job == jobID && !jp.stopped {
				running = true
				stop(pid) // again, for one whose stop is not yet in its state
			}
		}
		if !running {
			break
		}
	}
	out := make([]int, 0, len(frozen))
	for pid := range frozen {
		out = append(out, pid)
	}
	return out
}
