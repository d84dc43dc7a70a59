package worker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/gpu"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
)

// A GPU goes to a job only while it is clean and healthy. gpuWatch keeps
// the conditions that say otherwise, one per GPU at most:
//
//   - held: an attempt ended and a process is still on the GPU (one that
//     escaped the job's walls, a leaked context). It is checked again every
//     watch interval and released once nothing is left on it.
//   - unhealthy: the GPU had a hardware fault (an XID that blames the
//     hardware, new uncorrectable ECC errors, a row-remapping failure, lost
//     from the bus). It stays fenced until an admin clears it, across
//     restarts of workerd (<state_dir>/gpu-health.json).
//
// The conditions go with every registration, heartbeat and terminal report,
// and the orchestrator places no job on such a GPU.
type gpuWatch struct {
	src  gpu.Source
	path string
	log  *slog.Logger

	mu    sync.Mutex
	inv   gpu.Inventory
	conds map[int]protocol.GPUCondition
	// base is each GPU's reading when it was last known healthy: new ECC
	// errors are counted against it.
	base map[int]gpu.Reading
	// warnings are what the last health check showed that does not fence
	// (a hardware slowdown), by GPU.
	warnings map[int]string
}

// gpuHealthFile keeps the unhealthy GPUs across restarts.
const gpuHealthFile = "gpu-health.json"

func newGPUWatch(src gpu.Source, stateDir string, log *slog.Logger) *gpuWatch {
	return &gpuWatch{src: src, path: filepath.Join(stateDir, gpuHealthFile), log: log,
		conds: map[int]protocol.GPUCondition{}, base: map[int]gpu.Reading{}, warnings: map[int]string{}}
}

// start loads the fences kept by an earlier run (of GPUs this machine still
// has), takes the health baseline, and holds back every GPU a process is
// already on: no job runs yet, so whatever is there is not a job's.
func (g *gpuWatch) start(inv gpu.Inventory) error {
	g.mu.Lock()
	g.inv = inv
	g.mu.Unlock()
	if err := g.loadFences(); err != nil {
		return err
	}
	readings, err := g.src.Health()
	if err != nil {
		g.log.Warn("cannot read the GPUs' health", "err", err)
	}
	g.mu.Lock()
	for _, r := range readings {
		g.base[r.Index] = r
	}
	g.mu.Unlock()
	for i, why := range g.checkHealth() {
		g.fence(i, why)
	}
	procs, err := g.src.Processes()
	if err != nil {
		g.log.Warn("cannot list the processes on the GPUs", "err", err)
	}
	for _, d := range inv.Devices {
		if ps := procs[d.Index]; len(ps) > 0 {
			g.hold(d, "found at start: "+describeProcesses(ps))
		}
	}
	return nil
}

func (g *gpuWatch) loadFences() error {
	b, err := os.ReadFile(g.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("GPU health: %w", err)
	}
	var fences []protocol.GPUCondition
	if err := json.Unmarshal(b, &fences); err != nil {
		return fmt.Errorf("GPU health: %s: %w (fix or remove the file; it lists the GPUs fenced as unhealthy)", g.path, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range fences {
		d, ok := g.inv.Device(f.Index)
		if !ok || f.State != protocol.GPUUnhealthy || (f.UUID != "" && d.UUID != f.UUID) {
			g.log.Warn("forgetting a GPU fence: the GPU is gone or was replaced", "index", f.Index, "uuid", f.UUID, "reason", f.Reason)
			continue
		}
		f.Reason = protocol.GPUText(f.Reason) // written by an older workerd
		g.conds[f.Index] = f
		g.log.Warn("GPU fenced as unhealthy by an earlier run; an admin clears it", "index", f.Index, "uuid", f.UUID, "reason", f.Reason, "since", f.Since)
	}
	return nil
}

// saveFencesLocked writes the unhealthy GPUs, atomically. g.mu is held.
func (g *gpuWatch) saveFencesLocked() {
	var fences []protocol.GPUCondition
	for _, c := range g.sortedLocked() {
		if c.State == protocol.GPUUnhealthy {
			fences = append(fences, c)
		}
	}
	if fences == nil {
		fences = []protocol.GPUCondition{}
	}
	b, _ := json.MarshalIndent(fences, "", "  ") // plain fields always marshal
	if err := writeFileAtomic(g.path, append(b, '\n'), 0o600); err != nil {
		g.log.Error("cannot record the GPU fences; they hold until workerd restarts", "err", err)
	}
}

func (g *gpuWatch) sortedLocked() []protocol.GPUCondition {
	out := make([]protocol.GPUCondition, 0, len(g.conds))
	for _, c := range g.conds {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b protocol.GPUCondition) int { return a.Index - b.Index })
	return out
}

// conditions is what the orchestrator is told: never nil, so that "none"
// is said and not left out.
func (g *gpuWatch) conditions() *[]protocol.GPUCondition {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := g.sortedLocked()
	return &out
}

// unavailable says why GPU i must not be given to a job; "" when it may.
func (g *gpuWatch) unavailable(i int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.conds[i]; ok {
		return c.State + ": " + c.Reason
	}
	return ""
}

// health is GPU i's state in words for its telemetry: its condition, else
// a warning, else "ok".
func (g *gpuWatch) health(i int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.conds[i]; ok {
		return protocol.GPUText(c.State + ": " + c.Reason)
	}
	if w := g.warnings[i]; w != "" {
		return protocol.GPUText(w)
	}
	return "ok"
}

// hold keeps GPU d back until nothing is left on it; a fence wins. The
// reason names processes a job may have named itself: it is kept as
// protocol.GPUText, which the orchestrator accepts whatever they are called.
func (g *gpuWatch) hold(d gpu.Device, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.conds[d.Index]; ok {
		return
	}
	g.conds[d.Index] = protocol.GPUCondition{Index: d.Index, UUID: d.UUID, State: protocol.GPUHeld, Reason: protocol.GPUText(reason),
		Since: protocol.Time(time.Now())}
	g.log.Warn("GPU held back: a process is still on it", "index", d.Index, "uuid", d.UUID, "reason", reason)
}

// fence marks GPU i unhealthy; it reports whether the GPU was not already.
func (g *gpuWatch) fence(i int, reason string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.conds[i]; ok && c.State == protocol.GPUUnhealthy {
		return false
	}
	d, _ := g.inv.Device(i)
	g.conds[i] = protocol.GPUCondition{Index: i, UUID: d.UUID, State: protocol.GPUUnhealthy, Reason: protocol.GPUText(reason),
		Since: protocol.Time(time.Now())}
	g.saveFencesLocked()
	g.log.Error("GPU fenced as unhealthy: no job gets it until an admin clears it", "index", i, "uuid", d.UUID, "reason", reason)
	return true
}

// clear lifts an admin-cleared fence of GPU i and takes a new health
// baseline for it; it reports whether there was one.
func (g *gpuWatch) clear(i int) bool {
	readings, _ := g.src.Health()
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.conds[i]
	if !ok || c.State != protocol.GPUUnhealthy {
		return false
	}
	delete(g.conds, i)
	for _, r := range readings {
		if r.Index == i {
			g.base[i] = r
		}
	}
	g.saveFencesLocked()
	g.log.Info("GPU fence cleared by an admin", "index", i, "uuid", c.UUID, "was", c.Reason)
	return true
}

// checkHealth reads every GPU's health and returns the new faults of GPUs
// not fenced yet, by index.
func (g *gpuWatch) checkHealth() map[int]string {
	readings, err := g.src.Health()
	if err != nil {
		g.log.Debug("GPU health not read", "err", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	faults := map[int]string{}
	for _, r := range readings {
		base, ok := g.base[r.Index]
		if !ok {
			g.base[r.Index], base = r, r
		}
		if w := r.Warning(); w != g.warnings[r.Index] {
			if w != "" {
				g.log.Warn("GPU warning", "index", r.Index, "uuid", r.UUID, "warning", w)
			}
			g.warnings[r.Index] = w
		}
		if c, fenced := g.conds[r.Index]; fenced && c.State == protocol.GPUUnhealthy {
			continue
		}
		if why := r.Fault(base); why != "" {
			faults[r.Index] = why
		}
	}
	return faults
}

// recheckHeld releases the held GPUs nothing is left on, and returns them.
func (g *gpuWatch) recheckHeld() []int {
	g.mu.Lock()
	var held []int
	for i, c := range g.conds {
		if c.State == protocol.GPUHeld {
			held = append(held, i)
		}
	}
	g.mu.Unlock()
	if len(held) == 0 {
		return nil
	}
	procs, err := g.src.Processes()
	if err != nil {
		return nil
	}
	var released []int
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, i := range held {
		c, ok := g.conds[i]
		if !ok || c.State != protocol.GPUHeld || len(procs[i]) > 0 {
			continue
		}
		delete(g.conds, i)
		released = append(released, i)
		g.log.Info("GPU released: nothing is left on it", "index", i, "uuid", c.UUID, "was", c.Reason)
	}
	return released
}

// holdLeftovers runs when an attempt that had GPUs ended: its processes are
// gone, so anything still on those GPUs once they settled (the driver drops
// an ended process's context within moments) is not the job's any more, and
// the GPU is held back. It returns the GPUs held.
func (g *gpuWatch) holdLeftovers(devs []gpu.Device, settle time.Duration) []int {
	deadline := time.Now().Add(settle)
	for {
		procs, err := g.src.Processes()
		if err != nil || procs == nil {
			return nil // no driver to ask
		}
		var dirty []gpu.Device
		for _, d := range devs {
			if len(procs[d.Index]) > 0 {
				dirty = append(dirty, d)
			}
		}
		if len(dirty) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var held []int
			for _, d := range dirty {
				g.hold(d, describeProcesses(procs[d.Index]))
				held = append(held, d.Index)
			}
			return held
		}
		time.Sleep(gpuSettlePoll)
	}
}

// gpuSettlePoll is how often holdLeftovers looks while a GPU settles.
const gpuSettlePoll = 100 * time.Millisecond

// describeProcesses names the processes on a GPU for people: "pid 4411 uid
// 1879 (python3): 1,002 MiB".
func describeProcesses(ps []gpu.Process) string {
	parts := make([]string, 0, len(ps))
	for _, p := range ps {
		s := fmt.Sprintf("pid %d", p.PID)
		if uid, name, ok := procIdentity(p.PID); ok {
			s += fmt.Sprintf(" uid %s (%s)", uid, name)
		} else {
			s += " (not visible from workerd)"
		}
		if p.UsedBytes > 0 {
			s += ": " + groupDigits(p.UsedBytes>>20) + " MiB"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// procIdentity reads a process's real uid and name from /proc.
func procIdentity(pid int) (uid, name string, ok bool) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "Uid":
			if f := strings.Fields(v); len(f) > 0 {
				uid = f[0]
			}
		}
	}
	return uid, name, uid != ""
}

// groupDigits writes n with thousands separators: 1,002.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
