package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

var checkpointTests = []test{
	{"CheckpointsNewestFirstKeepK", testCheckpointsKeep},
	{"CheckpointsGoWithTheirJob", testCheckpointsGoWithTheirJob},
	{"JobOptsOutOfCheckpoints", testJobOptsOutOfCheckpoints},
}

func ckpt(job string, attempt int, step int64, at time.Time) store.Checkpoint {
	name := "checkpoint-" + itoa(step)
	return store.Checkpoint{JobID: job, Attempt: attempt, Name: name, Step: step, Bytes: step * 10, CreatedAt: at,
		Files: []protocol.CheckpointFile{{Path: "model.safetensors", Size: step * 10, SHA256: strings.Repeat("ab", 32)}}}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func names(cs []store.Checkpoint) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Name+"@"+itoa(int64(c.Attempt)))
	}
	return out
}

// A job's checkpoints come back newest first (step, then attempt); a put
// keeps the newest keep and returns the ones it forgot; the same attempt
// and name again replaces the row.
func testCheckpointsKeep(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := newJob(t, s)
	other := newJob(t, s)
	got, err := s.ListCheckpoints(ctx, j.ID)
	noErr(t, err, "ListCheckpoints of a job without any")
	equal(t, len(got), 0, "no checkpoints yet")

	forgot, err := s.PutCheckpoint(ctx, ckpt(j.ID, 1, 100, at(time.Minute)), 2)
	noErr(t, err, "put 100")
	equal(t, len(forgot), 0, "nothing forgotten")
	_, err = s.PutCheckpoint(ctx, ckpt(other.ID, 1, 999, at(time.Minute)), 1)
	noErr(t, err, "put on another job")
	_, err = s.PutCheckpoint(ctx, ckpt(j.ID, 1, 200, at(2*time.Minute)), 2)
	noErr(t, err, "put 200")
	// A retry resumed from 100 and saved 200 again: the retry's is newer.
	forgot, err = s.PutCheckpoint(ctx, ckpt(j.ID, 2, 200, at(3*time.Minute)), 2)
	noErr(t, err, "put 200 of attempt 2")
	equal(t, names(forgot), []string{"checkpoint-100@1"}, "forgotten past keep 2")
	got, err = s.ListCheckpoints(ctx, j.ID)
	noErr(t, err, "list")
	equal(t, names(got), []string{"checkpoint-200@2", "checkpoint-200@1"}, "newest first")
	want := ckpt(j.ID, 2, 200, at(3*time.Minute))
	equal(t, got[0], want, "the stored row")

	// The same attempt and name again replaces it.
	again := ckpt(j.ID, 2, 200, at(4*time.Minute))
	again.Bytes, again.Files[0].Size = 7, 7
	_, err = s.PutCheckpoint(ctx, again, 2)
	noErr(t, err, "put again")
	got, _ = s.ListCheckpoints(ctx, j.ID)
	equal(t, names(got), []string{"checkpoint-200@2", "checkpoint-200@1"}, "after replacing")
	equal(t, got[0], again, "the replaced row")

	forgot, err = s.PutCheckpoint(ctx, ckpt(j.ID, 2, 300, at(5*time.Minute)), 1)
	noErr(t, err, "put 300 keeping 1")
	equal(t, names(forgot), []string{"checkpoint-200@2", "checkpoint-200@1"}, "forgotten past keep 1")
	got, _ = s.ListCheckpoints(ctx, other.ID)
	equal(t, names(got), []string{"checkpoint-999@1"}, "the other job's are untouched")

	noErr(t, s.DeleteCheckpoints(ctx, j.ID), "DeleteCheckpoints")
	got, _ = s.ListCheckpoints(ctx, j.ID)
	equal(t, len(got), 0, "after DeleteCheckpoints")
	got, _ = s.ListCheckpoints(ctx, other.ID)
	equal(t, len(got), 1, "the other job's after DeleteCheckpoints")
}

// Retention deletes a finished job with its checkpoints.
func testCheckpointsGoWithTheirJob(t *testing.T, s store.Store) {
	ctx := t.Context()
	w := newWorker(t, s)
	old := finishedAt(t, s, w, protocol.JobCompleted, at(-time.Hour))
	_, err := s.PutCheckpoint(ctx, ckpt(old.ID, 1, 10, at(-2*time.Hour)), 2)
	noErr(t, err, "put")
	n, err := s.DeleteJobs(ctx, []string{old.ID}, at(0))
	noErr(t, err, "DeleteJobs")
	equal(t, n, 1, "jobs deleted")
	got, err := s.ListCheckpoints(ctx, old.ID)
	noErr(t, err, "ListCheckpoints of a deleted job")
	equal(t, len(got), 0, "checkpoints of a deleted job")
}

func testJobOptsOutOfCheckpoints(t *testing.T, s store.Store) {
	j := newJob(t, s, func(j *store.Job) { j.NoCheckpoints = true })
	if !getJob(t, s, j.ID).NoCheckpoints {
		t.Fatal("NoCheckpoints was not kept")
	}
	if getJob(t, s, newJob(t, s).ID).NoCheckpoints {
		t.Fatal("a job opted out by default")
	}
}
