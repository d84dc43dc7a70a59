package keeper

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
)

// Watcher keeps the checkpoints of one running attempt: it looks at the
// output directory when inotify says something appeared there or in a
// checkpoint being written (see notifier), and every j.Scan whatever it
// says, and uploads the newest finished checkpoint not kept yet. One upload
// runs at a time; checkpoints that finish while one is uploading are passed
// over for the newest.
type Watcher struct {
	k      *Keeper
	c      *client
	j      Job
	id     jobfs.Ident
	log    *slog.Logger
	skipTo int64 // checkpoints at or below this step are kept already (the restored one)

	tracker  *checkpoint.Tracker
	root     *jobfs.Dir
	last     []checkpoint.Entry // what the last look found
	finished map[string]bool    // which of them were finished
	done     map[string]bool    // kept, or not to be tried again
	over     bool               // the orchestrator ended the attempt's uploads
	warned   bool               // the output directory's refusal was logged
	opens    int                // tries to open the output directory, each a walk of its path as the job

	stop    chan struct{}
	stopped chan struct{}
	started bool
	cancel  context.CancelFunc // ends an upload in progress
	once    sync.Once

	watchAfter time.Duration // how long the attempt runs before inotify watches it
	notified   atomic.Bool   // the inotify instance was made
}

// watchAfter is how long an attempt runs before its output directory is
// watched with inotify.
const watchAfter = settle

// Watch returns the watcher of attempt j, whose files belong to id; its
// first look at the output directory is taken now, before the trainer
// starts. restoredStep is the step of the checkpoint the attempt resumes
// from (-1: none).
func (k *Keeper) Watch(j Job, id jobfs.Ident, restoredStep int64) *Watcher {
	w := &Watcher{k: k, c: k.client(j), j: j, id: id, skipTo: restoredStep, tracker: checkpoint.NewTracker(),
		done: map[string]bool{}, stop: make(chan struct{}), stopped: make(chan struct{}), watchAfter: watchAfter,
		log: k.opt.Log.With("job_id", j.ID, "attempt", j.Attempt)}
	w.look(false)
	return w
}

// Start runs the watcher beside the training until Finish or ctx ends.
func (w *Watcher) Start(ctx context.Context, wg *sync.WaitGroup) {
	w.started = true
	ctx, w.cancel = context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(w.stopped)
		t := time.NewTicker(w.j.Scan)
		defer t.Stop()
		// The inotify instance is made once the attempt has run for
		// watchAfter: an attempt that ends sooner (a failed start, a
		// zero-work job) costs none. Its first watch causes a look, which
		// sees whatever the trainer wrote before.
		n := &notifier{w: w, dirs: map[string]*jobfs.Dir{}}
		defer func() { n.close() }()
		arm := time.NewTimer(w.watchAfter)
		defer arm.Stop()
		var soon <-chan time.Time // a look after a change, once it settled
		for {
			select {
			case <-ctx.Done():
				return
			case <-w.stop:
				return
			case <-arm.C:
				n = w.newNotifier()
				w.notified.Store(n.fsw != nil)
				if n.sync() {
					soon = time.After(settle)
				}
				continue
			case <-t.C:
			case ev, ok := <-n.events():
				if !ok {
					n.giveUp("the inotify watcher stopped")
				}
				if ok && relevant(ev) && soon == nil {
					soon = time.After(settle)
				}
				continue
			case err := <-n.errors():
				// Events lost (the queue overflowed while an upload ran):
				// a look sees everything anyway.
				w.log.Debug("inotify", "err", err)
				if soon == nil {
					soon = time.After(settle)
				}
				continue
			case <-soon:
			}
			soon = nil
			w.pass(ctx, false)
			if n.sync() {
				soon = time.After(settle)
			}
		}
	}()
}

// Finish stops the watcher. When the attempt ended by itself (final), an
// upload in progress may end, then the newest finished checkpoint not kept
// yet and, when the trainer exited with status 0, the outputs are uploaded;
// otherwise an upload in progress is given up.
func (w *Watcher) Finish(ctx context.Context, final, exitedOK bool) {
	w.once.Do(func() {
		close(w.stop)
		if w.started {
			if !final {
				w.cancel()
			}
			<-w.stopped
			w.cancel()
		}
		if final && ctx.Err() == nil {
			// The last look opens the output directory if it exists by
			// now; the trainer has exited, so the outputs are taken from
			// what that look found instead of a second try.
			w.pass(ctx, exitedOK)
			if exitedOK && !w.over {
				w.outputs(ctx)
			}
		}
		if w.root != nil {
			w.root.Close()
		}
	})
}

// open opens the output directory once it exists.
func (w *Watcher) open() *jobfs.Dir {
	if w.root == nil {
		w.opens++
		root, err := jobfs.Open(w.j.Dir, w.j.Output, w.id)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !w.warned {
				w.warned = true
				w.log.Warn("the output directory cannot be opened; its checkpoints are not kept while it cannot", "err", err)
				w.j.note("checkpoints are not kept: the output directory cannot be opened (%v)", err)
			}
			return nil
		}
		w.root = root
	}
	return w.root
}

// entries lists the checkpoint directories of the output directory.
func (w *Watcher) entries() []checkpoint.Entry {
	root := w.open()
	if root == nil {
		return nil
	}
	list, err := root.ReadDir("")
	if err != nil {
		w.log.Warn("cannot list the output directory", "dir", root.Path, "err", err)
		return nil
	}
	var out []checkpoint.Entry
	for _, e := range list {
		d, ok := checkpoint.Parse(e.Name)
		if !ok || !e.Type.IsDir() {
			continue
		}
		out = append(out, checkpoint.Entry{Dir: d, Guarded: root.Exists(e.Name + "/" + checkpoint.Guard)})
	}
	return out
}

// look lists the output directory's checkpoints and returns the finished
// ones, newest first; what it found is kept for the notifier.
func (w *Watcher) look(exitedOK bool) []checkpoint.Dir {
	w.last = w.entries()
	finished := w.tracker.Look(w.last, exitedOK)
	w.finished = make(map[string]bool, len(finished))
	for _, d := range finished {
		w.finished[d.Name] = true
	}
	return finished
}

// pass looks once and uploads the newest finished checkpoint not kept yet.
func (w *Watcher) pass(ctx context.Context, exitedOK bool) {
	if w.over {
		return
	}
	finished := w.look(exitedOK)
	var next *checkpoint.Dir
	for i, d := range finished {
		if d.Step > w.skipTo && !w.done[d.Name] {
			next = &finished[i]
			break
		}
	}
	if next == nil {
		return
	}
	w.log.Info("uploading checkpoint", "checkpoint", next.Name, "step", next.Step)
	up, err := w.k.uploadCheckpoint(ctx, w.c, w.j, w.root, *next)
	var nk *notKept
	switch {
	case err == nil:
		w.done[next.Name] = true
		w.log.Info("checkpoint kept in the artifact store", "checkpoint", next.Name, "step", next.Step, "files", up.files,
			"bytes", up.bytes, "seconds", up.took.Seconds())
		w.j.note("%s (step %d, %s, %d files) kept in the artifact store in %.1f s", next.Name, next.Step, size(up.bytes),
			up.files, up.took.Seconds())
	case errors.As(err, &nk):
		w.done[next.Name] = true
		w.log.Warn("checkpoint not kept; training goes on", "checkpoint", next.Name, "reason", nk.why)
		w.j.note("%s is not kept: %s; training goes on", next.Name, nk.why)
	case over(err):
		w.over = true
		w.log.Info("the orchestrator ended this attempt's uploads; its checkpoints are no longer kept", "err", err)
	case ctx.Err() != nil:
	default:
		w.log.Warn("checkpoint upload failed; trying again at the next look", "checkpoint", next.Name, "err", err)
	}
}

// outputs uploads the final outputs of a trainer that exited with status 0,
// from the output directory as the final look (pass) opened it.
func (w *Watcher) outputs(ctx context.Context) {
	root := w.root
	if root == nil {
		// Not an error, and common (a probe, a trainer that keeps its
		// results elsewhere): at info it was a line per such job.
		w.log.Debug("the trainer left no output directory; no outputs to upload", "output_dir", w.j.Output)
		return
	}
	start := time.Now()
	n, total, err := w.k.uploadOutputs(ctx, w.c, w.j, root)
	if err != nil {
		w.log.Warn("the outputs were not all uploaded", "uploaded", n, "bytes", total, "err", err)
		return
	}
	w.log.Info("outputs uploaded", "files", n, "bytes", total, "seconds", time.Since(start).Seconds())
}
