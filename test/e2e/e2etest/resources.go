package e2etest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Metric reads one unlabelled sample from the orchestrator's /metrics (-1 when unreadable).
func (o *Orch) Metric(name string) int64 {
	if o.MetricsURL == "" {
		return -1
	}
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(o.MetricsURL)
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	ScanForSecrets(o.T, "the metrics page", string(b))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return int64(v)
			}
		}
	}
	return -1
}

// Usage is what a process holds.
type Usage struct {
	FDs, Sockets, Threads int
	DBFiles               int // descriptors on the SQLite database files (a connection pool grows and shrinks)
	RSSKiB                int64
}

func (u Usage) String() string {
	return fmt.Sprintf("fds=%d (sockets=%d db=%d) threads=%d rss=%dKiB", u.FDs, u.Sockets, u.DBFiles, u.Threads, u.RSSKiB)
}

// ProcUsage reads a process's open descriptors, sockets, threads and resident memory from /proc.
func ProcUsage(pid int) Usage {
	var u Usage
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
	u.FDs = len(fds)
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		switch {
		case err != nil:
		case strings.HasPrefix(l, "socket:"):
			u.Sockets++
		case strings.Contains(l, "orchestrator.db"):
			u.DBFiles++
		}
	}
	f, err := os.Open(filepath.Join(dir, "status"))
	if err != nil {
		return u
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
		switch k {
		case "Threads":
			u.Threads, _ = strconv.Atoi(v)
		case "VmRSS":
			u.RSSKiB, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return u
}

// PeakRSSKiB reads VmHWM, the process's peak resident memory.
func PeakRSSKiB(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// Established counts ESTABLISHED TCP connections whose local port is port
// (the server side of connections to a listener on it), over IPv4 and IPv6.
func Established(port int) int {
	n := 0
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "01" {
				n++
			}
		}
	}
	return n
}

// Port is the orchestrator's API port.
func (o *Orch) Port() int {
	i := strings.LastIndexByte(o.URL, ':')
	p, _ := strconv.Atoi(o.URL[i+1:])
	return p
}

// FDTargets lists what a process's descriptors point at.
func FDTargets(pid int) []string {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, _ := os.ReadDir(dir)
	var out []string
	for _, fd := range fds {
		l, _ := os.Readlink(filepath.Join(dir, fd.Name()))
		out = append(out, fd.Name()+"→"+l)
	}
	return out
}
