package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"path"
	"slices"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/audit"
	"github.com/simpletuner/simpletuner-orchestration/internal/auth"
	"github.com/simpletuner/simpletuner-orchestration/internal/lifecycle"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// matches reports whether worker w, with GPUs g (its gpu_info, parsed once
// by the caller), could ever run job j: target, GPU count, VRAM and every
// label glob. Whether it has room now is placement's question.
func matches(j store.QueuedJob, w store.Worker, g protocol.GPUSummary) bool {
	switch j.Target {
	case protocol.TargetWorker:
		if w.Local {
			return false
		}
	case protocol.TargetLocal:
		if !w.Local {
			return false
		}
	}
	if j.GPUCount > 0 && len(eligibleGPUs(g, j)) < j.GPUCount {
		return false
	}
	if j.MinVRAMGB > 0 && !w.SharesGPUs() && g.VRAMGB < j.MinVRAMGB {
		return false
	}
	for key, glob := range j.WorkerLabels {
		v, ok := w.Labels[key]
		if !ok {
			return false
		}
		if m, err := path.Match(glob, v); err != nil || !m {
			return false
		}
	}
	return true
}

// eligibleGPUs lists the worker's GPUs with at least the job's min_vram_gb.
func eligibleGPUs(g protocol.GPUSummary, j store.QueuedJob) []protocol.GPUDevice {
	var out []protocol.GPUDevice
	for _, d := range g.Devices {
		vram := d.VRAMGB()
		if d.MemoryMiB == 0 {
			vram = g.VRAMGB // an agent that reports one size for all
		}
		if vram >= j.MinVRAMGB {
			out = append(out, d)
		}
	}
	return out
}

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
			s.expireDeadlines(ctx)
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
// streaming to this instance, and claims them:
//
//   - Best fit: among the workers with room for the job now, the one left
//     with the fewest free GPUs (remote workers before local ones for an
//     "auto" job), so large gaps stay whole for large jobs. A job never
//     spans workers.
//   - No starvation: when the first job of the highest priority that cannot
//     be placed has a worker large enough, that worker is reserved for it
//     (the one with the most free GPUs already): no other job starts there
//     until it is placed or leaves the queue. Reserved workers take no new
//     jobs; there is no backfill.
//
// A job queued or requeued during a pass wakes the scheduler for another.
func (s *Server) schedulePass(ctx context.Context) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	s.freezeWhileFileExists(ctx)
	if s.stopping.Load() {
		return
	}
	queued, err := s.store.ListQueued(ctx, passJobs)
	s.noteStore(err)
	if err != nil || len(queued) == 0 {
		s.setReservation(reservation{})
		return
	}
	pool := &pool{s: s, ctx: ctx, ids: s.hub.ConnectedIDs()}
	res := s.currentReservation(queued)
	top := queued[0].Priority
	for _, j := range queued {
		if ctx.Err() != nil || s.stopping.Load() {
			return
		}
		best, gpus := bestFit(j, pool, res)
		if best == nil {
			// Every worker was read looking for room: reserve among those
			// that could ever run it.
			if res.jobID == "" && j.Priority == top {
				res = reserveFor(j, pool.read)
			}
			if !pool.anyRoom() {
				break // a full fleet: the jobs behind wait for the next pass
			}
			continue
		}
		if err := s.claimFor(ctx, best.w, j.ID, gpus); errors.Is(err, store.ErrNoJob) || errors.Is(err, store.ErrConflict) {
			// Someone else claimed the job or the GPUs meanwhile: read the
			// worker again next pass.
			best.stale = true
			continue
		} else if err != nil {
			if !s.logDiskFullOnce(err) {
				s.log.Warn("claim failed", "job_id", j.ID, "worker_id", best.w.ID, "err", err)
			}
			return
		}
		best.took(gpus)
		if res.jobID == j.ID {
			res = reservation{}
		}
	}
	s.setReservation(res)
}

// passJobs is how many queued jobs, in priority order, one pass places.
const passJobs = 200

// candidate is a worker streaming here, as placement sees it.
type candidate struct {
	w     store.Worker
	gpus  protocol.GPUSummary
	free  map[int]bool // its GPUs no attempt holds
	load  lifecycle.Load
	stale bool // a claim on it failed: skipped for the rest of the pass
}

// pool reads the workers streaming to this instance as placement needs
// them, once per pass: a job that finds a perfect fit early costs a read or
// two however many workers are connected, and only a job with no room
// anywhere reads them all.
type pool struct {
	s    *Server
	ctx  context.Context
	ids  []string // connected workers not read yet
	read []*candidate
}

// more reads the next connected worker that is online; nil when every one
// has been read.
func (p *pool) more() *candidate {
	for len(p.ids) > 0 {
		id := p.ids[0]
		p.ids = p.ids[1:]
		w, err := p.s.store.GetWorker(p.ctx, id)
		// A busy worker has no room now but may be reserved for a job.
		if err != nil || !lifecycle.Working(w.Status) {
			continue
		}
		c := &candidate{w: w, gpus: protocol.ParseGPUInfo(w.GPUInfo), free: map[int]bool{}, load: w.Load()}
		for _, d := range c.gpus.Devices {
			c.free[d.Index] = true
		}
		if w.GPUsUsed > 0 {
			leases, err := p.s.store.GPULeases(p.ctx, id)
			if err != nil {
				continue
			}
			for _, l := range leases {
				delete(c.free, l.Index)
			}
		}
		p.read = append(p.read, c)
		return c
	}
	return nil
}

// fit is the GPUs c would give j now, or ok false when it has no room for
// it. A worker that runs one job at a time gives a job all its GPUs.
func (c *candidate) fit(j store.QueuedJob) (gpus []int, ok bool) {
	if c.stale || !lifecycle.CanClaim(c.w.Status, c.load) {
		return nil, false
	}
	if !c.w.SharesGPUs() {
		for _, d := range c.gpus.Devices {
			gpus = append(gpus, d.Index)
		}
		return gpus, true
	}
	for _, d := range eligibleGPUs(c.gpus, j) {
		if len(gpus) == j.GPUCount {
			break
		}
		if c.free[d.Index] {
			gpus = append(gpus, d.Index)
		}
	}
	return gpus, len(gpus) == j.GPUCount
}

// took records a claim placed on c during the pass.
func (c *candidate) took(gpus []int) {
	for _, g := range gpus {
		delete(c.free, g)
	}
	c.load.Running++
	c.load.GPUsUsed += len(gpus)
	if c.load.Full() {
		c.w.Status = protocol.WorkerBusy
	} else {
		c.w.Status = protocol.WorkerPartial
	}
}

// anyRoom reports whether a worker read so far could still take a job.
func (p *pool) anyRoom() bool {
	return slices.ContainsFunc(p.read, func(c *candidate) bool { return !c.stale && lifecycle.CanClaim(c.w.Status, c.load) })
}

// bestFit picks, among the workers that match j, have room for it now and
// are not held for another job, the one left with the fewest free GPUs:
// remote before local, then ties to the one running fewer attempts. It reads
// more of the pool only until a remote worker fits exactly.
func bestFit(j store.QueuedJob, p *pool, res reservation) (*candidate, []int) {
	var best *candidate
	var bestGPUs []int
	bestLeft := 0
	consider := func(c *candidate) {
		if (res.workerID == c.w.ID && res.jobID != j.ID) || !matches(j, c.w, c.gpus) {
			return
		}
		gpus, ok := c.fit(j)
		if !ok {
			return
		}
		left := len(c.free) - len(gpus)
		if best == nil || (best.w.Local && !c.w.Local) ||
			(best.w.Local == c.w.Local && (left < bestLeft || (left == bestLeft && c.load.Running < best.load.Running))) {
			best, bestGPUs, bestLeft = c, gpus, left
		}
	}
	for _, c := range p.read {
		consider(c)
	}
	for best == nil || bestLeft > 0 || best.w.Local {
		c := p.more()
		if c == nil {
			break
		}
		consider(c)
	}
	return best, bestGPUs
}

// reservation holds a worker for the job at the head of the highest
// priority that could not be placed.
type reservation struct{ jobID, workerID string }

// reserveFor holds for j the worker that will fit it soonest: among those
// that could ever run it, the one with the most free GPUs already.
func reserveFor(j store.QueuedJob, cands []*candidate) reservation {
	var best *candidate
	for _, c := range cands {
		if !matches(j, c.w, c.gpus) {
			continue
		}
		if best == nil || len(c.free) > len(best.free) {
			best = c
		}
	}
	if best == nil {
		return reservation{}
	}
	return reservation{jobID: j.ID, workerID: best.w.ID}
}

// currentReservation is the reservation of the last pass while its job is
// still queued and its worker still streaming here.
func (s *Server) currentReservation(queued []store.QueuedJob) reservation {
	res := s.reservation()
	if res.jobID == "" ||
		!slices.ContainsFunc(queued, func(j store.QueuedJob) bool { return j.ID == res.jobID }) ||
		!s.hub.Connected(res.workerID) {
		return reservation{}
	}
	return res
}

func (s *Server) reservation() reservation {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	return s.res
}

func (s *Server) setReservation(r reservation) {
	s.resMu.Lock()
	defer s.resMu.Unlock()
	if r != s.res && r.jobID != "" {
		s.log.Info("worker reserved for a job no worker has room for", "job_id", r.jobID, "worker_id", r.workerID)
	}
	s.res = r
}

// claimFor claims job jobID for worker w with GPUs gpus and sends it on the
// stream. If the stream vanished in between, the attempt is withdrawn at
// once.
func (s *Server) claimFor(ctx context.Context, w store.Worker, jobID string, gpus []int) error {
	opt := s.options()
	uploadToken := newUploadToken()
	now := time.Now().UTC()
	rec := audit.New("system", "", "job.dispatch", "worker", w.ID, audit.Success, map[string]any{"job_id": jobID, "gpus": gpus})
	j, a, err := s.store.ClaimJob(ctx, store.ClaimRequest{
		WorkerID:        w.ID,
		JobID:           jobID,
		GPUs:            gpus,
		UploadTokenHash: auth.Hash(uploadToken),
		AckDeadline:     now.Add(opt.AckTimeout),
		Now:             now,
		Audit:           &rec,
	})
	if err != nil {
		return err
	}
	ev := protocol.JobSubmitEvent{
		Type: protocol.EventJobSubmit, JobID: j.ID, Config: j.Config, Dataloader: j.Dataloader,
		Provider: "worker", UploadEndpoint: "/api/cloud/storage", UploadToken: uploadToken, HFToken: j.HFToken,
		Attempt: a.Number, ConfigName: j.ConfigName, TimeoutSeconds: float64(j.TimeoutSeconds),
		CancelGraceSeconds: opt.CancelGrace.Seconds(), LogEndpoint: "/api/workers/job/" + j.ID + "/logs",
	}
	if w.SharesGPUs() {
		ev.GPUs = assignedGPUs(protocol.ParseGPUInfo(w.GPUInfo), gpus)
	}
	if !s.hub.Send(w.ID, protocol.EventJobSubmit, ev) {
		s.log.Warn("worker stream vanished during dispatch; withdrawing", "job_id", j.ID, "worker_id", w.ID)
		_ = s.loseAttempt(ctx, j.ID, w.ID, "the worker's stream closed during dispatch")
		return nil
	}
	s.metrics.Dispatches.Add(1)
	if a.Number == 1 {
		s.metrics.ObserveDispatch(now.Sub(j.CreatedAt))
	}
	s.log.Info("job dispatched", "job_id", j.ID, "attempt", a.Number, "worker_id", w.ID, "priority", j.Priority, "gpus", gpus)
	return nil
}

// assignedGPUs names the GPUs for job_submit: index and, where the worker
// reported one, UUID. An empty list (a job that takes no GPU) stays a list.
func assignedGPUs(g protocol.GPUSummary, indices []int) *[]protocol.AssignedGPU {
	out := make([]protocol.AssignedGPU, 0, len(indices))
	for _, i := range indices {
		a := protocol.AssignedGPU{Index: i}
		for _, d := range g.Devices {
			if d.Index == i {
				a.UUID = d.UUID
			}
		}
		out = append(out, a)
	}
	return &out
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

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Server) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, err := s.store.ListQueued(ctx, store.ClaimScanLimit)
	if err != nil {
		return false, err
	}
	g := protocol.ParseGPUInfo(wk.GPUInfo)
	return slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return matches(j, wk, g) }), nil
}
