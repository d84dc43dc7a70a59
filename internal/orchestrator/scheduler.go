package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/fairshare"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/placement"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// runScheduler claims and dispatches jobs whenever woken and on every tick; the
// tick is the guarantee, wake-ups only make it prompt.
func (s *Server) runScheduler(ctx context.Context) {
	var lastExpiry time.Time
	for {
		s.schedulePass(ctx)
		// Deadlines are seconds apart; wake-ups come with every submit and
		// every finished job, so scanning active jobs on each would be waste.
		// Once shutting down, acknowledgements and reports can no longer
		// arrive, so no deadline is judged: the next instance does that.
		if every := min(s.options().SchedulerInterval, time.Second); time.Since(lastExpiry) >= every && !s.stopping.Load() {
			s.moves.ExpireDeadlines(ctx)
			lastExpiry = time.Now()
		}
		s.lastTick.Store(time.Now().UnixNano())
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-time.After(s.options().SchedulerInterval):
		}
	}
}

// schedulePass places queued jobs, highest priority first, on the workers
// streaming to this instance (best fit, one reservation against starvation:
// see package placement), and claims them.
//
// A pass's placements are claimed together, in one transaction, then sent.
// A job queued or requeued during a pass wakes the scheduler for another.
func (s *Server) schedulePass(ctx context.Context) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	s.freezeWhileFileExists(ctx)
	if s.stopping.Load() {
		return
	}
	teams := s.teamsNow(ctx) // nil: one team and no limit, nothing to weigh
	q := s.newQueue(ctx, teams)
	j, ok := q.next()
	if !ok {
		s.setReservation(placement.Reservation{})
		return
	}
	pool := placement.NewPool(ctx, s.store, s.hub.ConnectedIDs())
	res := s.currentReservation(ctx, q.firstPage())
	top := j.Priority
	var placed []choice
	var borrowers, waiting []store.QueuedJob
	place := func(j store.QueuedJob, best *placement.Candidate, gpus []int) {
		best.Took(j, gpus)
		placed = append(placed, choice{w: best.W, jobID: j.ID, gpus: gpus, whole: j.WholeWorker})
		if res.JobID == j.ID {
			res = placement.Reservation{}
		}
		if teams != nil {
			teams.st.Took(j.Team, len(gpus))
		}
	}
	full := false
	// With teams, fair share may put a job ahead of the one a worker is
	// held for: the first job that finds no room takes the reservation
	// over from one behind it.
	passedReserved := false
	for ; ok; j, ok = q.next() {
		passedReserved = passedReserved || j.ID == res.JobID
		if ctx.Err() != nil || s.stopping.Load() {
			return
		}
		if full {
			// The jobs behind wait for the next pass, but with teams a few
			// are weighed for preemption.
			if teams == nil || !teams.preempt || len(waiting) >= preemptWeighed {
				break
			}
			waiting = append(waiting, j)
			continue
		}
		best, gpus := placement.BestFit(j, pool, res)
		if best == nil {
			// Every worker was read looking for room: reserve among those
			// that could ever run it (not for a job its team's limit holds
			// back).
			behind := teams != nil && !passedReserved
			if (res.JobID == "" || behind) && j.Priority == top && (teams == nil || !teams.st.OverLimit(j, j.GPUCount)) {
				res = placement.ReserveFor(j, pool)
				passedReserved = res.JobID != ""
			}
			if teams != nil && len(waiting) < preemptWeighed {
				waiting = append(waiting, j)
			}
			full = !pool.AnyRoom()
			continue
		}
		if teams != nil && teams.st.OverLimit(j, len(gpus)) {
			// Over its team's max_gpus: it waits, or borrows what no other
			// job of this pass takes.
			if teams.st.Team(j.Team).Borrow {
				borrowers = append(borrowers, j)
			}
			continue
		}
		place(j, best, gpus)
	}
	for _, j := range borrowers {
		if best, gpus := placement.BestFit(j, pool, res); best != nil {
			place(j, best, gpus)
		}
	}
	s.setReservation(res)
	if len(placed) > 0 {
		s.claimAndSend(ctx, placed)
	}
	if teams != nil && teams.preempt && len(waiting) > 0 {
		s.preemptFor(ctx, teams, waiting)
	}
}

// choice is a job the pass gives to a worker, with the GPUs it gets
// there, and whether it takes the worker whole.
type choice struct {
	w     store.Worker
	jobID string
	gpus  []int
	whole bool
}

// claimAndSend claims the placements in one transaction and sends each
// claimed job on its worker's stream. If a stream vanished in between, that
// attempt is withdrawn at once. A refused claim (another replica claimed the
// job or the GPUs, or the job was cancelled meanwhile) leaves its job for the
// next pass, which reads the workers again.
func (s *Server) claimAndSend(ctx context.Context, placed []choice) {
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
			Whole:           p.whole,
			UploadTokenHash: auth.Hash(uploadTokens[i]),
			AckDeadline:     now.Add(opt.AckTimeout),
			Now:             now,
			Audit:           &rec,
		}
	}
	results, err := s.store.ClaimJobs(ctx, reqs)
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !s.logDiskFullOnce(err) {
			s.log.Warn("claim failed", "jobs", len(placed), "err", err)
		}
		return
	}
	for i, r := range results {
		if r.Err != nil {
			s.log.Debug("claim refused; the job waits for the next pass", "job_id", placed[i].jobID, "worker_id", placed[i].w.ID, "err", r.Err)
			continue
		}
		s.send(ctx, placed[i], r.Job, r.Attempt, uploadTokens[i], now)
	}
}

// send puts a claimed job on its worker's stream.
func (s *Server) send(ctx context.Context, p choice, j store.Job, a store.Attempt, uploadToken string, claimedAt time.Time) {
	ev := protocol.JobSubmitEvent{
		Type: protocol.EventJobSubmit, JobID: j.ID, Config: j.Config, Dataloader: j.Dataloader,
		Provider: "worker", UploadEndpoint: "/api/cloud/storage", UploadToken: uploadToken, HFToken: j.HFToken,
		Attempt: a.Number, ConfigName: j.ConfigName, TimeoutSeconds: float64(j.TimeoutSeconds),
		CancelGraceSeconds: s.options().CancelGrace.Seconds(), LogEndpoint: "/api/workers/job/" + j.ID + "/logs",
		CheckpointsEndpoint: s.checkpointsEndpoint(j),
	}
	if p.w.SharesGPUs() {
		ev.GPUs, ev.WholeWorker = placement.AssignedGPUs(p.w.GPUInfo.GPUSummary, p.gpus), p.whole
	}
	if !s.hub.Send(p.w.ID, protocol.EventJobSubmit, ev) {
		s.log.Warn("worker stream vanished during dispatch; withdrawing", "job_id", j.ID, "worker_id", p.w.ID)
		_ = s.moves.LoseAttempt(ctx, j.ID, p.w.ID, "the worker's stream closed during dispatch")
		return
	}
	s.metrics.Dispatches.Add(1)
	if a.Number == 1 {
		s.metrics.ObserveDispatch(claimedAt.Sub(j.CreatedAt))
	}
	s.log.Info("job dispatched", "job_id", j.ID, "attempt", a.Number, "worker_id", p.w.ID, "priority", j.Priority, "gpus", p.gpus)
}

// passJobs is how many queued jobs, in priority order, one pass places.
const passJobs = 200

// queue is the queue as a pass reads it, in claim order.
type queue interface {
	next() (store.QueuedJob, bool)
	// firstPage is the jobs read first (the head of the queue).
	firstPage() []store.QueuedJob
}

// newQueue reads the whole queue in priority and submission order, or,
// with teams, each team's queue merged by priority, fair-share factor and
// submission order.
func (s *Server) newQueue(ctx context.Context, teams *teamsNow) queue {
	if teams == nil {
		return &queueReader{s: s, ctx: ctx}
	}
	m := &mergedQueue{st: teams.st}
	for _, t := range teams.st.Teams() {
		m.readers = append(m.readers, &queueReader{s: s, ctx: ctx, team: t.Name, byTeam: true})
	}
	m.heads = make([]*store.QueuedJob, len(m.readers))
	// Which teams wait decides each team's part of the fleet, and so the
	// order: every team's head is read before the first job is chosen.
	m.readHeads()
	teams.st.Waiting(m.waitingTeams())
	return m
}

// mergedQueue merges the teams' queues.
type mergedQueue struct {
	st      *fairshare.Standing
	readers []*queueReader
	heads   []*store.QueuedJob // each reader's next job; nil when not read
	taken   int
}

// readHeads reads the next job of each team whose head was taken.
func (m *mergedQueue) readHeads() {
	for i, r := range m.readers {
		if m.heads[i] == nil {
			if j, ok := r.next(); ok {
				m.heads[i] = &j
			}
		}
	}
}

func (m *mergedQueue) next() (store.QueuedJob, bool) {
	if m.taken >= passJobs {
		return store.QueuedJob{}, false
	}
	m.readHeads()
	best := -1
	for i := range m.readers {
		if m.heads[i] != nil && (best < 0 || m.st.Before(*m.heads[i], *m.heads[best])) {
			best = i
		}
	}
	if best < 0 {
		return store.QueuedJob{}, false
	}
	j := *m.heads[best]
	m.heads[best] = nil
	m.taken++
	return j, true
}

// waitingTeams names the teams whose queue has jobs.
func (m *mergedQueue) waitingTeams() []string {
	var out []string
	for _, r := range m.readers {
		if len(r.first) > 0 {
			out = append(out, r.team)
		}
	}
	return out
}

func (m *mergedQueue) firstPage() []store.QueuedJob {
	var out []store.QueuedJob
	for _, r := range m.readers {
		out = append(out, r.first...)
	}
	return out
}

// queueReader reads the head of the queue in claim order a page at a time
// (16 jobs, then 64, then the rest of passJobs): a pass usually places a
// few jobs on the workers that just freed up, and reading all passJobs for
// them was a large part of its cost.
type queueReader struct {
	s   *Server
	ctx context.Context
	// team, with byTeam, reads that team's jobs alone.
	team   string
	byTeam bool
	first  []store.QueuedJob // the first page
	page   []store.QueuedJob // read and not yet taken
	last   *store.QueuedJob  // the last job read
	read   int
	end    bool
}

// next returns the next queued job; false at the end of the queue, after
// passJobs jobs, or when the store failed.
func (q *queueReader) next() (store.QueuedJob, bool) {
	if len(q.page) == 0 {
		if q.end || q.read >= passJobs {
			return store.QueuedJob{}, false
		}
		n := min(16<<(2*min(q.read/16, 2)), passJobs-q.read)
		var page []store.QueuedJob
		var err error
		if q.byTeam {
			page, err = q.s.store.ListQueuedOfTeam(q.ctx, q.team, q.last, n)
		} else {
			page, err = q.s.store.ListQueued(q.ctx, q.last, n)
		}
		q.s.noteStore(err)
		if err != nil || len(page) == 0 {
			q.end = true
			return store.QueuedJob{}, false
		}
		if q.first == nil {
			q.first = page
		}
		q.end = len(page) < n
		q.read += len(page)
		q.last = &page[len(page)-1]
		q.page = page
	}
	j := q.page[0]
	q.page = q.page[1:]
	return j, true
}

func (q *queueReader) firstPage() []store.QueuedJob { return q.first }

// currentReservation is the reservation of the last pass while its job is
// still queued and its worker still streaming here. first is the head of the
// queue; a job behind it is looked up.
func (s *Server) currentReservation(ctx context.Context, first []store.QueuedJob) placement.Reservation {
	res := s.reservation()
	if res.JobID == "" || !s.hub.Connected(res.WorkerID) {
		return placement.Reservation{}
	}
	if slices.ContainsFunc(first, func(j store.QueuedJob) bool { return j.ID == res.JobID }) {
		return res
	}
	if j, err := s.store.GetJob(ctx, res.JobID); err != nil || j.Status != protocol.JobQueued {
		return placement.Reservation{}
	}
	return res
}

func (s *Server) reservation() placement.Reservation {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	return s.res
}

func (s *Server) setReservation(r placement.Reservation) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if r != s.res && r.JobID != "" {
		s.log.Info("worker reserved for a job no worker has room for", "job_id", r.JobID, "worker_id", r.WorkerID)
	}
	s.res = r
}

func newUploadToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "stu_" + base64.RawURLEncoding.EncodeToString(b)
}

// noteStore remembers whether the last store call worked (watchdog gate).
func (s *Server) noteStore(err error) {
	if err != nil && isUnavailable(err) {
		s.storeErr.Store(&err)
		return
	}
	s.storeErr.Store(nil)
}

// hasJobForScan is how many queued jobs, from the head, hasJobFor looks at.
const hasJobForScan = 500

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Server) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, err := s.store.ListQueued(ctx, nil, hasJobForScan)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return placement.Matches(j, wk) }), nil
}
