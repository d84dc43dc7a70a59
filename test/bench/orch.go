package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"

	"github.com/simpletuner/simpletuner-orchestration/internal/app/orchestratord"
	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// orch is one running orchestrator: the real binary as a child process, or
// (-inprocess, for profiling) the same App inside the bench process.
type orch struct {
	url   string
	admin string // admin token with every scope
	cmd   *exec.Cmd
	stop  func()
	// startup is the time from starting the daemon to /readyz answering 200
	// (polled every 5 ms).
	startup time.Duration
	logPath string
}

// writeConfig writes a TOML config for a loopback orchestrator on dbURL ("" =
// the embedded store), with extra appended, and returns its path and the API URL.
func writeConfig(dir, dbURL, extra string) (string, string, error) {
	port, err := testutil.FreePort()
	if err != nil {
		return "", "", err
	}
	cfg := fmt.Sprintf(`[server]
listen = ["127.0.0.1:%d"]
admin_socket = ""

[database]
url = %q

[paths]
state_dir = %q
configs_dir = %q

[log]
format = "text"
%s`, port, dbURL, filepath.Join(dir, "state"), filepath.Join(dir, "configs"), extra)
	if !strings.Contains(extra, "[metrics]") {
		cfg += "\n[metrics]\nlisten = \"\"\n"
	}
	path := filepath.Join(dir, "orchestratord.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", "", err
	}
	return path, fmt.Sprintf("http://127.0.0.1:%d", port), nil
}

// startOrch starts an orchestrator with the config in dir and waits for /readyz.
func startOrch(bin, dir, dbURL string, inProcess bool) (*orch, error) {
	return startOrchWith(bin, dir, dbURL, inProcess, "")
}

// startOrchWith is startOrch with extra TOML appended to the config; it
// records how long the daemon took from its start to a ready /readyz.
func startOrchWith(bin, dir, dbURL string, inProcess bool, extra string) (*orch, error) {
	cfgPath, url, err := writeConfig(dir, dbURL, extra)
	if err != nil {
		return nil, err
	}
	o := &orch{url: url, logPath: filepath.Join(dir, "orchestratord.log")}
	logFile, err := os.OpenFile(o.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	started := time.Now()
	if inProcess {
		err = o.startInProcess(cfgPath, logFile)
	} else {
		err = o.startChild(bin, cfgPath, logFile)
	}
	if err != nil {
		logFile.Close()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(url + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				o.startup = time.Since(started)
				// The token command needs the database the daemon created.
				out, err := exec.Command(bin, "--config", cfgPath, "token", "create", "--name", "bench", "--scope", "*").Output()
				if err != nil {
					o.stop()
					return nil, fmt.Errorf("token create: %w", err)
				}
				o.admin = strings.TrimSpace(string(out))
				return o, nil
			}
		}
		if time.Now().After(deadline) {
			o.stop()
			return nil, fmt.Errorf("orchestrator not ready within 60s; see %s", logFile.Name())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (o *orch) startChild(bin, cfgPath string, logFile *os.File) error {
	cmd := exec.Command(bin, "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if orchProcs > 0 {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", orchProcs))
	}
	// The child inherits the raised RLIMIT_NOFILE; it dies with the bench.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	o.cmd = cmd
	o.stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
	}
	return nil
}

func (o *orch) startInProcess(cfgPath string, logFile *os.File) error {
	args := []string{"--config", cfgPath}
	cfg, _, err := config.LoadOrchestrator(args, os.Getenv)
	if err != nil {
		return err
	}
	lv := new(slog.LevelVar)
	lv.Set(cfg.Log.SlogLevel())
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: lv}))
	app := orchestratord.New(cfg, args, os.Getenv, log, lv)
	ctx, cancel := context.WithCancel(context.Background())
	if err := app.Start(ctx); err != nil {
		cancel()
		return err
	}
	done := make(chan struct{})
	go func() { _ = app.Serve(ctx); close(done) }()
	o.stop = func() {
		cancel()
		<-done
		logFile.Close()
	}
	return nil
}

// rss is the orchestrator's resident set size in bytes (the bench's own in
// -inprocess mode).
func (o *orch) rss() (int64, error) { return readRSS(o.pid()) }

// pid is the orchestrator's process (the bench's own in -inprocess mode).
func (o *orch) pid() int {
	if o.cmd != nil {
		return o.cmd.Process.Pid
	}
	return os.Getpid()
}

func readRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS line")
}
