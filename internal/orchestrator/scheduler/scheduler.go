// Package scheduler is the orchestrator's scheduling pass: it reads the
// queue in claim order, asks package placement where each job goes, claims
// a pass's placements together and sends them on their workers' streams.
// How the queue is ordered and who may be preempted for a waiting job is
// one step of the pass (an order): the queue's own priority order, or, with
// several teams or a GPU limit, the teams' fair share (package fairshare).
package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/metrics"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Store is what a pass reads and writes.
type Store interface {
	placement.Reader
	GetJob(ctx context.Context, id string) (store.Job, error)
	ListQueued(ctx context.Context, after *store.QueuedJob, limit int) ([]store.QueuedJob, error)
	ListQueuedOfTeam(ctx context.Context, team string, after *store.QueuedJob, limit int) ([]store.QueuedJob, error)
	ClaimJobs(ctx context.Context, reqs []store.ClaimRequest) ([]store.ClaimResult, error)
	// The teams' standing.
	ListActiveAttempts(ctx context.Context) ([]store.ActiveAttempt, error)
	TeamsWithJobs(ctx context.Context) ([]string, error)
	EnsureTeamQueueIndex(ctx context.Context) error
	TeamUsage(ctx context.Context, fromDay string) ([]store.TeamDay, error)
	SummarizeWorkers(ctx context.Context) ([]store.WorkerGroup, error)
	CountJobs(ctx context.Context) (map[protocol.JobStatus]int, error)
	CountQueuedOfTeam(ctx context.Context, team string) (int, error)
}

// Streams are the workers' event streams this instance holds.
type Streams interface {
	ConnectedIDs() []string
	Connected(workerID string) bool
	Send(workerID, typ string, v any) bool
}

// Mover is what a pass asks of the job moves.
type Mover interface {
	ExpireDeadlines(ctx context.Context)
	LoseAttempt(ctx context.Context, jobID, workerID, why string) error
	Preempt(ctx context.Context, v store.ActiveAttempt, forJob, why string)
}

// Options are the scheduler's settings.
type Options struct {
	// Interval is the longest wait between two passes.
	Interval    time.Duration
	AckTimeout  time.Duration
	CancelGrace time.Duration
	Teams       fairshare.Policy
}

// Scheduler runs the passes of one orchestrator instance.
type Scheduler struct {
	Store   Store
	Streams Streams
	Moves   Mover
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// CheckpointsEndpoint is what job_submit names for the job's checkpoints.
	CheckpointsEndpoint func(store.Job) string
	// Stopping reports whether the orchestrator is shutting down.
	Stopping func() bool
	// Freeze is the fault suite's hook that holds a pass (a no-op in releases).
	Freeze func(ctx context.Context)
	// NoteStore tells the watchdog whether the store answered; DiskFull
	// enters the full-disk state for a background write's error.
	NoteStore func(err error)
	DiskFull  func(err error) bool

	opt  atomic.Pointer[Options]
	wake chan struct{}
	// passMu is held by a pass; shutdown waits on it.
	passMu sync.Mutex
	// lastPass is when the loop last finished a pass (unix nanos).
	lastPass atomic.Int64
	// res is the worker held for a job no worker had room for (see Pass);
	// resMu guards it for the waiting reasons.
	resMu sync.Mutex
	res   placement.Reservation
	// teams is what passes reuse of the teams' standing.
	teams teamCache
}

// Init readies a Scheduler whose fields are set, with its first settings.
func (s *Scheduler) Init(o Options) {
	s.wake = make(chan struct{}, 1)
	s.lastPass.Store(time.Now().UnixNano())
	s.SetOptions(o)
}

// SetOptions replaces the settings (a reload).
func (s *Scheduler) SetOptions(o Options) { s.opt.Store(&o) }

func (s *Scheduler) options() Options { return *s.opt.Load() }

// Wake asks for a pass soon; it never blocks.
func (s *Scheduler) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// LastPass is when the loop last finished a pass.
func (s *Scheduler) LastPass() time.Time { return time.Unix(0, s.lastPass.Load()) }

// WaitPass waits for the pass under way, if any.
func (s *Scheduler) WaitPass() {
	s.passMu.Lock()
	//lint:ignore SA2001 waiting for the pass under way is the point
	s.passMu.Unlock()
}

// Run claims and dispatches jobs whenever woken and on every tick; the
// tick is the guarantee, wake-ups only make it prompt.
func (s *Scheduler) Run(ctx context.Context) {
	var lastExpiry time.Time
	for {
		s.Pass(ctx)
		// Deadlines are seconds apart; wake-ups come with every submit and
		// every finished job, so scanning active jobs on each would be waste.
		// Once shutting down, acknowledgements and reports can no longer
		// arrive, so no deadline is judged: the next instance does that.
		if every := min(s.options().Interval, time.Second); time.Since(lastExpiry) >= every && !s.Stopping() {
			s.Moves.ExpireDeadlines(ctx)
			lastExpiry = time.Now()
		}
		s.lastPass.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-time.After(s.options().Interval):
		}
	}
}

// Pass places queued jobs, in the order's order, on the workers streaming
// to this instance (best fit, one reservation against starvation: see
// package placement), and claims them.
//
// A pass's placements are claimed together, in one transaction, then sent.
// A job queued or requeued during a pass wakes the scheduler for another.
func (s *Scheduler) Pass(ctx context.Context) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	s.Freeze(ctx)
	if s.Stopping() {
		return
	}
	ord := s.orderNow(ctx)
	q := ord.queue(ctx)
	j, ok := q.next()
	if !ok {
		s.setReservation(placement.Reservation{})
		return
	}
	p := &pass{ord: ord, pool: placement.NewPool(ctx, s.Store, s.Streams.ConnectedIDs()),
		res: s.currentReservation(ctx, q.firstPage()), top: j.Priority}
	for ; ok; j, ok = q.next() {
		if ctx.Err() != nil || s.Stopping() {
			return
		}
		if !p.weigh(j) {
			break
		}
	}
	p.lend()
	s.setReservation(p.res)
	if len(p.placed) > 0 {
		s.claimAndSend(ctx, p.placed)
	}
	if len(p.waiting) > 0 {
		ord.preempt(ctx, s, p.waiting)
	}
}

// pass is what one pass has decided so far.
type pass struct {
	ord  order
	pool *placement.Pool
	res  placement.Reservation
	// top is the priority of the queue's head: only a job of that priority
	// takes the reservation.
	top    int
	placed []choice
	// borrowers wait for what no other job of the pass takes; waiting
	// found no room and are weighed for preemption.
	borrowers, waiting []store.QueuedJob
	// full: no worker has room left; passedReserved: the reserved job has
	// been weighed already.
	full, passedReserved bool
}

// weigh places one job, holds it back, or reserves for it; false once the
// jobs behind it wait for the next pass.
func (p *pass) weigh(j store.QueuedJob) bool {
	p.passedReserved = p.passedReserved || j.ID == p.res.JobID
	if p.full {
		// The jobs behind wait for the next pass, but a few may be weighed
		// for preemption.
		return p.noteWaiting(j)
	}
	best, gpus := placement.BestFit(j, p.pool, p.res)
	if best == nil {
		p.noRoom(j)
		return true
	}
	if p.ord.overLimit(j, len(gpus)) {
		// Over its team's max_gpus: it waits, or borrows what no other
		// job of this pass takes.
		if p.ord.borrows(j) {
			p.borrowers = append(p.borrowers, j)
		}
		return true
	}
	p.place(j, best, gpus)
	return true
}

// noRoom reserves, among the workers that could ever run it, for a job that
// found no room (every worker was read looking for some), unless the
// order holds it back.
func (p *pass) noRoom(j store.QueuedJob) {
	// An order that may put a job ahead of the one a worker is held for
	// lets the first job that finds no room take the reservation over
	// from one behind it.
	behind := p.ord.reordersReservation() && !p.passedReserved
	if (p.res.JobID == "" || behind) && j.Priority == p.top && !p.ord.overLimit(j, j.GPUCount) {
		p.res = placement.ReserveFor(j, p.pool)
		p.passedReserved = p.res.JobID != ""
	}
	p.noteWaiting(j)
	p.full = !p.pool.AnyRoom()
}

// noteWaiting keeps a job for the preemption step while it weighs any;
// false when it weighs no more.
func (p *pass) noteWaiting(j store.QueuedJob) bool {
	if !p.ord.weighsVictims() || len(p.waiting) >= preemptWeighed {
		return false
	}
	p.waiting = append(p.waiting, j)
	return true
}

func (p *pass) place(j store.QueuedJob, best *placement.Candidate, gpus []int) {
	best.Took(j, gpus)
	p.placed = append(p.placed, choice{w: best.W, jobID: j.ID, gpus: gpus, wholeWorker: j.WholeWorker})
	if p.res.JobID == j.ID {
		p.res = placement.Reservation{}
	}
	p.ord.took(j, len(gpus))
}

// lend gives the borrowers what the pass left.
func (p *pass) lend() {
	for _, j := range p.borrowers {
		if best, gpus := placement.BestFit(j, p.pool, p.res); best != nil {
			p.place(j, best, gpus)
		}
	}
}

// choice is a job the pass gives to a worker, with the GPUs it gets
// there, and whether it takes the whole worker.
type choice struct {
	w           store.Worker
	jobID       string
	gpus        []int
	wholeWorker bool
}

// claimAndSend claims the placements in one transaction and sends each
// claimed job on its worker's stream. If a stream vanished in between, that
// attempt is withdrawn at once. A refused claim (another replica claimed the
// job or the GPUs, or the job was cancelled meanwhile) leaves its job for the
// next pass, which reads the workers again.
func (s *Scheduler) claimAndSend(ctx context.Context, placed []choice) {
	opt := s.options()
	now := time.Now().UTC()
	reqs := make([]store.ClaimRequest, len(placed))
	uploadTokens := make([]string, len(placed))
	for i, p := range placed {
		uploadTokens[i] = newUploadToken()
		rec := audit.New("system", "", "job.dispatch", "worker", p.w.ID, audit.Success, map[string]any{"job_id": p.jobID, "gpus": p.gpus})
		reqs[i] = store.ClaimRequest{
			WorkerID:        p.w.ID,
			JobID:           p.jobID,
			GPUs:            p.gpus,
			WholeWorker:     p.wholeWorker,
			UploadTokenHash: auth.Hash(uploadTokens[i]),
			AckDeadline:     now.Add(opt.AckTimeout),
			Now:             now,
			Audit:           &rec,
		}
	}
	results, err := s.Store.ClaimJobs(ctx, reqs)
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !s.DiskFull(err) {
			s.Log.Warn("claim failed", "jobs", len(placed), "err", err)
		}
		return
	}
	for i, r := range results {
		if r.Err != nil {
			s.Log.Debug("claim refused; the job waits for the next pass", "job_id", placed[i].jobID, "worker_id", placed[i].w.ID, "err", r.Err)
			continue
		}
		s.send(ctx, placed[i], r.Job, r.Attempt, uploadTokens[i], now)
	}
}

// send puts a claimed job on its worker's stream.
func (s *Scheduler) send(ctx context.Context, p choice, j store.Job, a store.Attempt, uploadToken string, claimedAt time.Time) {
	ev := protocol.JobSubmitEvent{
		Type: protocol.EventJobSubmit, JobID: j.ID, Config: j.Config, Dataloader: j.Dataloader,
		Provider: "worker", UploadEndpoint: "/api/cloud/storage", UploadToken: uploadToken, HFToken: j.HFToken,
		Attempt: a.Number, ConfigName: j.ConfigName, TimeoutSeconds: float64(j.TimeoutSeconds),
		CancelGraceSeconds: s.options().CancelGrace.Seconds(), LogEndpoint: "/api/workers/job/" + j.ID + "/logs",
		CheckpointsEndpoint: s.CheckpointsEndpoint(j),
	}
	if p.w.Capacity().SharesGPUs() {
		ev.GPUs, ev.WholeWorker = p.w.GPUInfo.AssignedGPUs(p.gpus), p.wholeWorker
	}
	if !s.Streams.Send(p.w.ID, protocol.EventJobSubmit, ev) {
		s.Log.Warn("worker stream vanished during dispatch; withdrawing", "job_id", j.ID, "worker_id", p.w.ID)
		_ = s.Moves.LoseAttempt(ctx, j.ID, p.w.ID, "the worker's stream closed during dispatch")
		return
	}
	s.Metrics.Dispatches.Add(1)
	if a.Number == 1 {
		s.Metrics.ObserveDispatch(claimedAt.Sub(j.CreatedAt))
	}
	s.Log.Info("job dispatched", "job_id", j.ID, "attempt", a.Number, "worker_id", p.w.ID, "priority", j.Priority, "gpus", p.gpus)
}

// currentReservation is the reservation of the last pass while its job is
// still queued and its worker still streaming here. first is the head of the
// queue; a job behind it is looked up.
func (s *Scheduler) currentReservation(ctx context.Context, first []store.QueuedJob) placement.Reservation {
	res := s.Reservation()
	if res.JobID == "" || !s.Streams.Connected(res.WorkerID) {
		return placement.Reservation{}
	}
	if slices.ContainsFunc(first, func(j store.QueuedJob) bool { return j.ID == res.JobID }) {
		return res
	}
	if j, err := s.Store.GetJob(ctx, res.JobID); err != nil || j.Status != protocol.JobQueued {
		return placement.Reservation{}
	}
	return res
}

// Reservation is the worker held for a job that found no room.
func (s *Scheduler) Reservation() placement.Reservation {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	return s.res
}

func (s *Scheduler) setReservation(r placement.Reservation) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if r != s.res && r.JobID != "" {
		s.Log.Info("worker reserved for a job no worker has room for", "job_id", r.JobID, "worker_id", r.WorkerID)
	}
	s.res = r
}

func newUploadToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "stu_" + base64.RawURLEncoding.EncodeToString(b)
}
