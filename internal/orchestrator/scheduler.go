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
	// A job that takes the whole worker needs every GPU of it large enough.
	if j.WholeWorker && j.MinVRAMGB > 0 && len(eligibleGPUs(g, j)) < len(g.Devices) {
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
// A pass's placements are claimed together, in one transaction, then sent.
// A job queued or requeued during a pass wakes the scheduler for another.
func (s *Server) schedulePass(ctx context.Context) {
	s.passMu.Lock()
	defer s.passMu.Unlock()
	s.freezeWhileFileExists(ctx)
	if s.stopping.Load() {
		return
	}
	q := &queueReader{s: s, ctx: ctx}
	j, ok := q.next()
	if !ok {
		s.setReservation(reservation{})
		return
	}
	pool := &pool{s: s, ctx: ctx, ids: s.hub.ConnectedIDs()}
	res := s.currentReservation(ctx, q.first)
	top := j.Priority
	var placed []placement
	for ; ok; j, ok = q.next() {
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
		best.took(j, gpus)
		placed = append(placed, placement{w: best.w, jobID: j.ID, gpus: gpus, whole: j.WholeWorker})
		if res.jobID == j.ID {
			res = reservation{}
		}
	}
	s.setReservation(res)
	if len(placed) > 0 {
		s.claimAndSend(ctx, placed)
	}
}

// placement is a job the pass gives to a worker, with the GPUs it gets
// there, and whether it takes the worker whole.
type placement struct {
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
func (s *Server) claimAndSend(ctx context.Context, placed []placement) {
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
func (s *Server) send(ctx context.Context, p placement, j store.Job, a store.Attempt, uploadToken string, claimedAt time.Time) {
	ev := protocol.JobSubmitEvent{
		Type: protocol.EventJobSubmit, JobID: j.ID, Config: j.Config, Dataloader: j.Dataloader,
		Provider: "worker", UploadEndpoint: "/api/cloud/storage", UploadToken: uploadToken, HFToken: j.HFToken,
		Attempt: a.Number, ConfigName: j.ConfigName, TimeoutSeconds: float64(j.TimeoutSeconds),
		CancelGraceSeconds: s.options().CancelGrace.Seconds(), LogEndpoint: "/api/workers/job/" + j.ID + "/logs",
		CheckpointsEndpoint: s.checkpointsEndpoint(j),
	}
	if p.w.SharesGPUs() {
		ev.GPUs, ev.WholeWorker = assignedGPUs(p.w.GPUInfo.GPUSummary, p.gpus), p.whole
	}
	if !s.hub.Send(p.w.ID, protocol.EventJobSubmit, ev) {
		s.log.Warn("worker stream vanished during dispatch; withdrawing", "job_id", j.ID, "worker_id", p.w.ID)
		_ = s.loseAttempt(ctx, j.ID, p.w.ID, "the worker's stream closed during dispatch")
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

// queueReader reads the head of the queue in claim order a page at a time
// (16 jobs, then 64, then the rest of passJobs): a pass usually places a
// few jobs on the workers that just freed up, and reading all passJobs for
// them was a large part of its cost.
type queueReader struct {
	s     *Server
	ctx   context.Context
	first []store.QueuedJob // the first page
	page  []store.QueuedJob // read and not yet taken
	last  *store.QueuedJob  // the last job read
	read  int
	end   bool
}

// next returns the next queued job; false at the end of the queue, after
// passJobs jobs, or when the store failed.
func (q *queueReader) next() (store.QueuedJob, bool) {
	if len(q.page) == 0 {
		if q.end || q.read >= passJobs {
			return store.QueuedJob{}, false
		}
		n := min(16<<(2*min(q.read/16, 2)), passJobs-q.read)
		page, err := q.s.store.ListQueued(q.ctx, q.last, n)
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

// candidate is a worker streaming here, as placement sees it.
type candidate struct {
	w    store.Worker
	gpus protocol.GPUSummary
	free map[int]bool // its GPUs no attempt holds
	load lifecycle.Load
}

// pool reads the workers streaming to this instance as placement needs
// them, once per pass and poolPage at a time: a job that finds a perfect fit
// early costs one query however many workers are connected, and only a job
// with no room anywhere reads them all.
type pool struct {
	s       *Server
	ctx     context.Context
	ids     []string     // connected workers not read yet
	fetched []*candidate // read and not yet offered
	read    []*candidate // offered
}

// more returns the next connected worker that is online, reading them from
// the store poolPage at a time; nil when every one has been read.
func (p *pool) more() *candidate {
	for len(p.fetched) == 0 && len(p.ids) > 0 {
		ids := p.ids[:min(poolPage, len(p.ids))]
		p.ids = p.ids[len(ids):]
		ws, err := p.s.store.GetWorkers(p.ctx, ids)
		if err != nil {
			continue
		}
		byID := make(map[string]store.Worker, len(ws))
		for _, w := range ws {
			byID[w.ID] = w
		}
		for _, id := range ids { // in the hub's order, as placement's ties expect
			// A busy worker has no room now but may be reserved for a job.
			if w, ok := byID[id]; ok && lifecycle.Working(w.Status) {
				if c, err := p.candidate(w); err == nil {
					p.fetched = append(p.fetched, c)
				}
			}
		}
	}
	if len(p.fetched) == 0 {
		return nil
	}
	c := p.fetched[0]
	p.fetched = p.fetched[1:]
	p.read = append(p.read, c)
	return c
}

// poolPage is how many connected workers the pool reads from the store at once.
const poolPage = 32

// candidate makes w a candidate, with the GPUs no attempt holds and the
// worker does not keep out of use.
func (p *pool) candidate(w store.Worker) (*candidate, error) {
	c := &candidate{w: w, gpus: w.GPUInfo.GPUSummary, free: map[int]bool{}, load: w.Load()}
	unavailable := w.UnavailableGPUs()
	for _, d := range c.gpus.Devices {
		if !unavailable[d.Index] {
			c.free[d.Index] = true
		}
	}
	if w.GPUsUsed > 0 {
		leases, err := p.s.store.GPULeases(p.ctx, w.ID)
		if err != nil {
			return nil, err
		}
		for _, l := range leases {
			delete(c.free, l.Index)
		}
	}
	return c, nil
}

// fit is the GPUs c would give j now, or ok false when it has no room for
// it. A worker that runs one job at a time gives a job all its GPUs. A job
// that takes the whole worker needs one running nothing, and gets every GPU
// of it that is not kept out of use (at least one, on a worker with GPUs).
func (c *candidate) fit(j store.QueuedJob) (gpus []int, ok bool) {
	if !lifecycle.CanClaim(c.w.Status, c.load) {
		return nil, false
	}
	if !c.w.SharesGPUs() {
		for _, d := range c.gpus.Devices {
			gpus = append(gpus, d.Index)
		}
		return gpus, true
	}
	if j.WholeWorker {
		if c.load.Running > 0 {
			return nil, false
		}
		for _, d := range c.gpus.Devices {
			if c.free[d.Index] {
				gpus = append(gpus, d.Index)
			}
		}
		return gpus, len(gpus) > 0 || len(c.gpus.Devices) == 0
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
func (c *candidate) took(j store.QueuedJob, gpus []int) {
	for _, g := range gpus {
		delete(c.free, g)
	}
	c.load.Running++
	c.load.GPUsUsed += len(gpus)
	c.load.Whole = j.WholeWorker
	if c.load.Full() {
		c.w.Status = protocol.WorkerBusy
	} else {
		c.w.Status = protocol.WorkerPartial
	}
}

// anyRoom reports whether a worker read so far could still take a job.
func (p *pool) anyRoom() bool {
	return slices.ContainsFunc(p.read, func(c *candidate) bool { return lifecycle.CanClaim(c.w.Status, c.load) })
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
// still queued and its worker still streaming here. first is the head of the
// queue; a job behind it is looked up.
func (s *Server) currentReservation(ctx context.Context, first []store.QueuedJob) reservation {
	res := s.reservation()
	if res.jobID == "" || !s.hub.Connected(res.workerID) {
		return reservation{}
	}
	if slices.ContainsFunc(first, func(j store.QueuedJob) bool { return j.ID == res.jobID }) {
		return res
	}
	if j, err := s.store.GetJob(ctx, res.jobID); err != nil || j.Status != protocol.JobQueued {
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

// hasJobForScan is how many queued jobs, from the head, hasJobFor looks at.
const hasJobForScan = 500

// hasJobFor reports whether a queued job could run on the worker (the
// ephemeral worker's question before it leaves).
func (s *Server) hasJobFor(ctx context.Context, wk store.Worker) (bool, error) {
	jobs, err := s.store.ListQueued(ctx, nil, hasJobForScan)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(jobs, func(j store.QueuedJob) bool { return matches(j, wk, wk.GPUInfo.GPUSummary) }), nil
}
