package keeper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Restored is the newest complete checkpoint of a job, downloaded and
// verified for a new attempt. It waits in workerd's staging directory until
// Place moves it into the job's output directory, where the trainer resumes
// from it.
type Restored struct {
	Checkpoint protocol.Checkpoint
	// Path is where the trainer finds it: <job dir>/<output dir>/<name>.
	Path string
	Took time.Duration
	// Skipped are the newer checkpoints that could not be restored, and why.
	Skipped []string

	jobDir, output string
	stage          string // the attempt's staging directory
}

// Restore downloads the newest complete checkpoint of j's job that arrives
// whole and matches its manifest; a checkpoint that does not (a file
// missing or corrupt in the store) is passed over for the one before it.
// Without any it returns nil, nil; an error means the checkpoints could not
// be listed.
func (k *Keeper) Restore(ctx context.Context, j Job) (*Restored, error) {
	c := k.client(j)
	var list protocol.CheckpointList
	if err := k.retry(ctx, func() (err error) { list, err = c.list(ctx); return err }); err != nil {
		return nil, err
	}
	if len(list.Checkpoints) == 0 {
		return nil, nil
	}
	start := time.Now()
	r := &Restored{jobDir: j.Dir, output: j.Output,
		stage: filepath.Join(k.stagingDir(), fmt.Sprintf("%s-%d", j.ID, j.Attempt))}
	// Jobs running as other uids pass through the staging directory to
	// their own restore when it is moved into place.
	if err := os.MkdirAll(k.stagingDir(), 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(k.stagingDir(), 0o711); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(r.stage)
	if err := os.Mkdir(r.stage, 0o700); err != nil {
		return nil, err
	}
	for _, cp := range list.Checkpoints {
		err := k.download(ctx, c, cp, filepath.Join(r.stage, cp.Name))
		if err == nil {
			r.Checkpoint = cp
			r.Path = filepath.Join(j.Dir, j.Output, cp.Name)
			r.Took = time.Since(start)
			return r, nil
		}
		_ = os.RemoveAll(filepath.Join(r.stage, cp.Name))
		if ctx.Err() != nil {
			r.Discard()
			return nil, ctx.Err()
		}
		why := fmt.Sprintf("%s of attempt %d: %v", cp.Name, cp.Attempt, err)
		r.Skipped = append(r.Skipped, why)
		k.opt.Log.Warn("a checkpoint could not be restored; trying the one before it", "job_id", j.ID, "attempt", j.Attempt,
			"checkpoint", cp.Name, "of_attempt", cp.Attempt, "err", err)
	}
	r.Discard()
	return &Restored{Skipped: r.Skipped}, nil
}

// download fetches every file of cp into dir and checks each against the
// manifest's size and SHA-256.
func (k *Keeper) download(ctx context.Context, c *client, cp protocol.Checkpoint, dir string) error {
	if err := checkpoint.ValidateCommit(protocol.CheckpointCommit{Name: cp.Name, Step: cp.Step, Files: cp.Files, Keep: 1}); err != nil {
		return fmt.Errorf("its manifest: %w", err)
	}
	for _, f := range cp.Files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		err := k.retry(ctx, func() error {
			out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			n, sum, err := c.get(ctx, cp, f.Path, out)
			if err == nil {
				err = out.Sync()
			}
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			switch {
			case err != nil:
				return err
			case n != f.Size || sum != f.SHA256:
				return fmt.Errorf("%s arrived as %d bytes with SHA-256 %s; the manifest says %d bytes and %s", f.Path, n, sum, f.Size, f.SHA256)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Found reports whether a checkpoint was restored.
func (r *Restored) Found() bool { return r != nil && r.Path != "" }

// Place gives the restored checkpoint to the job (id) and moves it into the
// job's output directory, as the job, replacing a directory of that name and
// removing the checkpoints of higher steps an earlier attempt left on this
// machine (the trainer starts again from the restored step and writes them
// again). The job's directory must be the job's. The output directory is
// held open from its first look on, and everything below it is reached
// from it: a link an earlier attempt left on the way is refused, never
// followed.
func (r *Restored) Place(id jobfs.Ident) error {
	defer r.Discard()
	if err := jobfs.Chown(r.stage, id); err != nil {
		return fmt.Errorf("giving the restored checkpoint to the job: %w", err)
	}
	if err := jobfs.MkdirAll(r.jobDir, r.output, id); err != nil {
		return fmt.Errorf("making the output directory: %w", err)
	}
	out, err := jobfs.Open(r.jobDir, r.output, id)
	if err != nil {
		return err
	}
	defer out.Close()
	entries, err := out.ReadDir("")
	if err != nil {
		return err
	}
	for _, e := range entries {
		d, ok := checkpoint.Parse(e.Name)
		stale := ok && (d.Step > r.Checkpoint.Step || e.Name == r.Checkpoint.Name) ||
			!ok && strings.HasPrefix(e.Name, "checkpoint-") && strings.HasSuffix(e.Name, "tmp")
		if !stale {
			continue
		}
		if err := out.RemoveAll(e.Name); err != nil {
			return fmt.Errorf("removing %s left by an earlier attempt: %w", e.Name, err)
		}
	}
	if err := out.MoveIn(r.stage, r.Checkpoint.Name); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			err = fmt.Errorf("%w: the job's output directory is on another filesystem than the work directory", err)
		}
		return fmt.Errorf("moving the restored checkpoint into place: %w", err)
	}
	return nil
}

// Discard removes what is left of the restore in the staging directory.
func (r *Restored) Discard() {
	if r != nil && r.stage != "" {
		_ = removeStage(r.stage)
	}
}

// removeStage removes a staged restore: its contents as their owner (once
// given to the job, workerd cannot reach into it), then the directory
// itself, which lies in workerd's staging directory.
func removeStage(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	id := jobfs.Ident{}
	if info, err := os.Lstat(path); err == nil {
		if uid, gid, ok := owner(info); ok && uid != os.Geteuid() {
			id = jobfs.Ident{UID: uid, GID: gid, Switch: true}
		}
	}
	_ = jobfs.RemoveAll(path, id)
	return os.RemoveAll(path)
}
