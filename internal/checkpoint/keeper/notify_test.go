package keeper

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// keptNotes sets a Note on j that reports each checkpoint kept on the
// returned channel.
func keptNotes(j *Job, notes *testutil.Buffer) <-chan string {
	ch := make(chan string, 16)
	j.Note = func(line string) {
		_, _ = notes.Write([]byte(line))
		if name, _, ok := strings.Cut(strings.TrimPrefix(line, "simpletuner-workerd: "), " (step"); ok && strings.Contains(line, "kept in the artifact store") {
			ch <- name
		}
	}
	return ch
}

func waitKept(t *testing.T, ch <-chan string, want string, notes *testutil.Buffer) time.Duration {
	t.Helper()
	start := time.Now()
	// The bound only ends a failing test; the scan interval is an hour.
	bound := time.After(30 * time.Second)
	for {
		select {
		case name := <-ch:
			if name == want {
				return time.Since(start)
			}
		case <-bound:
			t.Fatalf("%s was not uploaded; job log:\n%s", want, notes.String())
		}
	}
}

// writeAs writes a checkpoint as SimpleTuner does (files, then the guard
// written aside and renamed into place), owned by id.
func writeAs(t *testing.T, out, name string, id jobfs.Ident, files map[string]string) {
	t.Helper()
	writeCheckpoint(t, out, name, files, false)
	tmp := filepath.Join(out, name, ".guard.tmp")
	if err := os.WriteFile(tmp, []byte("complete\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id.Switch {
		chownTree(t, out, id)
	}
	if err := os.Rename(tmp, filepath.Join(out, name, ".guard")); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint leaves the worker as soon as the trainer finished writing it:
// the output directory is watched (inotify), and the scan, an hour here,
// plays no part. The output directory does not exist yet when the watch
// starts, as before SimpleTuner's first save.
func TestUploadedWhenWritten(t *testing.T) {
	id := self
	if os.Geteuid() == 0 {
		id = jobfs.Ident{UID: 1879113003, GID: 1879113003, Switch: true}
	}
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "run/out"}`)
	work := passable(t, t.TempDir())
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, nil)
	kept := keptNotes(&j, notes)
	if j.Scan != time.Hour {
		t.Fatalf("scan interval %v", j.Scan)
	}
	if id.Switch {
		chownTree(t, j.Dir, id)
		os.Chmod(j.Dir, 0o700)
	}
	k := o.keeper(work)
	w := k.Watch(j, id, -1)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	w.Start(ctx, &wg)

	out := filepath.Join(j.Dir, "run", "out")
	writeAs(t, out, "checkpoint-10", id, map[string]string{"model.safetensors": "ten", "optimizer/state.bin": "adam"})
	took := waitKept(t, kept, "checkpoint-10", notes)
	t.Logf("checkpoint-10 kept %v after its guard", took)
	writeAs(t, out, "checkpoint-20", id, map[string]string{"model.safetensors": "twenty"})
	waitKept(t, kept, "checkpoint-20", notes)
	w.Finish(ctx, false, false)
	if cs := o.checkpoints(jobID); len(cs) != 2 || cs[0].Name != "checkpoint-20" {
		t.Fatalf("checkpoints: %+v", cs)
	}
}

// An attempt that ends before watchAfter never makes an inotify instance
// (a zero-work job, a failed start); one that runs longer is watched from
// then on, and the look its first watch causes finds a checkpoint written
// before the watching began (the scan, an hour here, plays no part).
func TestWatchedOnlyAfterAWhile(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, nil)
	kept := keptNotes(&j, notes)
	k := o.keeper(work)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()

	short := k.Watch(j, self, -1)
	short.watchAfter = time.Hour
	short.Start(ctx, &wg)
	short.Finish(ctx, false, false)
	if short.notified.Load() {
		t.Fatal("an attempt that ended at once made an inotify instance")
	}

	long := k.Watch(j, self, -1)
	long.watchAfter = 100 * time.Millisecond
	long.Start(ctx, &wg)
	writeCheckpoint(t, filepath.Join(j.Dir, "out"), "checkpoint-5", map[string]string{"m": "five"}, true)
	waitKept(t, kept, "checkpoint-5", notes)
	if !long.notified.Load() {
		t.Fatal("checkpoint-5 kept, but not by the watch's look")
	}
	long.Finish(ctx, false, false)
}

// The watches a job can cause are bounded, and never follow its links: a
// job with more unfinished checkpoint directories than the bound is looked
// at by the scan alone, which the log says once, and its checkpoints still
// leave at the scan.
func TestWatchesBounded(t *testing.T) {
	t.Parallel()
	o := startOrch(t)
	jobID := o.submit(`{"output_dir": "out"}`)
	work := t.TempDir()
	notes := &testutil.Buffer{}
	j := jobFor(t, o.dispatch(jobID), work, nil)
	kept := keptNotes(&j, notes)
	out := filepath.Join(j.Dir, "out")
	outside := t.TempDir()
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(out, "checkpoint-1")); err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, out, "checkpoint-2", map[string]string{"m": "half"}, false)
	k := o.keeper(work)
	logs := &testutil.Buffer{}
	k.opt.Log = slog.New(slog.NewTextHandler(logs, nil))

	w := k.Watch(j, self, -1)
	n := w.newNotifier()
	n.sync()
	if n.fsw == nil || !n.base || len(n.dirs) != 1 || n.dirs["checkpoint-2"] == nil {
		t.Fatalf("watched: base %v, %v", n.base, n.dirs)
	}
	n.close()
	// Turned off: the scan alone, and nothing said.
	j.ScanOnly = true
	if n := k.Watch(j, self, -1).newNotifier(); n.sync() || n.fsw != nil {
		t.Fatal("watching with checkpoint_watch off")
	}
	j.ScanOnly = false

	for i := range maxWatches {
		writeCheckpoint(t, out, "checkpoint-"+strconv.Itoa(100+i), map[string]string{"m": "half"}, false)
	}
	j.Scan = 50 * time.Millisecond
	w = k.Watch(j, self, -1)
	w.watchAfter = 0 // watched from the start, so that the fallback comes before the scan keeps checkpoint-500
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	w.Start(ctx, &wg)
	writeCheckpoint(t, out, "checkpoint-500", map[string]string{"m": "done"}, true)
	waitKept(t, kept, "checkpoint-500", notes)
	w.Finish(ctx, false, false)
	if c := strings.Count(logs.String(), "checkpoints are no longer watched as they are written"); c != 1 ||
		!strings.Contains(logs.String(), "more than 63 checkpoints not finished yet") {
		t.Fatalf("%d lines about the fallback:\n%s", c, logs.String())
	}
}
