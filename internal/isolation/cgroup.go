package isolation

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mount is one line of /proc/self/mountinfo that matters here.
type mount struct {
	point   string // where it is mounted
	root    string // the hierarchy's path that is mounted there
	fstype  string // cgroup2, cgroup
	options string // super options: the v1 controllers
}

// mounts reads the cgroup mounts of this process's mount namespace.
func mounts(mountinfo string) ([]mount, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, err
	}
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// 41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || (g[0] != "cgroup2" && g[0] != "cgroup") {
			continue
		}
		out = append(out, mount{point: unescape(f[4]), root: unescape(f[3]), fstype: g[0], options: g[2]})
	}
	return out, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// membership reads /proc/self/cgroup: the v2 path (key "") and each v1
// controller's path.
func membership(procCgroup string) (map[string]string, error) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, nil
}

// cgroupDir is where a process's cgroup of the given hierarchy is visible: the
// mount point plus the process's path relative to the mounted root.
func cgroupDir(m mount, path string) string {
	rel, err := filepath.Rel(m.root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = strings.TrimPrefix(path, "/")
	}
	return filepath.Join(m.point, rel)
}

// limited are the controllers a job's limits and accounting use.
var limited = []string{"memory", "pids"}

// hierarchy is where this workerd makes its jobs' cgroups: a v2 parent for
// containment (and its controllers, if any), and v1 parents for controllers
// the v2 hierarchy does not offer.
type hierarchy struct {
	parent      string            // v2: <own cgroup>/simpletuner-jobs-<pid>
	controllers []string          // v2 controllers enabled for job cgroups
	v1          map[string]string // controller → v1 parent directory
}

// setupHierarchy finds a writable cgroup v2 hierarchy and makes this
// process's jobs parent in it; nil without one (the caller falls back to
// process groups). v1 parents are added for memory and pids where v2 lacks
// them and v1 hierarchies are mounted.
func setupHierarchy(mountinfo, procCgroup string) (*hierarchy, error) {
	ms, err := mounts(mountinfo)
	if err != nil {
		return nil, err
	}
	own, err := membership(procCgroup)
	if err != nil {
		return nil, err
	}
	base, err := v2Base(ms, own)
	if err != nil {
		return nil, err
	}
	h := &hierarchy{v1: map[string]string{}}
	want := available(base)
	if len(want) > 0 {
		// A cgroup that hands controllers to its children may hold no
		// processes of its own: move workerd into a leaf first.
		leaf := filepath.Join(base, fmt.Sprintf("workerd-%d", os.Getpid()))
		if err := os.Mkdir(leaf, 0o755); err == nil || errors.Is(err, os.ErrExist) {
			if writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())) != nil ||
				writeFile(filepath.Join(base, "cgroup.subtree_control"), enable(want)) != nil {
				want = nil
			}
		}
	}
	h.parent = filepath.Join(base, fmt.Sprintf("simpletuner-jobs-%d", os.Getpid()))
	if err := os.Mkdir(h.parent, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v2 at %s is not writable: %w", base, err)
	}
	if len(want) > 0 && writeFile(filepath.Join(h.parent, "cgroup.subtree_control"), enable(want)) == nil {
		h.controllers = want
	}
	for _, c := range limited {
		if slices.Contains(h.controllers, c) {
			continue
		}
		j := slices.IndexFunc(ms, func(m mount) bool {
			return m.fstype == "cgroup" && slices.Contains(strings.Split(m.options, ","), c)
		})
		p, member := own[c]
		if j < 0 || !member {
			continue
		}
		dir := filepath.Join(cgroupDir(ms[j], p), fmt.Sprintf("simpletuner-jobs-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err == nil || errors.Is(err, os.ErrExist) {
			h.v1[c] = dir
		}
	}
	return h, nil
}

// cgroup2Base is this process's own cgroup directory in the v2 hierarchy.
func cgroup2Base(mountinfo, procCgroup string) (string, error) {
	ms, err := mounts(mountinfo)
	if err != nil {
		return "", err
	}
	own, err := membership(procCgroup)
	if err != nil {
		return "", err
	}
	return v2Base(ms, own)
}

func v2Base(ms []mount, own map[string]string) (string, error) {
	i := slices.IndexFunc(ms, func(m mount) bool { return m.fstype == "cgroup2" })
	path, ok := own[""]
	if i < 0 || !ok {
		return "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	return cgroupDir(ms[i], path), nil
}

// available lists the limited controllers a v2 cgroup can hand down.
func available(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	have := strings.Fields(string(b))
	var out []string
	for _, c := range limited {
		if slices.Contains(have, c) {
			out = append(out, c)
		}
	}
	return out
}

func enable(cs []string) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = "+" + c
	}
	return strings.Join(parts, " ")
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}

// jobCgroup is one job's cgroups: the v2 one holding every process, and the
// v1 ones for limits and accounting.
type jobCgroup struct {
	dir string            // v2
	v1  map[string]string // controller → directory
}

// makeJob creates a job's cgroups and applies its limits.
func (h *hierarchy) makeJob(name string, lim Limits) (*jobCgroup, error) {
	cg := &jobCgroup{dir: filepath.Join(h.parent, name), v1: map[string]string{}}
	if err := os.Mkdir(cg.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	set := func(file, v1file, controller string, value int64) error {
		if value <= 0 {
			return nil
		}
		if slices.Contains(h.controllers, controller) {
			return writeFile(filepath.Join(cg.dir, file), strconv.FormatInt(value, 10))
		}
		if parent, ok := h.v1[controller]; ok {
			return writeFile(filepath.Join(parent, name, v1file), strconv.FormatInt(value, 10))
		}
		return fmt.Errorf("no %s controller is available to limit jobs", controller)
	}
	for c, parent := range h.v1 {
		if c == "pids" && lim.TasksMax <= 0 {
			continue // counts nothing we report: only a limit needs it
		}
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cg.remove()
			return nil, err
		}
		cg.v1[c] = d
	}
	if err := set("memory.max", "memory.limit_in_bytes", "memory", lim.MemoryMax); err != nil {
		cg.remove()
		return nil, fmt.Errorf("memory_max: %w", err)
	}
	if lim.MemoryMax > 0 {
		// The limit holds RAM and swap together: a job over it is stopped,
		// not pushed into swap. Kernels without swap accounting lack these
		// files; there is no swap to escape into then.
		if slices.Contains(h.controllers, "memory") {
			_ = writeFile(filepath.Join(cg.dir, "memory.swap.max"), "0")
		} else if d, ok := cg.v1["memory"]; ok {
			_ = writeFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), strconv.FormatInt(lim.MemoryMax, 10))
		}
	}
	if err := set("pids.max", "pids.max", "pids", lim.TasksMax); err != nil {
		cg.remove()
		return nil, fmt.Errorf("tasks_max: %w", err)
	}
	return cg, nil
}

// joinV1 moves the job into its v1 cgroups. The v2 cgroup is entered at
// fork, the v1 ones only now, after the leader has started: children it
// forked in between are in the v2 cgroup only, so every process listed there
// is moved, again until a pass finds none new (each pass catches what the
// previous one's processes forked before they moved).
func (cg *jobCgroup) joinV1(leader int) {
	if len(cg.v1) == 0 {
		return
	}
	moved := map[int]bool{}
	move := func(pid int) {
		for _, d := range cg.v1 {
			_ = writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid))
		}
		moved[pid] = true
	}
	move(leader)
	for range 100 {
		fresh := false
		for _, pid := range cg.pids() {
			if !moved[pid] {
				move(pid)
				fresh = true
			}
		}
		if !fresh {
			return
		}
	}
}

// pids lists the processes in the job's cgroup.
func (cg *jobCgroup) pids() []int {
	b, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// signal sends sig to every process of the job.
func (cg *jobCgroup) signal(sig syscall.Signal) {
	for _, pid := range cg.pids() {
		_ = syscall.Kill(pid, sig)
	}
}

// kill ends every process of the job at once: cgroup.kill where the kernel
// has it (5.14 and later), else SIGKILL to each process until none is left.
func (cg *jobCgroup) kill() {
	if writeFile(filepath.Join(cg.dir, "cgroup.kill"), "1") == nil {
		return
	}
	for range 100 {
		pids := cg.pids()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Millisecond)
	}
}

// empty reports whether no process is left in the job's cgroup.
func (cg *jobCgroup) empty() bool {
	b, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.events"))
	if err != nil {
		return len(cg.pids()) == 0
	}
	return bytes.Contains(b, []byte("populated 0"))
}

// waitEmpty waits up to d for the job's processes to be gone.
func (cg *jobCgroup) waitEmpty(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !cg.empty() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// usage reads what the job used: CPU from v2 cpu.stat, peak memory from v2
// memory.peak or v1 memory.max_usage_in_bytes (0 when neither exists).
func (cg *jobCgroup) usage() (cpu time.Duration, peak uint64) {
	if b, err := os.ReadFile(filepath.Join(cg.dir, "cpu.stat")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				cpu = time.Duration(n) * time.Microsecond
			}
		}
	}
	read := func(path string) uint64 {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	peak = read(filepath.Join(cg.dir, "memory.peak"))
	if d, ok := cg.v1["memory"]; ok && peak == 0 {
		peak = read(filepath.Join(d, "memory.max_usage_in_bytes"))
	}
	return cpu, peak
}

// remove deletes the job's (empty) cgroups.
func (cg *jobCgroup) remove() {
	for _, d := range cg.v1 {
		_ = os.Remove(d)
	}
	_ = os.Remove(cg.dir)
}

// killAll ends every job cgroup under a parent and removes them and the
// parent: the reaper's last act, and workerd's cleanup of a crashed
// predecessor's jobs. It returns how many jobs still had processes.
func killAll(parent string, v1 []string) (ended int) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "job-") {
			continue
		}
		cg := &jobCgroup{dir: filepath.Join(parent, e.Name()), v1: map[string]string{}}
		if !cg.empty() {
			ended++
		}
		cg.kill()
		cg.waitEmpty(5 * time.Second)
		_ = os.Remove(cg.dir)
		for _, p := range v1 {
			_ = os.Remove(filepath.Join(p, e.Name()))
		}
	}
	_ = os.Remove(parent)
	for _, p := range v1 {
		_ = os.Remove(p)
	}
	return ended
}
