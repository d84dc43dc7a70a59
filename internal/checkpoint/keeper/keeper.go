// Package keeper is workerd's side of keeping a job's checkpoints in its
// artifacts: a watcher per running attempt uploads each finished checkpoint
// of the trainer's output directory (streamed, at a rate limit shared by the
// worker, SHA-256 per file) and commits it; when training ends it uploads
// the last one and the final outputs; before a retry starts, the newest
// complete checkpoint is downloaded, verified and put back where the trainer
// resumes from it. Everything in the job's directory is read and written as
// the job (checkpoint/jobfs).
package keeper

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/jobconfig"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// Options configure a Keeper.
type Options struct {
	// API is workerd's client to the orchestrator: its URLs and TLS
	// settings; each attempt's requests carry its own upload token.
	API *orchclient.Client
	// WorkDir is the parent of the jobs' directories; restores are staged in
	// WorkDir/.restore, on the same filesystem.
	WorkDir string
	Log     *slog.Logger
	// BytesPerSecond bounds what the worker's uploads read and send
	// together; 0 is no bound.
	BytesPerSecond int64
	RequestTimeout time.Duration // a request with no body to stream (10 s)
	StallTimeout   time.Duration // a transfer that moved no byte this long is given up (2 min)
	Retries        int           // tries of a file or request that failed for a reason that may pass (4)
	RetryBase      time.Duration // first pause between them, doubling (1 s)
}

// Keeper keeps the checkpoints of the attempts of one worker.
type Keeper struct {
	opt  Options
	rate *Limiter
}

// New returns a Keeper and clears what restores of an earlier run of
// workerd left in the staging directory.
func New(opt Options) *Keeper {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&opt.RequestTimeout, 10*time.Second)
	def(&opt.StallTimeout, 2*time.Minute)
	def(&opt.RetryBase, time.Second)
	if opt.Retries <= 0 {
		opt.Retries = 4
	}
	k := &Keeper{opt: opt, rate: NewLimiter(opt.BytesPerSecond)}
	k.sweep()
	return k
}

// SetRate changes the upload rate limit (a reload).
func (k *Keeper) SetRate(bytesPerSecond int64) { k.rate.SetRate(bytesPerSecond) }

// stagingDir is where restores are downloaded before a job's directory is
// ready for them.
func (k *Keeper) stagingDir() string { return filepath.Join(k.opt.WorkDir, ".restore") }

// sweep removes staged restores of an earlier run, each as its owner (a
// restore handed to a job belongs to the job).
func (k *Keeper) sweep() {
	entries, err := os.ReadDir(k.stagingDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(k.stagingDir(), e.Name())
		if err := removeStage(p); err != nil {
			k.opt.Log.Warn("cannot remove a restore left by an earlier run", "path", p, "err", err)
		}
	}
}

func (k *Keeper) client(j Job) *client {
	return &client{api: k.opt.API.WithUploadToken(j.Token), storage: strings.TrimRight(j.Storage, "/"),
		ckpts: strings.TrimRight(j.Endpoint, "/"), timeout: k.opt.RequestTimeout, stall: k.opt.StallTimeout}
}

// Job is one attempt of a job as the keeper sees it.
type Job struct {
	ID       string
	Attempt  int
	Token    string // the attempt's upload token
	Storage  string // the upload endpoint
	Endpoint string // the checkpoints endpoint
	Dir      string // the job's directory
	Output   string // the trainer's output directory, relative to Dir
	Keep     int    // how many complete checkpoints the job keeps
	Scan     time.Duration
	ScanOnly bool // no inotify: only the scan looks
	// Note writes a line into the job's log (nil: none).
	Note func(line string)
}

// DefaultOutputDir is SimpleTuner's output_dir when the config names none.
const DefaultOutputDir = "simpletuner-results"

// ErrOutsideJob refuses an output directory that is not inside the job's
// directory: workerd never reads or writes elsewhere for a job.
var ErrOutsideJob = errors.New("the output directory is not inside the job's directory")

// OutputDir is the training config's output_dir (or --output_dir, default
// DefaultOutputDir) relative to the job's directory dir, where the trainer
// runs.
func OutputDir(cfg []byte, dir string) (string, error) {
	out, ok := jobconfig.String(cfg, "output_dir")
	if !ok || strings.TrimSpace(out) == "" {
		out = DefaultOutputDir
	}
	rel := out
	if filepath.IsAbs(out) {
		r, err := filepath.Rel(dir, out)
		if err != nil {
			return "", fmt.Errorf("%w: output_dir %q, job directory %s", ErrOutsideJob, out, dir)
		}
		rel = r
	}
	rel = filepath.Clean(rel)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%w: output_dir %q, job directory %s", ErrOutsideJob, out, dir)
	}
	return rel, nil
}

// JobFor describes attempt ev in the job's directory dir; an error says why
// nothing of it can be kept.
func JobFor(ev *protocol.JobSubmitEvent, dir string, keep int, scan time.Duration) (Job, error) {
	out, err := OutputDir(ev.Config, dir)
	if err != nil {
		return Job{}, err
	}
	return Job{ID: ev.JobID, Attempt: ev.Attempt, Token: ev.UploadToken, Storage: ev.UploadEndpoint,
		Endpoint: ev.CheckpointsEndpoint, Dir: dir, Output: out, Keep: keep, Scan: scan}, nil
}

func (j Job) note(format string, args ...any) {
	if j.Note != nil {
		j.Note("simpletuner-workerd: " + fmt.Sprintf(format, args...) + "\n")
	}
}

// size says n bytes for people.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
