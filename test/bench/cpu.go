package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTick is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTick = 100

// cpuUse is CPU seconds used so far, by who.
type cpuUse struct {
	orch, bench, postgres, total float64
}

// postmaster, when set, limits the postgres figure to that server and its
// backends; otherwise every postgres process on the machine counts.
var postmaster int

// findPostmaster returns the pid of the postgres server listening on port.
func findPostmaster(port string) int {
	cmds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmds {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-p" && args[i+1] == port && strings.HasSuffix(args[0], "/postgres") {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
	}
	return 0
}

// sampleCPU reads the CPU time of the orchestrator (orchPID, 0 when it runs
// inside the bench), the bench, every postgres process, and the machine.
func sampleCPU(orchPID int) cpuUse {
	var u cpuUse
	self := os.Getpid()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime stime: fields 14 and 15, counted
		// after the ")" that ends comm because comm may hold spaces.
		s := string(data)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		comm := s[strings.IndexByte(s, '(')+1 : end]
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		secs := (ut + st) / clockTick
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		switch {
		case pid == self:
			u.bench += secs
		case pid == orchPID:
			u.orch += secs
		case comm == "postgres" && (postmaster == 0 || pid == postmaster || f[1] == strconv.Itoa(postmaster)):
			// With the backends the postmaster reaped (cutime, cstime):
			// pooled connections come and go.
			cut, _ := strconv.ParseFloat(f[13], 64)
			cst, _ := strconv.ParseFloat(f[14], 64)
			u.postgres += secs + (cut+cst)/clockTick
		}
	}
	u.total = busySeconds()
	return u
}

// busySeconds is the time every core of the machine has been busy, from
// /proc/stat.
func busySeconds() float64 {
	busy, _ := machineSeconds()
	return busy
}

// machineSeconds reads /proc/stat's first line: the time every core has been
// busy, and the time a hypervisor ran something else while this machine had
// work for its cores (steal), which a busy time leaves out.
func machineSeconds() (busy, steal float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	field := func(i int) float64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseFloat(f[i], 64)
		return n / clockTick
	}
	// user nice system idle iowait irq softirq steal…
	for _, i := range []int{1, 2, 3, 6, 7} {
		busy += field(i)
	}
	return busy, field(8)
}

// since is the CPU used between two samples, as a table cell.
func (u cpuUse) since(before cpuUse) string {
	d := cpuUse{u.orch - before.orch, u.bench - before.bench, u.postgres - before.postgres, u.total - before.total}
	other := d.total - d.orch - d.bench - d.postgres
	s := fmt.Sprintf("orchestrator %.1f s, bench %.1f s", d.orch, d.bench)
	if d.postgres > 0 {
		s += fmt.Sprintf(", postgres %.1f s", d.postgres)
	}
	return s + fmt.Sprintf(", other %.1f s", max(other, 0))
}
