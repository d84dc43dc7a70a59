package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

// The pathological submit of the security review: a label pattern of a
// megabyte (and its milder cousins) is refused with 422 naming the field,
// before the scheduler ever sees it; so are labels over the limits, whether
// an admin sets them or a worker reports them.
func TestLabelLimits(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) { o.MaxBodyBytes = 4 << 20 })
	huge := "*" + strings.Repeat("a", 1<<20) + "b"
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"gpu_type": huge}, "worker_labels"},
		{map[string]string{"gpu_type": strings.Repeat("?", protocol.MaxLabelPattern+1)}, "worker_labels"},
		{map[string]string{strings.Repeat("k", protocol.MaxLabelKey+1): "a*"}, "worker_labels"},
		{map[string]string{"": "a*"}, "worker_labels"},
		{manyLabels(protocol.MaxJobLabels + 1), "worker_labels"},
	} {
		began := time.Now()
		r := e.AdminDo("POST", "/api/queue/submit", map[string]any{"config": map[string]any{}, "worker_labels": c.labels})
		if r.Status != 422 || !strings.Contains(r.JSON["detail"].(string), c.want) {
			t.Errorf("submit with %.40v…: got %d %.200s; want 422 naming %s", c.labels, r.Status, r.Body, c.want)
		}
		t.Logf("answered in %s", time.Since(began).Round(time.Millisecond))
	}
	at := map[string]string{strings.Repeat("k", protocol.MaxLabelKey): "*" + strings.Repeat("a", protocol.MaxLabelPattern-1)}
	for k, v := range manyLabels(protocol.MaxJobLabels - 1) {
		at[k] = v
	}
	e.Submit(map[string]any{"config": map[string]any{}, "worker_labels": at})
	if n := e.Must(e.Queue(""), 200).JSON["total_pending"]; n != float64(1) {
		t.Fatalf("queue holds %v jobs; only the one within the limits belongs there", n)
	}

	for _, labels := range []map[string]string{
		manyLabels(protocol.MaxLabels + 1),
		{"rack": strings.Repeat("v", protocol.MaxLabelValue+1)},
		{strings.Repeat("k", protocol.MaxLabelKey+1): "v"},
	} {
		r := e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": "w", "labels": labels})
		if r.Status != 422 || !strings.Contains(r.JSON["detail"].(string), `"labels"`) {
			t.Errorf("create with %.40v…: %d %s", labels, r.Status, r.Body)
		}
	}
	id, token := e.CreateWorker("w", "persistent", map[string]string{"site": "a"})
	r := e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"labels": manyLabels(protocol.MaxLabels + 1)})
	if r.Status != 422 {
		t.Errorf("patch over the limit: %d", r.Status)
	}
	a := e.newAgent(id, token, 2)
	r = a.register(map[string]any{"labels": map[string]string{"gpu": strings.Repeat("x", 4096)}})
	if r.Status != 422 || !strings.Contains(r.JSON["detail"].(string), `field "labels"`) || !strings.Contains(r.JSON["detail"].(string), "at most") {
		t.Fatalf("register with a reported label over the limit: %d %s", r.Status, r.Body)
	}
	if got := e.Worker(id); got["status"] != "connecting" || len(got["labels"].(map[string]any)) != 1 {
		t.Fatalf("the refused registration changed the worker: %v", got)
	}
}

// matchWorstCase is a job whose patterns are as long and as slow to match as
// the limits allow, and a worker whose labels make them so: every pattern
// but one matches only after trying most starting points, and the last
// fails only at its last byte from every starting point.
func matchWorstCase() (store.Job, store.Worker) {
	value := strings.Repeat("a", protocol.MaxLabelValue-1) + "b"
	slowMatch := "*" + strings.Repeat("a", protocol.MaxLabelValue/2) + "b"
	slowMiss := "*" + strings.Repeat("a", protocol.MaxLabelPattern-2) + "c"
	j := store.Job{ID: "j", Target: protocol.TargetAuto, WorkerLabels: map[string]string{}}
	w := store.Worker{ID: "w", Labels: map[string]string{}, GPUInfo: store.ReadGPUInfo(json.RawMessage(`{"count":8,"vram_gb":80}`))}
	for i := range protocol.MaxJobLabels {
		k := fmt.Sprintf("%0*d", protocol.MaxLabelKey, i)
		j.WorkerLabels[k], w.Labels[k] = slowMatch, value
	}
	j.WorkerLabels[fmt.Sprintf("%0*d", protocol.MaxLabelKey, 0)] = slowMiss
	return j, w
}

// BenchmarkMatchWorstCaseAtLimits is what one job costs the scheduler per
// idle worker at most, with every label at its limits.
func BenchmarkMatchWorstCaseAtLimits(b *testing.B) {
	j, w := matchWorstCase()
	for b.Loop() {
		if placement.Matches(j.Queued(), w) {
			b.Fatal("matched")
		}
	}
}

// Matching runs outside every write transaction and a pass takes at most
// the scheduler's passJobs jobs: with 150 queued jobs whose patterns are
// the slowest the limits allow and 60 idle workers they never match,
// heartbeats are still answered at once while the scheduler passes over
// them again and again.
func TestHeartbeatsAnsweredDuringSlowPasses(t *testing.T) {
	t.Parallel()
	// The test runs the passes itself, only while it measures: passes run
	// back to back all along would starve the agents' keep-alive loops for
	// the whole test on a loaded machine.
	// The agents send no heartbeats of their own, and their absence is
	// never held against them: sixty keep-alive loops would load the very
	// store the test times, and on a loaded machine a first pass can take
	// longer than any scaled-down heartbeat timeout.
	e := setup(t, backends["sqlite"](t), func(o *orchestrator.Options) {
		o.SchedulerInterval = time.Hour
		o.HeartbeatTimeout = time.Hour
	})
	job, worker := matchWorstCase()
	for range 150 {
		e.Submit(map[string]any{"worker_labels": job.WorkerLabels})
	}
	var agents []*agent
	for i := range 60 {
		name := fmt.Sprintf("slow-%02d", i)
		id, token := e.CreateWorker(name, "persistent", worker.Labels)
		a := e.newAgent(id, token, 2)
		e.Must(a.register(map[string]any{"name": name}), 200)
		a.connect()
		agents = append(agents, a)
	}
	type span struct{ from, to time.Time }
	pass := func() span {
		from := time.Now()
		e.srv.Scheduler().Pass(context.Background())
		return span{from, time.Now()}
	}
	first := pass() // after the passes the agents' streams woke
	t.Logf("one pass over 150 jobs and 60 workers: %s", first.to.Sub(first.from).Round(time.Millisecond))

	// Passes back to back, each timed, while heartbeats are timed beside
	// them; then heartbeats alone, for what a heartbeat takes on this
	// machine at this moment. A heartbeat that waited for a pass would take
	// most of the one it overlaps on top of that (the slowest of a dozen
	// nearly all of it); one that merely shares the cores with it, about
	// 0.15 of it. Both measures share the load of the moment, so the bound
	// follows it.
	stop := make(chan struct{})
	passes := make(chan []span, 1)
	go func() {
		var done []span
		for {
			done = append(done, pass())
			select {
			case <-stop:
				passes <- done
				return
			default:
			}
		}
	}()
	heartbeats := func(d time.Duration) []span {
		var beats []span
		for deadline := time.Now().Add(d); time.Now().Before(deadline); {
			a := agents[rand.IntN(len(agents))]
			from := time.Now()
			e.Must(a.heartbeat("idle", nil, nil), 200)
			beats = append(beats, span{from, time.Now()})
		}
		return beats
	}
	beats := heartbeats(2 * time.Second)
	close(stop)
	ran := <-passes
	var alone time.Duration // the slowest heartbeat with no pass running
	for _, b := range heartbeats(time.Second) {
		alone = max(alone, b.to.Sub(b.from))
	}
	var slowest, bound time.Duration
	for _, b := range beats {
		longest := time.Duration(0) // of the passes it overlapped
		for _, p := range ran {
			if p.from.Before(b.to) && b.from.Before(p.to) {
				longest = max(longest, p.to.Sub(p.from))
			}
		}
		took, limit := b.to.Sub(b.from), longest/2+alone
		if took > slowest {
			slowest, bound = took, limit
		}
		if longest > 0 && took > limit {
			t.Errorf("a heartbeat took %s, more than half the pass it overlapped (%s) plus the slowest heartbeat alone (%s), "+
				"while the scheduler matched slow patterns", took, longest.Round(time.Millisecond), alone.Round(time.Millisecond))
		}
	}
	t.Logf("%d heartbeats beside %d passes; the slowest took %s (bound %s; alone at most %s)", len(beats), len(ran),
		slowest.Round(time.Millisecond), bound.Round(time.Millisecond), alone.Round(time.Millisecond))
	if st := e.Worker(agents[0].id)["status"]; st != "idle" {
		t.Errorf("a worker that matches no job is %v", st)
	}
}

// Names, labels, versions and providers with control characters (terminal
// escapes, direction overrides) are refused at registration and when an
// admin sets them, naming the field: they end up in admins' terminals.
func TestControlCharactersRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, backends["sqlite"](t))
	id, token := e.CreateWorker("w", "persistent", nil)
	a := e.newAgent(id, token, 2)
	esc := "x\x1b]0;owned\x07"
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"name": esc}, `field "name" has the control character U+001B`},
		{map[string]any{"name": "w", "labels": map[string]string{"rack": esc}}, `the value of "rack" has the control character`},
		{map[string]any{"name": "w", "labels": map[string]string{"r\u202eack": "a"}}, `the key "r\u202eack" has the control character U+202E`},
		{map[string]any{"name": "w", "version": "1\u009b2"}, `field "version" has the control character U+009B`},
		{map[string]any{"name": "w", "provider": "p\x00"}, `field "provider"`},
	} {
		r := a.register(c.body)
		if r.Status != 422 || !strings.Contains(r.JSON["detail"].(string), c.field) {
			t.Errorf("register %q: %d %s; want 422 naming %s", c.body, r.Status, r.Body, c.field)
		}
	}
	if r := e.AdminDo("POST", "/api/admin/workers", map[string]any{"name": esc}); r.Status != 422 {
		t.Errorf("create: %d %s", r.Status, r.Body)
	}
	if r := e.AdminDo("PATCH", "/api/admin/workers/"+id, map[string]any{"name": esc}); r.Status != 422 {
		t.Errorf("rename: %d %s", r.Status, r.Body)
	}
	if r := e.AdminDo("POST", "/api/admin/tokens", map[string]any{"name": esc, "scopes": []string{"*"}}); r.Status != 422 {
		t.Errorf("token name: %d %s", r.Status, r.Body)
	}
	e.Must(a.register(map[string]any{"name": "wörker ☃", "labels": map[string]string{"zone": "eu-west"}}), 200)
}
