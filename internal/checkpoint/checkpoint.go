// Package checkpoint knows how a trainer lays out its checkpoints and when
// one is finished, and checks the manifests that make an uploaded checkpoint
// complete. It does no I/O; workerd's side (watching, uploading, restoring)
// is in checkpoint/keeper, the files as the job sees them in checkpoint/jobfs.
//
// The layout is SimpleTuner's: under the training config's output_dir, each
// checkpoint is a directory checkpoint-<global step>, or
// checkpoint-<step>-<suffix> (checkpoint-500-rolling for its rolling
// checkpoints). A directory whose name ends in "tmp" (checkpoint-500-tmp,
// written with --checkpointing_use_tempdir and renamed when done) is a save in
// progress and never a checkpoint.
//
// When is a checkpoint finished? SimpleTuner saves one at a time, in the
// training loop: it creates the directory, writes the accelerator state
// (model, optimizer, scheduler, random states), the samplers'
// training_state*.json and checkpoint_manifest.json, and last of all the
// guard file ".guard", written to ".guard.tmp" and renamed; before saving
// into a directory that exists it removes the old guard. It prunes old
// checkpoints (checkpoints_total_limit) after a save. So:
//
//  1. A directory holding ".guard" is finished.
//  2. Once any checkpoint of the output directory holds a guard, the trainer
//     writes guards, and a directory without one is never finished: it is
//     being written, or was left half-written by a save that was cut off.
//  3. For a trainer that writes no guard (SimpleTuner before guards, other
//     trainers), a checkpoint is finished once the trainer has started a
//     later one: a directory with a higher step that appeared after it did.
//  4. Such a trainer's checkpoints are also finished when it exits with
//     status 0.
//
// Directories already there when the attempt started (left by an earlier
// attempt on the same machine) are finished by rule 1 only: nothing is known
// of how their save ended. A directory that merely stopped changing is not
// taken for finished: a save that stalls looks the same.
package checkpoint

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Guard is the file SimpleTuner writes last into a checkpoint it finished.
const Guard = ".guard"

// Dir is a checkpoint directory's name and what it says.
type Dir struct {
	Name   string // checkpoint-<step>[-<suffix>]
	Step   int64
	Suffix string // "" or e.g. "rolling"
}

// Parse reads a directory name; ok is false for anything that is not a
// checkpoint (a save in progress included).
func Parse(name string) (d Dir, ok bool) {
	rest, found := strings.CutPrefix(name, "checkpoint-")
	if !found || strings.HasSuffix(name, "tmp") {
		return Dir{}, false
	}
	digits, suffix, _ := strings.Cut(rest, "-")
	if digits == "" || len(digits) > 18 || strings.Trim(digits, "0123456789") != "" {
		return Dir{}, false
	}
	if strings.Contains(rest, "-") && (suffix == "" || !wordChars(suffix)) {
		return Dir{}, false
	}
	step, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return Dir{}, false
	}
	return Dir{Name: name, Step: step, Suffix: suffix}, true
}

func wordChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return len(s) <= 64
}

// Newer orders checkpoints newest first: by step, then a plain checkpoint
// before a suffixed one of the same step, then by name.
func Newer(a, b Dir) int {
	return cmp.Or(cmp.Compare(b.Step, a.Step), cmp.Compare(a.Suffix, b.Suffix), strings.Compare(a.Name, b.Name))
}

// Entry is a checkpoint directory as one look at the output directory saw
// it.
type Entry struct {
	Dir
	Guarded bool // it holds Guard
}

// Tracker applies the finished rule (see the package comment) to successive
// looks at one attempt's output directory. The first look must be taken
// before the trainer starts.
type Tracker struct {
	looks   int
	first   map[string]int // name → the look that first saw it; 0 for those there at the start
	guarded bool           // the trainer writes guards
}

// NewTracker returns a Tracker that has looked nowhere yet.
func NewTracker() *Tracker { return &Tracker{first: map[string]int{}} }

// Look records what one look at the output directory found and returns the
// finished checkpoints, newest first. exitedOK says the trainer has exited
// with status 0 (rule 4).
func (t *Tracker) Look(entries []Entry, exitedOK bool) []Dir {
	now := t.looks
	t.looks++
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		present[e.Name] = true
		if _, ok := t.first[e.Name]; !ok {
			t.first[e.Name] = now
		}
		if e.Guarded {
			t.guarded = true
		}
	}
	for name := range t.first {
		if !present[name] {
			delete(t.first, name) // pruned: a later directory of that name is new
		}
	}
	var out []Dir
	for _, e := range entries {
		if t.finished(e, entries, exitedOK) {
			out = append(out, e.Dir)
		}
	}
	slices.SortFunc(out, Newer)
	return out
}

func (t *Tracker) finished(e Entry, all []Entry, exitedOK bool) bool {
	switch {
	case e.Guarded:
		return true
	case t.guarded || t.first[e.Name] == 0:
		return false
	case exitedOK:
		return true
	}
	for _, o := range all {
		if o.Step > e.Step && t.first[o.Name] >= t.first[e.Name] {
			return true
		}
	}
	return false
}
