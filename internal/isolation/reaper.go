package isolation

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ReaperArg is the hidden first argument that makes simpletuner-workerd act
// as its own reaper (see RunReaper).
const ReaperArg = "__reap-jobs"

// reaper is workerd's side of the reaper process: a pipe whose end means
// "workerd is gone, end every job that is left".
type reaper struct {
	mu  sync.Mutex
	w   *os.File
	cmd *exec.Cmd
}

// startReaper starts the reaper and tells it where the jobs' cgroups are.
func startReaper(argv []string, h *hierarchy) (*reaper, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = pr
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group: a signal to workerd's group does not take it along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pr.Close()
	go func() { _ = cmd.Wait() }() // reaped whenever it ends
	r := &reaper{w: pw, cmd: cmd}
	if h != nil {
		r.send("cgroup " + h.parent)
		for _, d := range h.v1 {
			r.send("v1 " + d)
		}
	}
	return r, nil
}

func (r *reaper) send(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_, _ = r.w.WriteString(line + "\n")
	}
}

// close ends the pipe: the reaper ends whatever jobs are left and exits.
func (r *reaper) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil {
		_ = r.w.Close()
		r.w = nil
	}
}

// RunReaper is the reaper process: it reads what workerd tells it on stdin
// ("cgroup DIR", "v1 DIR", "+PGID", "-PGID") until the pipe ends, then ends
// every job cgroup under DIR and every process group still registered. It
// returns the exit status.
func RunReaper(stdin io.Reader) int {
	var parent string
	var v1 []string
	groups := map[int]bool{}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cgroup "):
			parent = strings.TrimPrefix(line, "cgroup ")
		case strings.HasPrefix(line, "v1 "):
			v1 = append(v1, strings.TrimPrefix(line, "v1 "))
		case strings.HasPrefix(line, "+"), strings.HasPrefix(line, "-"):
			if pgid, err := strconv.Atoi(line[1:]); err == nil && pgid > 1 {
				groups[pgid] = line[0] == '+'
			}
		}
	}
	// workerd is gone (or done): nothing of its jobs may outlive it.
	ended := 0
	for pgid, live := range groups {
		if live && syscall.Kill(-pgid, syscall.SIGKILL) == nil {
			ended++
		}
	}
	if parent != "" {
		ended += killAll(parent, v1)
	}
	if ended > 0 {
		fmt.Fprintf(os.Stderr, "simpletuner-workerd reaper: workerd ended before %d of its jobs; ended them\n", ended)
	}
	return 0
}
