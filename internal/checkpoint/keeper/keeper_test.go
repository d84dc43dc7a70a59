package keeper

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

func TestOutputDir(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg, want string
		ok        bool
	}{
		{`{}`, "simpletuner-results", true},
		{`{"--output_dir": "out/models"}`, "out/models", true},
		{`{"output_dir": "./out/"}`, "out", true},
		{`{"output_dir": "/w/j_1/out"}`, "out", true},
		{`{"output_dir": "/elsewhere/out"}`, "", false},
		{`{"output_dir": "../j_2/out"}`, "", false},
		{`{"output_dir": "."}`, "", false},
		{`{"output_dir": "/w/j_1"}`, "", false},
	} {
		got, err := OutputDir([]byte(c.cfg), "/w/j_1")
		if got != c.want || (err == nil) != c.ok || err != nil && !errors.Is(err, ErrOutsideJob) {
			t.Errorf("%s: %q %v", c.cfg, got, err)
		}
	}
}

// A finished checkpoint leaves the worker and is committed; a retry on
// another machine gets it back, verified, where the trainer resumes, and
// the leftovers of higher steps an earlier attempt left are removed.
func TestKeepAndRestore(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"--output_dir": "out"}`)
	ev := o.dispatch(jobID)
	notes := &testutil.Buffer{}
	work := t.TempDir()
	k := o.keeper(work)
	j := jobFor(t, ev, work, notes)
	out := filepath.Join(j.Dir, "out")
	w := k.Watch(j, self, -1)
	ctx := t.Context()

	// Being written: nothing goes.
	writeCheckpoint(t, out, "checkpoint-10", map[string]string{"model.safetensors": "weights-10", "optimizer/state.bin": "adam"}, false)
	w.pass(ctx, false)
	if got := o.stored(jobID); len(got) != 0 {
		t.Fatalf("an unfinished checkpoint was uploaded: %v", got)
	}
	writeCheckpoint(t, out, "checkpoint-10", nil, true)
	w.pass(ctx, false)
	cs := o.checkpoints(jobID)
	if len(cs) != 1 || cs[0].Name != "checkpoint-10" || len(cs[0].Files) != 3 || cs[0].Attempt != 1 {
		t.Fatalf("after the guard: %+v", cs)
	}
	if !strings.Contains(notes.String(), "checkpoint-10 (step 10, 23 B, 3 files) kept in the artifact store") {
		t.Errorf("job log: %q", notes.String())
	}
	writeCheckpoint(t, out, "checkpoint-20", map[string]string{"model.safetensors": "weights-20"}, true)
	os.WriteFile(filepath.Join(out, "pytorch_lora_weights.safetensors"), []byte("final"), 0o644)
	w.Finish(ctx, true, true)
	if cs := o.checkpoints(jobID); len(cs) != 2 || cs[0].Name != "checkpoint-20" {
		t.Fatalf("after the end: %+v", cs)
	}
	if got := o.stored(jobID); !slices.Contains(got, "1/outputs/pytorch_lora_weights.safetensors") ||
		slices.Contains(got, "1/outputs/checkpoint-20/model.safetensors") {
		t.Fatalf("outputs: %v", got)
	}

	// The retry, on another worker whose job directory holds leftovers.
	o.lose(jobID)
	ev2 := o.dispatch(jobID)
	work2 := t.TempDir()
	k2 := o.keeper(work2)
	j2 := jobFor(t, ev2, work2, nil)
	out2 := filepath.Join(j2.Dir, "out")
	writeCheckpoint(t, out2, "checkpoint-20", map[string]string{"stale": "x"}, true)
	writeCheckpoint(t, out2, "checkpoint-30", map[string]string{"model.safetensors": "half"}, false)
	writeCheckpoint(t, out2, "checkpoint-5", map[string]string{"model.safetensors": "old"}, true)
	r, err := k2.Restore(ctx, j2)
	if err != nil || !r.Found() || r.Checkpoint.Name != "checkpoint-20" || r.Path != filepath.Join(out2, "checkpoint-20") {
		t.Fatalf("Restore = %+v %v", r, err)
	}
	if err := r.Place(self); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out2, "checkpoint-20", "model.safetensors"))
	if err != nil || string(b) != "weights-20" {
		t.Fatalf("restored: %q %v", b, err)
	}
	for name, want := range map[string]bool{"checkpoint-20/stale": false, "checkpoint-30": false, "checkpoint-5": true, "checkpoint-20/.guard": true} {
		if _, err := os.Stat(filepath.Join(out2, name)); (err == nil) != want {
			t.Errorf("%s after the restore: %v", name, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(work2, ".restore")); len(ents) != 0 {
		t.Errorf("staging left: %v", ents)
	}
	// The restored checkpoint is kept already: the retry's watcher does not
	// upload it again.
	w2 := k2.Watch(j2, self, r.Checkpoint.Step)
	w2.Finish(ctx, true, false)
	if got := o.stored(jobID); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "2/") }) {
		t.Fatalf("the retry uploaded again: %v", got)
	}
}

// A checkpoint whose stored file is corrupt is passed over for the one
// before it.
func TestRestoreSkipsACorruptCheckpoint(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	j := jobFor(t, o.dispatch(jobID), work, nil)
	k := o.keeper(work)
	w := k.Watch(j, self, -1)
	out := filepath.Join(j.Dir, "out")
	writeCheckpoint(t, out, "checkpoint-10", map[string]string{"m": "ten"}, true)
	w.pass(t.Context(), false)
	writeCheckpoint(t, out, "checkpoint-20", map[string]string{"m": "twenty"}, true)
	w.pass(t.Context(), false)
	if len(o.checkpoints(jobID)) != 2 {
		t.Fatal(o.checkpoints(jobID))
	}
	// Bit rot in the store.
	if err := os.WriteFile(filepath.Join(o.arts, jobID, "1", "checkpoints", "checkpoint-20", "m"), []byte("twentY"), 0o600); err != nil {
		t.Fatal(err)
	}
	o.lose(jobID)
	j2 := jobFor(t, o.dispatch(jobID), t.TempDir(), nil)
	r, err := k.Restore(t.Context(), j2)
	if err != nil || !r.Found() || r.Checkpoint.Name != "checkpoint-10" || len(r.Skipped) != 1 ||
		!strings.Contains(r.Skipped[0], "checkpoint-20") {
		t.Fatalf("Restore = %+v %v", r, err)
	}
	r.Discard()
}

// A symbolic link in a checkpoint, or a checkpoint over the job's quota, is
// refused with a line saying why, and nothing of it is uploaded.
func TestRefusedCheckpoints(t *testing.T) {
	t.Parallel()
	o := startOrch(t, func(opt *orchestrator.Options) { opt.ArtifactMaxJobBytes = 1000 })
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, notes)
	k := o.keeper(work)
	w := k.Watch(j, self, -1)
	out := filepath.Join(j.Dir, "out")
	writeCheckpoint(t, out, "checkpoint-1", map[string]string{"m": "x"}, true)
	if err := os.Symlink("/etc/shadow", filepath.Join(out, "checkpoint-1", "leak")); err != nil {
		t.Fatal(err)
	}
	w.pass(t.Context(), false)
	writeCheckpoint(t, out, "checkpoint-2", map[string]string{"m": strings.Repeat("x", 2000)}, true)
	w.pass(t.Context(), false)
	if got := o.stored(jobID); len(got) != 0 || len(o.checkpoints(jobID)) != 0 {
		t.Fatalf("stored: %v", got)
	}
	for _, want := range []string{`checkpoint-1 is not kept: checkpoint-1 holds leak is a symbolic link (to "/etc/shadow")`,
		"checkpoint-2 is not kept: checkpoint-2 (2.0 KiB) is larger than the job's artifact quota (max_job_bytes 1000 B)"} {
		if !strings.Contains(notes.String(), want) {
			t.Errorf("job log lacks %q:\n%s", want, notes.String())
		}
	}
	// Each is tried once.
	w.pass(t.Context(), false)
	if n := strings.Count(notes.String(), "checkpoint-2 is not kept"); n != 1 {
		t.Errorf("checkpoint-2 refused %d times", n)
	}
}

// The trainer prunes a checkpoint while it is uploaded: every file was
// opened before the first was sent, so it is still read whole and kept.
// One pruned before its upload began is not kept, and nothing of it stays.
func TestPrunedWhileUploading(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, notes)
	k := o.keeper(work)
	k.SetRate(256 << 10) // the middle file takes about 4 s
	w := k.Watch(j, self, -1)
	out := filepath.Join(j.Dir, "out")
	big := strings.Repeat("x", 1<<20)
	writeCheckpoint(t, out, "checkpoint-1", map[string]string{"a": "first", "b": big, "c": "last"}, true)
	done := make(chan struct{})
	go func() { defer close(done); w.pass(context.Background(), false) }()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(o.stored(jobID), "1/checkpoints/checkpoint-1/a") {
		if time.Now().After(deadline) {
			t.Fatal("the first file never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.RemoveAll(filepath.Join(out, "checkpoint-1")); err != nil {
		t.Fatal(err)
	}
	<-done
	cs := o.checkpoints(jobID)
	if len(cs) != 1 || cs[0].Name != "checkpoint-1" || cs[0].Bytes != int64(len("first")+len(big)+len("last")+len("complete\n")) {
		t.Fatalf("the pruned checkpoint: %+v", cs)
	}

	// Pruned between the look that found it finished and its upload: the
	// walk and the opening race the trainer; a file gone is "not kept".
	k.SetRate(0)
	writeCheckpoint(t, out, "checkpoint-2", map[string]string{"a": "x"}, true)
	root, err := jobfs.Open(j.Dir, "out", self)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := os.RemoveAll(filepath.Join(out, "checkpoint-2")); err != nil {
		t.Fatal(err)
	}
	_, err = k.uploadCheckpoint(t.Context(), k.client(j), j, root, checkpoint.Dir{Name: "checkpoint-2", Step: 2})
	var nk *notKept
	if !errors.As(err, &nk) || !strings.Contains(nk.why, "checkpoint-2 was removed by the trainer before it was uploaded") {
		t.Fatalf("pruned before the upload: %v", err)
	}
	if got := o.stored(jobID); slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "checkpoint-2") }) {
		t.Fatalf("stored: %v", got)
	}
}

// As root, the keeper reads and restores as the job: a file the job cannot
// read is never uploaded, and what is restored belongs to the job.
func TestAsTheJob(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another uid needs root")
	}
	t.Parallel()
	id := jobfs.Ident{UID: 1879113001, GID: 1879113001, Switch: true}
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	for d := work; d != "/"; d = filepath.Dir(d) {
		st, _ := os.Stat(d)
		os.Chmod(d, st.Mode().Perm()|0o011)
	}
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, notes)
	out := filepath.Join(j.Dir, "out")
	writeCheckpoint(t, out, "checkpoint-1", map[string]string{"m": "mine"}, true)
	writeCheckpoint(t, out, "checkpoint-2", map[string]string{"m": "mine", "secret": "root's"}, true)
	_ = filepath.WalkDir(j.Dir, func(p string, d fs.DirEntry, err error) error {
		if !strings.HasSuffix(p, "secret") {
			os.Lchown(p, id.UID, id.GID)
		}
		return nil
	})
	os.Chmod(filepath.Join(out, "checkpoint-2", "secret"), 0o600)
	// The job's directory is workerd's again, as after the job ended.
	os.Lchown(j.Dir, 0, 0)
	os.Chmod(j.Dir, 0o700)
	k := o.keeper(work)
	w := k.Watch(j, id, -1)
	w.pass(t.Context(), false)
	if cs := o.checkpoints(jobID); len(cs) != 0 || len(o.stored(jobID)) != 0 {
		t.Fatalf("kept a checkpoint with a file the job cannot read: %+v %v", cs, o.stored(jobID))
	}
	if !strings.Contains(notes.String(), "checkpoint-2 is not kept: the job cannot read checkpoint-2/secret") {
		t.Errorf("job log: %s", notes.String())
	}
	writeCheckpoint(t, out, "checkpoint-3", map[string]string{"m": "three"}, true)
	_ = filepath.WalkDir(filepath.Join(out, "checkpoint-3"), func(p string, d fs.DirEntry, err error) error {
		return os.Lchown(p, id.UID, id.GID)
	})
	w.pass(t.Context(), false)
	if cs := o.checkpoints(jobID); len(cs) != 1 || cs[0].Name != "checkpoint-3" {
		t.Fatalf("checkpoints: %+v", cs)
	}
	o.lose(jobID)
	j2 := jobFor(t, o.dispatch(jobID), work, nil)
	r, err := k.Restore(t.Context(), j2)
	if err != nil || !r.Found() {
		t.Fatal(r, err)
	}
	// The job's directory is the job's when the restore is put in place.
	os.Lchown(j2.Dir, id.UID, id.GID)
	if err := r.Place(id); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(filepath.Join(j2.Dir, "out", "checkpoint-3", "m"))
	if err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := owner(st); uid != id.UID {
		t.Fatalf("restored file owned by %d", uid)
	}
	if ents, _ := os.ReadDir(filepath.Join(work, ".restore")); len(ents) != 0 {
		t.Errorf("staging left: %v", ents)
	}
}

// What an earlier attempt left in the job's directory is never followed
// when a restore is put in place: a link in place of a stale checkpoint is
// removed, not what it points at, and an output directory reached through a
// link is refused without anything made at the other end.
func TestRestoreFollowsNoLinkLeftBefore(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "a/out"}`)
	work := t.TempDir()
	k := o.keeper(work)
	j := jobFor(t, o.dispatch(jobID), work, nil)
	writeCheckpoint(t, filepath.Join(j.Dir, "a", "out"), "checkpoint-10", map[string]string{"m": "ten"}, true)
	k.Watch(j, self, -1).Finish(t.Context(), true, false)
	if len(o.checkpoints(jobID)) != 1 {
		t.Fatal(o.checkpoints(jobID))
	}

	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	retry := func() (*Restored, Job) {
		o.lose(jobID)
		j2 := jobFor(t, o.dispatch(jobID), t.TempDir(), nil)
		r, err := k.Restore(t.Context(), j2)
		if err != nil || !r.Found() {
			t.Fatalf("Restore = %+v %v", r, err)
		}
		return r, j2
	}
	r, j2 := retry()
	out2 := filepath.Join(j2.Dir, "a", "out")
	if err := os.MkdirAll(out2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(out2, "checkpoint-30")); err != nil {
		t.Fatal(err)
	}
	if err := r.Place(self); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(out2, "checkpoint-30")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale link: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Errorf("removed through the link: %v", err)
	}

	r, j3 := retry()
	if err := os.Symlink(outside, filepath.Join(j3.Dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := r.Place(self); err == nil {
		t.Fatal("put the restore in place through a link")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("made at the other end of the link: %v", ents)
	}
}

// The end of an attempt looks at the output directory once: a trainer that
// wrote none costs one try to open it (besides the first look's, before it
// started) and no line at info; one that made it only at the end still has
// its outputs uploaded.
func TestFinishOpensTheOutputDirectoryOnce(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	work := t.TempDir()
	var logged testutil.Buffer
	k := o.keeper(work)
	k.opt.Log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))

	silent := o.submit(`{"output_dir": "out"}`)
	w := k.Watch(jobFor(t, o.dispatch(silent), work, nil), self, -1)
	w.Finish(t.Context(), true, true)
	if w.opens != 2 {
		t.Errorf("the missing output directory was tried %d times; want 2 (the first look, the last)", w.opens)
	}
	if strings.Contains(logged.String(), "no output directory") {
		t.Errorf("a job without outputs logged at info:\n%s", logged.String())
	}

	o = startOrch(t) // its one worker is free
	k = o.keeper(work)
	late := o.submit(`{"output_dir": "out"}`)
	j := jobFor(t, o.dispatch(late), work, nil)
	w = k.Watch(j, self, -1)
	if err := os.MkdirAll(filepath.Join(j.Dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(j.Dir, "out", "final.safetensors"), []byte("final"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Finish(t.Context(), true, true)
	if got := o.stored(late); !slices.Contains(got, "1/outputs/final.safetensors") {
		t.Fatalf("outputs made just before the end: stored %v", got)
	}
}
