package liveness

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

func job(id string, attempt int) store.Job { return store.Job{ID: id, Attempt: attempt} }

func ids(jobs []store.Job) string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return strings.Join(out, ",")
}

// An attempt is lost only when two heartbeats in a row leave it out; a
// heartbeat that lists it again, or a new attempt of the job, starts over.
func TestLostAttemptsNeedTwoHeartbeats(t *testing.T) {
	m := NewMemory(slog.New(slog.DiscardHandler))
	steps := []struct {
		absent []store.Job
		lost   string
	}{
		{[]store.Job{job("a", 1), job("b", 1)}, ""},
		{[]store.Job{job("a", 1), job("b", 2)}, "a"}, // b is a new attempt: first miss
		{nil, ""},                       // listed again: everything forgotten
		{[]store.Job{job("b", 2)}, ""},  // so this is a first miss again
		{[]store.Job{job("b", 2)}, "b"}, // and this the second
	}
	for i, st := range steps {
		if got := ids(m.LostAttempts("w_1", st.absent)); got != st.lost {
			t.Fatalf("heartbeat %d: lost %q, want %q", i+1, got, st.lost)
		}
	}
	// Other workers are kept apart, and Offline and ForgetAttempts start over.
	m.LostAttempts("w_2", []store.Job{job("c", 1)})
	m.ForgetAttempts("w_2")
	if got := ids(m.LostAttempts("w_2", []store.Job{job("c", 1)})); got != "" {
		t.Fatalf("after ForgetAttempts: lost %q", got)
	}
	m.Offline("w_2")
	if got := ids(m.LostAttempts("w_2", []store.Job{job("c", 1)})); got != "" {
		t.Fatalf("after Offline: lost %q", got)
	}
}

// A heartbeat keeps at most MaxTelemetryGPUs GPUs' numbers, an empty one keeps
// the previous numbers; Offline drops them, but the clock skew stays on show
// until the worker is deleted.
func TestTelemetryAndSkewAreForgottenAtTheRightTime(t *testing.T) {
	m := NewMemory(slog.New(slog.DiscardHandler))
	at := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	if m.Telemetry("w_1") != nil || m.ClockSkewSeconds("w_1") != nil {
		t.Fatal("an unknown worker has numbers")
	}
	m.SetTelemetry("w_1", make([]protocol.GPUTelemetry, MaxTelemetryGPUs+10), at)
	m.SetTelemetry("w_1", nil, at.Add(time.Second))
	tel := m.Telemetry("w_1")
	if tel == nil || len(tel.GPUs) != MaxTelemetryGPUs || tel.At != protocol.Time(at) {
		t.Fatalf("telemetry = %+v", tel)
	}
	m.NoteClock("w_1", at.Add(-1234*time.Millisecond), at)
	if s := m.ClockSkewSeconds("w_1"); s == nil || *s != -1.2 {
		t.Fatalf("skew = %v, want -1.2", s)
	}
	m.Offline("w_1")
	if m.Telemetry("w_1") != nil {
		t.Fatal("an offline worker keeps its live GPU numbers")
	}
	if m.ClockSkewSeconds("w_1") == nil {
		t.Fatal("going offline forgot the clock skew")
	}
	m.Forget("w_1")
	if m.ClockSkewSeconds("w_1") != nil {
		t.Fatal("a deleted worker keeps its clock skew")
	}
}

// A skew past a minute is warned about once per excursion, in either direction.
func TestClockSkewWarnsOncePerExcursion(t *testing.T) {
	var logged bytes.Buffer
	m := NewMemory(slog.New(slog.NewTextHandler(&logged, nil)))
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	warnings := func() int { return strings.Count(logged.String(), "clock is far off") }
	for i, step := range []struct {
		skew time.Duration
		want int
	}{
		{5 * time.Second, 0},
		{2 * time.Minute, 1},
		{3 * time.Minute, 1}, // still the same excursion
		{time.Second, 1},     // back under
		{-90 * time.Second, 2},
	} {
		m.NoteClock("w_1", now.Add(step.skew), now)
		if got := warnings(); got != step.want {
			t.Fatalf("step %d (skew %s): %d warnings, want %d\n%s", i, step.skew, got, step.want, logged.String())
		}
	}
	if s := m.ClockSkewSeconds("w_1"); s == nil || *s != -90 {
		t.Fatalf("skew = %v, want -90", s)
	}
}

// A heartbeat the full database could not store counts until a later one is
// stored, and only when it is newer than the stored one.
func TestKeptBeatCountsUntilOneIsStored(t *testing.T) {
	m := NewMemory(slog.New(slog.DiscardHandler))
	t0 := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	stored, kept := t0, t0.Add(time.Minute)
	if got := m.LastBeat("w_1", &stored); got != &stored {
		t.Fatalf("nothing kept: %v", got)
	}
	m.KeepBeat("w_1", kept)
	if got := m.LastBeat("w_1", &stored); !got.Equal(kept) {
		t.Fatalf("kept beat not counted: %v", got)
	}
	if got := m.LastBeat("w_1", nil); got == nil || !got.Equal(kept) {
		t.Fatalf("kept beat of a worker never stored: %v", got)
	}
	later := t0.Add(2 * time.Minute)
	if got := m.LastBeat("w_1", &later); !got.Equal(later) {
		t.Fatalf("an older kept beat won over a newer stored one: %v", got)
	}
	m.BeatStored("w_1")
	if got := m.LastBeat("w_1", &stored); !got.Equal(stored) {
		t.Fatalf("kept beat outlived a stored one: %v", got)
	}
	m.KeepBeat("w_2", kept)
	m.Forget("w_2")
	if got := m.LastBeat("w_2", nil); got != nil {
		t.Fatalf("a deleted worker's kept beat: %v", got)
	}
}

func TestJudge(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	rules := Rules{HeartbeatTimeout: 120 * time.Second, EphemeralCleanupAfter: time.Hour}
	grace := rules
	grace.InStartupGrace = true
	cases := []struct {
		name  string
		w     store.Worker
		rules Rules
		want  Verdict
	}{
		{"busy, heard lately", store.Worker{Status: protocol.WorkerBusy, LastHeartbeat: ago(time.Minute)}, rules, Alive},
		{"busy, silent", store.Worker{Status: protocol.WorkerBusy, LastHeartbeat: ago(3 * time.Minute)}, rules, Silent},
		{"idle, silent", store.Worker{Status: protocol.WorkerIdle, LastHeartbeat: ago(3 * time.Minute)}, rules, Silent},
		{"draining, silent", store.Worker{Status: protocol.WorkerDraining, LastHeartbeat: ago(3 * time.Minute)}, rules, Silent},
		{"silent in the startup grace", store.Worker{Status: protocol.WorkerBusy, LastHeartbeat: ago(3 * time.Minute)}, grace, Alive},
		{"never heard", store.Worker{Status: protocol.WorkerConnecting}, rules, Alive},
		{"offline ephemeral, long gone", store.Worker{Status: protocol.WorkerOffline, Type: protocol.Ephemeral, LastHeartbeat: ago(2 * time.Hour)}, rules, Expired},
		{"offline ephemeral, long gone, in the startup grace", store.Worker{Status: protocol.WorkerOffline, Type: protocol.Ephemeral, LastHeartbeat: ago(2 * time.Hour)}, grace, Expired},
		{"offline ephemeral, lately", store.Worker{Status: protocol.WorkerOffline, Type: protocol.Ephemeral, LastHeartbeat: ago(time.Minute)}, rules, Alive},
		{"offline ephemeral that holds a job", store.Worker{Status: protocol.WorkerOffline, Type: protocol.Ephemeral, CurrentJobID: "j_1", LastHeartbeat: ago(2 * time.Hour)}, rules, Alive},
		{"offline persistent, long gone", store.Worker{Status: protocol.WorkerOffline, Type: protocol.Persistent, LastHeartbeat: ago(2 * time.Hour)}, rules, Alive},
	}
	for _, c := range cases {
		if got := Judge(c.w, now, c.rules); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
