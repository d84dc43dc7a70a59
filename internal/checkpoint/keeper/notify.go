package keeper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
)

// maxWatches bounds the inotify watches of one attempt: its output
// directory and the checkpoints in it that are not finished yet. A job that
// leaves more unfinished checkpoint directories than that is looked at by
// the scan alone, so no job can use up the machine's watches.
const maxWatches = 64

// settle is how long a change waits before the look it causes: a burst of
// changes (the files of a checkpoint being created) makes one look.
const settle = 200 * time.Millisecond

// notifier tells a Watcher when its output directory changed, so that a
// checkpoint leaves the worker as soon as it is finished rather than at the
// next scan. It watches the directories the watcher holds open, through
// their descriptors (as the job, never through a path the job could turn
// into a link): the output directory, or while there is none its deepest
// existing parent inside the job's directory, and each checkpoint in it not
// finished yet, where the guard file appears. A watch added after a look is
// followed by another look, which sees what came in between. Whether a
// checkpoint is finished is still decided by a look (checkpoint.Tracker); an
// event only makes the look come sooner. Used by the watcher's goroutine
// only.
type notifier struct {
	w        *Watcher
	fsw      *fsnotify.Watcher // nil: the scan alone
	ancestor *jobfs.Dir        // watched while the output directory does not exist
	ancRel   string
	base     bool                  // the output directory is watched
	dirs     map[string]*jobfs.Dir // watched checkpoints, by name
}

// newNotifier starts an inotify instance; sync adds the watches. On failure
// the scan goes on alone.
func (w *Watcher) newNotifier() *notifier {
	n := &notifier{w: w, dirs: map[string]*jobfs.Dir{}}
	if w.j.ScanOnly {
		return n
	}
	// Watches are added through the held descriptors (jobfs.Dir.Watch).
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		n.giveUp(fmt.Sprintf("/proc is not mounted (%v)", err))
		return n
	}
	fsw, err := fsnotify.NewBufferedWatcher(256)
	if err != nil {
		n.giveUp(fmt.Sprintf("inotify is not available (%v)", err))
		return n
	}
	n.fsw = fsw
	return n
}

// events and errors are nil (never ready) once the scan is alone.
func (n *notifier) events() <-chan fsnotify.Event {
	if n.fsw == nil {
		return nil
	}
	return n.fsw.Events
}

func (n *notifier) errors() <-chan error {
	if n.fsw == nil {
		return nil
	}
	return n.fsw.Errors
}

// relevant reports whether an event may make a checkpoint finished: a name
// that appeared (created, or renamed into place, as the guard and a
// checkpoint saved under a temporary name are). Writes into files and
// removals do not.
func relevant(ev fsnotify.Event) bool { return ev.Has(fsnotify.Create) }

// sync makes the watches match the watcher's last look: the output
// directory (or its deepest existing parent) and each checkpoint in it not
// finished yet (whatever is finished needs no more events). It reports whether it added a watch:
// what changed between that look and the watch was not seen, so another
// look is due.
func (n *notifier) sync() (added bool) {
	if n.fsw == nil {
		return false
	}
	w := n.w
	if w.root == nil {
		return n.watchAncestor()
	}
	if n.ancestor != nil {
		n.drop(n.ancestor)
		n.ancestor = nil
	}
	if !n.base {
		if !n.add(w.root) {
			return false
		}
		n.base, added = true, true
	}
	want := map[string]bool{}
	for _, e := range w.last {
		if !w.finished[e.Name] && !w.done[e.Name] {
			want[e.Name] = true
		}
	}
	for name, d := range n.dirs {
		if !want[name] {
			n.drop(d)
			delete(n.dirs, name)
		}
	}
	for name := range want {
		if n.fsw == nil {
			return false
		}
		if n.dirs[name] != nil {
			continue
		}
		if 1+len(n.dirs) >= maxWatches {
			n.giveUp(fmt.Sprintf("the output directory holds more than %d checkpoints not finished yet", maxWatches-1))
			return false
		}
		d, err := w.root.Sub(name)
		if err != nil {
			continue // gone, or not a directory: the next look says
		}
		if n.add(d) {
			n.dirs[name], added = d, true
		} else {
			d.Close()
		}
	}
	return added
}

// watchAncestor watches the deepest directory on the way to the output
// directory that exists, so that the output directory's creation is seen;
// it reports whether it added a watch.
func (n *notifier) watchAncestor() bool {
	w := n.w
	rel := filepath.ToSlash(w.j.Output)
	for {
		rel = parentOf(rel)
		if n.ancestor != nil && n.ancRel == rel {
			return false
		}
		d, err := jobfs.Open(w.j.Dir, rel, w.id)
		if err != nil {
			if rel == "" {
				return false
			}
			continue
		}
		if n.ancestor != nil {
			n.drop(n.ancestor)
			n.ancestor = nil
		}
		if !n.add(d) {
			d.Close()
			return false
		}
		n.ancestor, n.ancRel = d, rel
		return true
	}
}

func parentOf(rel string) string {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ""
	}
	return rel[:i]
}

// add watches d; false when it could not. The kernel's limit on watches
// ends watching for this attempt; a directory the job cannot read, or one
// gone meanwhile, is left to the scan.
func (n *notifier) add(d *jobfs.Dir) bool {
	err := d.Watch(n.fsw.Add)
	switch {
	case err == nil:
		return true
	case errors.Is(err, syscall.ENOSPC):
		n.giveUp("the machine's inotify watches are used up (sysctl fs.inotify.max_user_watches)")
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOTDIR):
	default:
		n.giveUp(fmt.Sprintf("a directory cannot be watched (%v)", err))
	}
	return false
}

// drop stops watching d and closes it.
func (n *notifier) drop(d *jobfs.Dir) {
	if n.fsw != nil {
		_ = n.fsw.Remove(d.ProcPath())
	}
	if d != n.w.root {
		d.Close()
	}
}

// giveUp leaves the attempt to the scan, saying so once.
func (n *notifier) giveUp(why string) {
	n.w.log.Warn("checkpoints are no longer watched as they are written; they are found by the scan alone",
		"reason", why, "checkpoint_scan_interval", n.w.j.Scan.String())
	n.close()
}

// close ends the watching.
func (n *notifier) close() {
	if n.fsw != nil {
		_ = n.fsw.Close()
		n.fsw = nil
	}
	for name, d := range n.dirs {
		d.Close()
		delete(n.dirs, name)
	}
	if n.ancestor != nil {
		n.ancestor.Close()
		n.ancestor = nil
	}
	n.base = false
}
