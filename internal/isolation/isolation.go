package isolation

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// Modes of [job] isolation.
const (
	ModeAuto         = "auto"          // a cgroup per job where possible, else a process group
	ModeCgroup       = "cgroup"        // a cgroup per job, or refuse to start
	ModeProcessGroup = "process-group" // a process group per job only
)

// Limits are per-job resource limits applied through the job's cgroup; 0 is
// no limit.
type Limits struct {
	MemoryMax int64 // bytes
	TasksMax  int64 // processes and threads
}

// Config is how jobs are to be walled off.
type Config struct {
	Mode string
	// User's groups are the jobs' groups; "" runs jobs as workerd's own user.
	User string
	// UIDRange gives each running job a uid of its own ("61184-61439"); ""
	// runs every job as User itself (jobs can then see each other).
	UIDRange string
	Limits   Limits
	// Reaper starts the reaper (workerd re-executed with ReaperArg); nil
	// starts none (tests running the worker in their own process).
	Reaper []string
	// Gate is workerd re-executed with GateArg, the leader of a job that
	// joins v1 cgroups until it joined them (see LaunchGate); nil starts
	// trainers straight away.
	Gate []string
	Log  *slog.Logger

	// UIDLockFile is where workerds on this machine lock the uids their jobs
	// run as; "" is DefaultUIDLockFile.
	UIDLockFile string

	// Where to read the mounts and this process's cgroups (tests).
	MountInfo, ProcCgroup string
}

// Usage is what a job used, reported with its end.
type Usage struct {
	CPU        time.Duration // user + system CPU time of every process of the job
	PeakMemory uint64        // bytes; 0 when unknown
}

// Isolator starts jobs behind the walls the machine allows.
type Isolator struct {
	log    *slog.Logger
	h      *hierarchy // nil: process groups only
	limits Limits
	// switchUsers: jobs run as ident (no pool) or as a uid from pool with
	// ident's groups.
	switchUsers bool
	ident       identity
	pool        *uidPool
	reaper      *reaper
	gate        []string
	// devicesErr says why jobs cannot be kept from other GPUs' device
	// files; nil when they can.
	devicesErr error
}

// New finds out what the machine allows, sets up the jobs' parent cgroups and
// starts the reaper. It fails only for what an admin must fix: an unknown
// job user, a bad uid range, limits without a controller to apply them, or
// mode "cgroup" without a writable cgroup v2.
func New(cfg Config) (*Isolator, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MountInfo == "" {
		cfg.MountInfo, cfg.ProcCgroup = "/proc/self/mountinfo", "/proc/self/cgroup"
	}
	iso := &Isolator{log: cfg.Log, limits: cfg.Limits, gate: cfg.Gate}
	switch cfg.Mode {
	case "", ModeAuto, ModeCgroup:
		h, err := setupHierarchy(cfg.MountInfo, cfg.ProcCgroup)
		switch {
		case err == nil:
			iso.h = h
			reapOrphans(filepath.Dir(h.parent), h.v1)
		case cfg.Mode == ModeCgroup:
			return nil, fmt.Errorf("job isolation %q: %w", ModeCgroup, err)
		default:
			cfg.Log.Warn("no writable cgroup v2 hierarchy: each job is its own process group; a job process that calls setsid can outlive its job", "why", err)
		}
	case ModeProcessGroup:
	default:
		return nil, fmt.Errorf("job isolation %q: want %s, %s or %s", cfg.Mode, ModeAuto, ModeCgroup, ModeProcessGroup)
	}
	if err := iso.checkLimits(); err != nil {
		return nil, err
	}
	iso.devicesErr = errors.New("no cgroup per job")
	if iso.h != nil {
		iso.devicesErr = canFilterDevices(iso.h.parent)
	}
	if err := iso.setupUsers(cfg); err != nil {
		return nil, err
	}
	if cfg.Reaper != nil {
		r, err := startReaper(cfg.Reaper, iso.h)
		if err != nil {
			return nil, fmt.Errorf("starting the job reaper: %w", err)
		}
		iso.reaper = r
	}
	return iso, nil
}

func (iso *Isolator) checkLimits() error {
	for _, l := range []struct {
		key, controller string
		value           int64
	}{{"memory_max", "memory", iso.limits.MemoryMax}, {"tasks_max", "pids", iso.limits.TasksMax}} {
		if l.value <= 0 {
			continue
		}
		if iso.h == nil {
			return fmt.Errorf("[job] %s needs a cgroup per job, and this machine offers none", l.key)
		}
		if _, v1 := iso.h.v1[l.controller]; !v1 && !contains(iso.h.controllers, l.controller) {
			return fmt.Errorf("[job] %s needs the %s cgroup controller, and none is available to workerd (with systemd: Delegate=yes)", l.key, l.controller)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (iso *Isolator) setupUsers(cfg Config) error {
	if cfg.User == "" {
		iso.log.Warn("[job] user is empty: jobs run as workerd's own user and can read what it reads")
		return nil
	}
	if !canSwitchUsers() {
		iso.log.Warn("workerd may not switch users (it is not root and lacks CAP_SETUID/CAP_SETGID): jobs run as workerd's own user and can read its token and its other jobs",
			"uid", os.Getuid(), "job_user", cfg.User)
		return nil
	}
	uid, gid, groups, err := jobUser(cfg.User)
	if err != nil {
		return fmt.Errorf("[job] user: %w; the workerd package creates simpletuner-job, elsewhere create it (useradd --system --no-create-home --shell /usr/sbin/nologin %s) or name another unprivileged user such as nobody", err, cfg.User)
	}
	iso.switchUsers = true
	iso.ident = identity{uid: uid, gid: gid, groups: groups}
	if cfg.UIDRange != "" {
		lo, hi, err := config.ParseUIDRange(cfg.UIDRange)
		if err != nil {
			return fmt.Errorf("[job] uid_range: %w", err)
		}
		lockFile := cfg.UIDLockFile
		if lockFile == "" {
			lockFile = DefaultUIDLockFile
		}
		if iso.pool, err = newUIDPool(uidRange{lo, hi}, lockFile); err != nil {
			return err
		}
	}
	return nil
}

// Name is the short name of the isolation in force, for the registration's
// capabilities: "cgroup" or "process-group", with "+uid" when each job has a
// uid of its own and "+user" when all jobs share the job user.
func (iso *Isolator) Name() string {
	name := ModeProcessGroup
	if iso.h != nil {
		name = ModeCgroup
	}
	switch {
	case iso.pool != nil:
		name += "+uid"
	case iso.switchUsers:
		name += "+user"
	}
	return name
}

// Describe says in a sentence what walls jobs get here.
func (iso *Isolator) Describe() string {
	var parts []string
	if iso.h != nil {
		s := "a cgroup v2 per job under " + iso.h.parent
		var ctl []string
		ctl = append(ctl, iso.h.controllers...)
		for c := range iso.h.v1 {
			ctl = append(ctl, c+" (v1)")
		}
		if len(ctl) > 0 {
			s += " with " + strings.Join(ctl, ", ")
		}
		switch iso.LaunchPath() {
		case LaunchGate:
			s += ", each job forked into it (CLONE_INTO_CGROUP) and held by a gate until it joined its v1 cgroups"
		case LaunchCloneInV1:
			s += ", each job forked into it (CLONE_INTO_CGROUP) by a thread inside its v1 cgroups"
		default:
			s += ", each job forked straight into it (CLONE_INTO_CGROUP)"
		}
		parts = append(parts, s)
	} else {
		parts = append(parts, "a process group per job (no cgroup: setsid escapers are not contained)")
	}
	switch {
	case iso.pool != nil:
		parts = append(parts, fmt.Sprintf("a uid per job from %d-%d with group %d", iso.pool.r.lo, iso.pool.r.hi, iso.ident.gid))
	case iso.switchUsers:
		parts = append(parts, fmt.Sprintf("every job as uid %d (jobs can see each other)", iso.ident.uid))
	default:
		parts = append(parts, "jobs as workerd's own user")
	}
	if iso.devicesErr == nil {
		parts = append(parts, "each job may open only its own GPUs' device files")
	} else {
		parts = append(parts, "jobs are told their GPUs but may open any GPU's device file ("+iso.devicesErr.Error()+")")
	}
	return strings.Join(parts, "; ")
}

// Close stops the reaper (no job may be left by then) and removes the jobs'
// parent cgroups.
func (iso *Isolator) Close() {
	if iso.reaper != nil {
		iso.reaper.close()
	}
	if iso.pool != nil {
		iso.pool.close()
	}
	if iso.h != nil {
		var v1 []string
		for _, d := range iso.h.v1 {
			v1 = append(v1, d)
		}
		killAll(iso.h.parent, v1)
	}
}

// reapOrphans ends the jobs of a workerd that died without its reaper acting
// (both killed at once): every simpletuner-jobs-<pid> parent whose process is
// gone. Such a workerd's own leaf (workerd-<pid>) is removed too.
func reapOrphans(base string, v1 map[string]string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "workerd-")); err == nil && e.IsDir() &&
			pid != os.Getpid() && syscall.Kill(pid, 0) != nil {
			_ = os.Remove(filepath.Join(base, e.Name()))
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "simpletuner-jobs-"))
		if !e.IsDir() || err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		var olds []string
		for _, d := range v1 {
			olds = append(olds, filepath.Join(filepath.Dir(d), e.Name()))
		}
		killAll(filepath.Join(base, e.Name()), olds)
	}
}

// Job is one started attempt's walls.
type Job struct {
	iso   *Isolator
	dir   string
	ident identity
	owned bool // ident came from the pool
	cg    *jobCgroup
	cgFD  int
	pgid  int
	// gateR and gateW are the pipe the gated leader waits on (see Command).
	gateR, gateW *os.File
	// forkedInV1: the leader was forked inside the v1 cgroups (StartLeader).
	forkedInV1 bool
}

// Start prepares the walls of attempt n of jobID, whose directory is dir:
// the directory exists and belongs to root while workerd writes the job's
// files (Handover gives it to the job), a uid is reserved, the cgroup made.
// The job may not open the device files in deny (the GPUs it was not given)
// where the machine allows such a filter.
func (iso *Isolator) Start(jobID string, n int, dir string, deny []string) (*Job, error) {
	j := &Job{iso: iso, dir: dir, cgFD: -1}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if iso.switchUsers {
		j.ident = iso.ident
		if iso.pool != nil {
			prev := ownerOf(filepath.Join(dir, "config.json"))
			uid, err := iso.pool.take(jobID, prev)
			if err != nil {
				return nil, err
			}
			j.ident.uid, j.owned = uid, true
			if prev != 0 && prev != uid {
				// An earlier attempt's files belong to a uid now running another
				// job: they cannot be handed over, so they are set aside.
				aside := fmt.Sprintf("%s.uid%d.%d", dir, prev, time.Now().Unix())
				iso.log.Warn("the job's earlier files belong to a uid in use by another job; starting in a fresh directory",
					"job_id", jobID, "kept_in", aside)
				if err := os.Rename(dir, aside); err != nil {
					j.release()
					return nil, err
				}
				if err := os.Mkdir(dir, 0o700); err != nil {
					j.release()
					return nil, err
				}
			}
		}
		// Locked while workerd writes the job's files.
		if err := os.Chown(dir, 0, 0); err != nil {
			j.release()
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		j.release()
		return nil, err
	}
	if iso.h != nil {
		cg, err := iso.h.makeJob(fmt.Sprintf("job-%s-%d", jobID, n), iso.limits)
		if err != nil {
			j.release()
			return nil, fmt.Errorf("job cgroup: %w", err)
		}
		j.cg = cg
		fd, err := syscall.Open(cg.dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			j.release()
			return nil, fmt.Errorf("job cgroup: %w", err)
		}
		j.cgFD = fd
		if err := iso.filterDevices(fd, deny); err != nil {
			j.release()
			return nil, err
		}
	}
	return j, nil
}

// filterDevices keeps the job's cgroup from opening the device files in deny.
func (iso *Isolator) filterDevices(cgroupFD int, deny []string) error {
	if len(deny) == 0 || iso.devicesErr != nil {
		return nil
	}
	var devs []charDevice
	for _, path := range deny {
		d, err := deviceOf(path)
		if err != nil {
			return fmt.Errorf("GPU device file: %w", err)
		}
		devs = append(devs, d)
	}
	return attachDenyDevices(cgroupFD, devs)
}

// ownerOf is the uid owning path, 0 when it does not exist.
func ownerOf(path string) uint32 {
	var st syscall.Stat_t
	if syscall.Lstat(path, &st) != nil {
		return 0
	}
	return st.Uid
}

// Handover gives the job its directory and the files workerd wrote in it.
func (j *Job) Handover(files ...string) error {
	if !j.iso.switchUsers {
		return nil
	}
	for _, f := range append(files, j.dir) {
		if err := os.Lchown(f, int(j.ident.uid), int(j.ident.gid)); err != nil {
			return err
		}
	}
	return nil
}

// Apply sets how the job's leader is started: its own process group, its
// cgroup from the first instruction (CLONE_INTO_CGROUP), its identity.
func (j *Job) Apply(attr *syscall.SysProcAttr) {
	attr.Setpgid = true
	if j.cgFD >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, j.cgFD
	}
	if j.iso.switchUsers {
		attr.Credential = &syscall.Credential{Uid: j.ident.uid, Gid: j.ident.gid, Groups: j.ident.groups}
	}
}

// Env is what the job's environment needs on top of the usual: a home of its
// own when it runs as another user (the job user's may not exist or be shared).
func (j *Job) Env() []string {
	if !j.iso.switchUsers {
		return nil
	}
	user := "job" + strconv.FormatUint(uint64(j.ident.uid), 10)
	return []string{"HOME=" + j.dir, "USER=" + user, "LOGNAME=" + user}
}

// Started records the leader: it joins the v1 cgroups (unless it was forked
// inside them) and the reaper learns its process group.
func (j *Job) Started(pid int) {
	j.pgid = pid
	if j.cg != nil && !j.forkedInV1 {
		j.cg.joinV1(pid)
	}
	j.openGate()
	if j.iso.reaper != nil && j.cg == nil {
		j.iso.reaper.send(fmt.Sprintf("+%d", pid))
	}
}

// Contains reports whether process pid belongs to the job: it is in the
// job's cgroup, or, without one, in the job's process group.
func (j *Job) Contains(pid int) bool {
	if j.cg != nil {
		return slices.Contains(j.cg.pids(), pid)
	}
	pgid, err := syscall.Getpgid(pid)
	return err == nil && j.pgid > 0 && pgid == j.pgid
}

// Signal sends sig to every process of the job.
func (j *Job) Signal(sig syscall.Signal) {
	if j.cg != nil {
		j.cg.signal(sig)
		return
	}
	if j.pgid > 0 {
		_ = syscall.Kill(-j.pgid, sig)
	}
}

// Kill ends every process of the job at once.
func (j *Job) Kill() {
	if j.cg != nil {
		j.cg.kill()
		return
	}
	if j.pgid > 0 {
		_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
	}
}

// Finish ends what is left of the job once its leader was reaped, reads what
// it used, removes its cgroup, locks its directory and frees its uid. leader is
// the leader's own resource usage (with its reaped descendants), the answer
// where no cgroup counts.
func (j *Job) Finish(leader *syscall.Rusage) Usage {
	j.Kill()
	var u Usage
	if leader != nil {
		u.CPU = time.Duration(leader.Utime.Nano() + leader.Stime.Nano())
		u.PeakMemory = uint64(leader.Maxrss) * 1024
	}
	if j.cg != nil {
		if !j.cg.waitEmpty(10 * time.Second) {
			j.iso.log.Error("the job's cgroup is not empty after SIGKILL", "cgroup", j.cg.dir)
		}
		cpu, peak := j.cg.usage()
		u.CPU = cpu
		// A v1 memory cgroup, joined after the start, misses what came
		// before; the leader's own peak may then be the larger.
		u.PeakMemory = max(u.PeakMemory, peak)
	}
	j.release()
	return u
}

// release undoes Start: cgroup, uid, reaper entry; the directory is locked
// (owned by root) so no later job with the same uid can enter it.
func (j *Job) release() {
	j.closeGate()
	if j.cgFD >= 0 {
		_ = syscall.Close(j.cgFD)
		j.cgFD = -1
	}
	if j.cg != nil {
		j.cg.remove()
	}
	if j.iso.switchUsers {
		_ = os.Chown(j.dir, 0, 0)
	}
	if j.owned {
		j.iso.pool.release(j.ident.uid)
		j.owned = false
	}
	if j.iso.reaper != nil && j.cg == nil && j.pgid > 0 {
		j.iso.reaper.send(fmt.Sprintf("-%d", j.pgid))
	}
}

// CheckReachable fails when jobs running as other uids could not pass
// through dir's parents to their own directories below dir: every parent
// must let others search it.
func (iso *Isolator) CheckReachable(dir string) error {
	if !iso.switchUsers {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := abs; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("jobs run as uids of their own and cannot reach %s: %s is mode %04o; let others search it (chmod o+x %s) or move the directory",
				abs, d, st.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}

// Uid is the uid the job runs as (workerd's own when it cannot switch).
func (j *Job) Uid() uint32 {
	if j.iso.switchUsers {
		return j.ident.uid
	}
	return uint32(os.Getuid())
}

// Owner is who the job's files belong to: its uid and gid, and whether
// they are another user's than workerd's (false: the job runs as workerd).
func (j *Job) Owner() (uid, gid uint32, other bool) {
	if j.iso.switchUsers {
		return j.ident.uid, j.ident.gid, true
	}
	return uint32(os.Getuid()), uint32(os.Getgid()), false
}

// CgroupDir is the job's v2 cgroup directory, "" without one.
func (j *Job) CgroupDir() string {
	if j.cg == nil {
		return ""
	}
	return j.cg.dir
}

// Probe says what New would set up, without changing anything: for
// --check-config.
func Probe(cfg Config) string {
	if cfg.MountInfo == "" {
		cfg.MountInfo, cfg.ProcCgroup = "/proc/self/mountinfo", "/proc/self/cgroup"
	}
	var parts []string
	switch base, err := cgroup2Base(cfg.MountInfo, cfg.ProcCgroup); {
	case cfg.Mode == ModeProcessGroup:
		parts = append(parts, "a process group per job (isolation = \"process-group\")")
	case err != nil:
		parts = append(parts, "a process group per job: "+err.Error())
	case syscall.Access(base, 2) != nil:
		parts = append(parts, "a process group per job: the cgroup v2 directory "+base+" is not writable")
	default:
		parts = append(parts, "a cgroup v2 per job under "+base)
	}
	switch {
	case cfg.User == "":
		parts = append(parts, "jobs as workerd's own user ([job] user is empty)")
	case !canSwitchUsers():
		parts = append(parts, "jobs as workerd's own user (it may not switch users here)")
	default:
		if _, _, _, err := jobUser(cfg.User); err != nil {
			parts = append(parts, "ERROR: "+err.Error())
		} else if cfg.UIDRange != "" {
			parts = append(parts, "a uid per job from "+cfg.UIDRange+" with the groups of "+cfg.User)
		} else {
			parts = append(parts, "every job as "+cfg.User)
		}
	}
	return strings.Join(parts, "; ")
}
