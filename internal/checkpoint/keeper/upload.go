package keeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint"
	"github.com/simpletuner/simpletuner-orchestration/internal/checkpoint/jobfs"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// Buckets of the job's artifacts.
const (
	checkpointsBucket = "checkpoints"
	outputsBucket     = "outputs"
)

// notKept is a checkpoint that is not kept and not tried again: why is said
// in the log and in the job's log.
type notKept struct{ why string }

func (e *notKept) Error() string { return e.why }

func refuse(format string, args ...any) error { return &notKept{why: fmt.Sprintf(format, args...)} }

// retry runs f until it succeeds, fails for a reason that will not pass, or
// has been tried Retries times, pausing between tries.
func (k *Keeper) retry(ctx context.Context, f func() error) error {
	pause := k.opt.RetryBase
	var err error
	for try := 1; ; try++ {
		if err = f(); err == nil || !transient(err) || try >= k.opt.Retries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

// uploaded describes a kept checkpoint.
type uploaded struct {
	files int
	bytes int64
	took  time.Duration
}

// uploadCheckpoint uploads every file of the finished checkpoint d below
// root and commits it. A *notKept error is final for this checkpoint; an
// error for which over is true ends the attempt's uploads; others may pass.
// What was uploaded of a checkpoint that is not committed is deleted.
func (k *Keeper) uploadCheckpoint(ctx context.Context, c *client, j Job, root *jobfs.Dir, d checkpoint.Dir) (uploaded, error) {
	start := time.Now()
	files, err := root.Walk(d.Name, nil)
	var unsafe *jobfs.UnsafeError
	switch {
	case errors.As(err, &unsafe):
		return uploaded{}, refuse("%s holds %v; a checkpoint is kept only when it holds regular files and directories, nothing is uploaded", d.Name, unsafe)
	case errors.Is(err, fs.ErrNotExist):
		return uploaded{}, refuse("%s was removed by the trainer before it was uploaded", d.Name)
	case err != nil:
		return uploaded{}, err
	case len(files) == 0:
		return uploaded{}, refuse("%s holds no file", d.Name)
	}
	var total int64
	for _, f := range files {
		total += f.Size
	}
	var lim protocol.CheckpointList
	if err := k.retry(ctx, func() (err error) { lim, err = c.list(ctx); return err }); err != nil {
		return uploaded{}, err
	}
	for _, f := range files {
		if f.Size > lim.MaxObjectBytes {
			return uploaded{}, refuse("%s: its file %s (%s) is larger than one artifact may be (max_object_bytes %s); nothing is uploaded",
				d.Name, f.Path, size(f.Size), size(lim.MaxObjectBytes))
		}
	}
	switch {
	case total > lim.MaxJobBytes:
		return uploaded{}, refuse("%s (%s) is larger than the job's artifact quota (max_job_bytes %s); nothing is uploaded",
			d.Name, size(total), size(lim.MaxJobBytes))
	case lim.MaxJobObjects > 0 && lim.JobObjects+len(files) > lim.MaxJobObjects:
		return uploaded{}, refuse("%s (%d files) does not fit in the job's artifacts: %d of max_job_objects %d are stored; nothing is uploaded",
			d.Name, len(files), lim.JobObjects, lim.MaxJobObjects)
	case lim.JobBytes+total > lim.MaxJobBytes:
		return uploaded{}, refuse("%s (%s) does not fit in the job's artifact quota: %s of max_job_bytes %s are in use "+
			"(the quota must hold keep_checkpoints + 1 checkpoints and the outputs); nothing is uploaded",
			d.Name, size(total), size(lim.JobBytes), size(lim.MaxJobBytes))
	}
	guard, guarded := guardOf(root, d.Name)
	// Every file is opened before the first is sent: a checkpoint the
	// trainer prunes meanwhile is still read whole, from the files held
	// open.
	opened := make([]*os.File, 0, len(files))
	defer func() {
		for _, f := range opened {
			f.Close()
		}
	}()
	for _, f := range files {
		fh, err := k.open(root, d.Name+"/"+f.Path)
		if err != nil {
			return uploaded{}, err
		}
		opened = append(opened, fh)
	}
	sent := false
	abort := func(err error) (uploaded, error) {
		if sent {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.opt.RequestTimeout)
			defer cancel()
			if aerr := c.abort(actx, d.Name); aerr != nil {
				k.opt.Log.Warn("what was uploaded of a checkpoint that is not kept stays in the job's artifacts",
					"job_id", j.ID, "attempt", j.Attempt, "checkpoint", d.Name, "err", aerr)
			}
		}
		return uploaded{}, err
	}
	commit := protocol.CheckpointCommit{Name: d.Name, Step: d.Step, Keep: j.Keep}
	total = 0
	for i, f := range files {
		cf, err := k.uploadFrom(ctx, c, opened[i], checkpointsBucket, d.Name, f.Path, &sent)
		if err != nil {
			return abort(err)
		}
		commit.Files = append(commit.Files, cf)
		total += cf.Size
	}
	if guarded {
		now, still := guardOf(root, d.Name)
		switch {
		case still && now != guard, !still && root.Exists(d.Name):
			return abort(refuse("%s is being saved again (its guard changed while it was uploaded); not kept", d.Name))
		}
		// Gone altogether: pruned after every file was read whole, which is
		// as good as kept.
	}
	if err := k.retry(ctx, func() error { return c.commit(ctx, commit) }); err != nil {
		if statusOf(err) == http.StatusUnprocessableEntity {
			err = refuse("the orchestrator refused %s: %v", d.Name, err)
		}
		return abort(err)
	}
	return uploaded{files: len(files), bytes: total, took: time.Since(start)}, nil
}

// guardOf identifies a checkpoint's guard file: a rewrite replaces it.
func guardOf(root *jobfs.Dir, name string) (string, bool) {
	f, err := root.OpenFile(name + "/" + checkpoint.Guard)
	if err != nil {
		return "", false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", false
	}
	return fmt.Sprintf("%v/%d/%d", st.ModTime().UnixNano(), st.Size(), inode(st)), true
}

// open opens the file path below root as the job.
func (k *Keeper) open(root *jobfs.Dir, path string) (*os.File, error) {
	f, err := root.OpenFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, refuse("%s was removed by the trainer before it was uploaded", firstOf(path))
	case errors.Is(err, fs.ErrPermission):
		return nil, refuse("the job cannot read %s, so it is not uploaded", path)
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EXDEV):
		// Resolved below the output directory with no link followed: a
		// directory on the way became a link after the walk.
		return nil, refuse("%s changed while it was uploaded (a directory on the way to %s is no longer one)", firstOf(path), path)
	}
	return f, err
}

// uploadFrom streams f, the file dir/rel, to bucket/dir/rel, and checks that
// it did not change meanwhile. *sent is set once a byte may have been
// stored.
func (k *Keeper) uploadFrom(ctx context.Context, c *client, f *os.File, bucket, dir, rel string, sent *bool) (protocol.CheckpointFile, error) {
	path := rel
	if dir != "" {
		path = dir + "/" + rel
	}
	before, err := f.Stat()
	if err != nil {
		return protocol.CheckpointFile{}, err
	}
	var sum string
	err = k.retry(ctx, func() (err error) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		*sent = true
		body := &exactly{r: f, left: before.Size(), path: path}
		sum, err = c.put(ctx, bucket, path, body, before.Size(), k.rate)
		return err
	})
	switch s := statusOf(err); {
	case err == nil:
	case s == http.StatusInsufficientStorage:
		return protocol.CheckpointFile{}, refuse("the artifact store is full (%v)", err)
	case s == http.StatusRequestEntityTooLarge:
		return protocol.CheckpointFile{}, refuse("the job's artifact quota is reached (%v)", err)
	default:
		return protocol.CheckpointFile{}, err
	}
	after, err := f.Stat()
	if err != nil {
		return protocol.CheckpointFile{}, err
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return protocol.CheckpointFile{}, refuse("%s changed while it was uploaded", path)
	}
	return protocol.CheckpointFile{Path: rel, Size: before.Size(), SHA256: sum}, nil
}

func firstOf(path string) string {
	first, _, _ := strings.Cut(path, "/")
	return first
}

// uploadOutputs uploads what the trainer left in its output directory
// besides its checkpoints to the bucket outputs, under the same paths, and
// returns how many files and bytes it stored. Symbolic links and special
// files are left out, each with a line in the log.
func (k *Keeper) uploadOutputs(ctx context.Context, c *client, j Job, root *jobfs.Dir) (int, int64, error) {
	files, err := root.Walk("", func(p string, e jobfs.Entry) bool {
		if !strings.Contains(p, "/") && e.Type.IsDir() && strings.HasPrefix(e.Name, "checkpoint-") {
			return false // checkpoints are kept as such, in progress or not
		}
		if !e.Type.IsDir() && !e.Type.IsRegular() {
			k.opt.Log.Warn("an output that is not a regular file is not uploaded", "job_id", j.ID, "path", p, "type", e.Type.String())
			j.note("%s/%s is not a regular file; not uploaded", j.Output, p)
			return false
		}
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	var n int
	var total int64
	for _, f := range files {
		sent := false
		fh, err := k.open(root, f.Path)
		if err != nil {
			return n, total, fmt.Errorf("%s: %w", f.Path, err)
		}
		cf, err := k.uploadFrom(ctx, c, fh, outputsBucket, "", f.Path, &sent)
		fh.Close()
		if statusOf(err) == http.StatusBadRequest {
			// A name the artifact store refuses: the others still go.
			k.opt.Log.Warn("an output is not uploaded", "job_id", j.ID, "path", f.Path, "err", err)
			j.note("%s/%s is not uploaded: %v", j.Output, f.Path, err)
			continue
		}
		if err != nil {
			return n, total, fmt.Errorf("%s: %w", f.Path, err)
		}
		n++
		total += cf.Size
	}
	return n, total, nil
}

// inode is a file's inode number (0 where the system does not say).
func inode(st os.FileInfo) uint64 { return sysIno(st) }

// exactly reads the first left bytes of a file and fails, final, when the
// file ends sooner: it was cut short while it was uploaded.
type exactly struct {
	r    io.Reader
	left int64
	path string
}

func (e *exactly) Read(p []byte) (int, error) {
	if e.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		return n, refuse("%s changed while it was uploaded (it became shorter)", e.path)
	}
	if err == io.EOF {
		err = nil
	}
	return n, err
}
