// Command demo-trainer stands in for SimpleTuner's trainer in demos and tests. It
// reads the job's config.json from $CONFIG_PATH like the real trainer and pretends
// to train:
//
//	steps          number of steps (default 5)
//	step_seconds   time per step (default 0.5)
//	exit_code      exit status at the end (default 0)
//	ignore_sigterm ignore SIGTERM and start a child that ignores it too, so that
//	               only SIGKILL to the whole process group ends the tree
//	publish        upload output.txt as outputs/output.txt to the orchestrator's
//	               artifact endpoint ($SIMPLETUNER_UPLOAD_ENDPOINT) at the end
//	publish_bytes  publish that many bytes instead (output.txt's text, repeated)
//	publish_retry_seconds
//	               retry a publish the orchestrator answers with 5xx (a full
//	               disk: 507) for up to that long, once a second
//	step_padding   pad each step line with that many "." (more output per
//	               step, e.g. to fill a disk's last page quickly)
//	checkpointing_steps
//	               save a checkpoint every that many steps, as SimpleTuner
//	               does: <output_dir>/checkpoint-<step>/ with
//	               model.safetensors, training_state.json and, last, .guard
//	output_dir     where (default "simpletuner-results"); the final weights
//	               go there too, as pytorch_lora_weights.safetensors
//	checkpoints_total_limit
//	               keep only that many checkpoints, pruning the oldest after a
//	               save
//	checkpoint_bytes
//	               size of model.safetensors in each checkpoint (default 1 KiB)
//	checkpoint_sparse
//	               write model.safetensors as a sparse file (large checkpoints
//	               in no time)
//	checkpoint_guard
//	               false: write no .guard (a trainer that does not mark its
//	               finished checkpoints)
//	step_work_bytes
//	               do that much work each step besides sleeping: hash that
//	               many bytes and write them to work.bin, synced (CPU and
//	               disk, as a trainer's data loading and logging)
//	pause_after_step
//	               on attempt 1, after that step (and its checkpoint), wait
//	               an hour: a job a test stops there whatever the machine's
//	               speed; retries do not wait
//	resume_from_checkpoint
//	               resume from that checkpoint ("latest": the highest step
//	               under output_dir); $SIMPLETUNER_RESUME_FROM is read when
//	               the config names none
//
// It prints "step 3/5 loss=0.41" lines, writes output.txt in its working directory
// and, for tests, pids.txt (its own pid and its child's).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	Steps         *int     `json:"steps"`
	StepSeconds   *float64 `json:"step_seconds"`
	ExitCode      int      `json:"exit_code"`
	IgnoreSIGTERM bool     `json:"ignore_sigterm"`
	Publish       bool     `json:"publish"`
	PublishBytes  int      `json:"publish_bytes"`
	PublishRetry  float64  `json:"publish_retry_seconds"`
	StepPadding   int      `json:"step_padding"`
	// BurnCPUSeconds spins until the trainer has used this much CPU time,
	// for checks of the worker's accounting.
	BurnCPUSeconds float64 `json:"burn_cpu_seconds"`

	CheckpointingSteps int    `json:"checkpointing_steps"`
	OutputDir          string `json:"output_dir"`
	TotalLimit         int    `json:"checkpoints_total_limit"`
	CheckpointBytes    *int64 `json:"checkpoint_bytes"`
	CheckpointSparse   bool   `json:"checkpoint_sparse"`
	CheckpointGuard    *bool  `json:"checkpoint_guard"`
	ResumeFrom         string `json:"resume_from_checkpoint"`
	StepWorkBytes      int    `json:"step_work_bytes"`
	PauseAfterStep     int    `json:"pause_after_step"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--sleeper" {
		sleeper()
		return
	}
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-trainer:", err)
		code = 1
	}
	os.Exit(code)
}

// run trains and returns the exit status the config asks for.
func run() (int, error) {
	path := os.Getenv("CONFIG_PATH")
	if path == "" {
		return 0, fmt.Errorf("CONFIG_PATH is not set")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	steps, stepSeconds := 5, 0.5
	if cfg.Steps != nil {
		steps = *cfg.Steps
	}
	if cfg.StepSeconds != nil {
		stepSeconds = *cfg.StepSeconds
	}

	pids := strconv.Itoa(os.Getpid()) + "\n"
	if cfg.IgnoreSIGTERM {
		signal.Ignore(syscall.SIGTERM)
		self, err := os.Executable()
		if err != nil {
			return 0, err
		}
		child := exec.Command(self, "--sleeper")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			return 0, err
		}
		pids += strconv.Itoa(child.Process.Pid) + "\n"
		fmt.Println("started a child that ignores SIGTERM, pid", child.Process.Pid)
	}
	if err := writeAtomically("pids.txt", []byte(pids)); err != nil {
		return 0, err
	}

	fmt.Printf("demo-trainer: job %s attempt %s, %d steps\n",
		os.Getenv("SIMPLETUNER_JOB_ID"), os.Getenv("SIMPLETUNER_ATTEMPT"), steps)
	if cfg.BurnCPUSeconds > 0 {
		fmt.Printf("burned %.2f s of CPU\n", burnCPU(time.Duration(cfg.BurnCPUSeconds*float64(time.Second))).Seconds())
	}
	ck := newCheckpointer(cfg)
	first, err := ck.resume()
	if err != nil {
		return 0, err
	}
	work := newStepWork(cfg.StepWorkBytes)
	began := time.Now()
	for i := first + 1; i <= steps; i++ {
		time.Sleep(time.Duration(stepSeconds * float64(time.Second)))
		if err := work.step(); err != nil {
			return 0, err
		}
		loss := 1 / math.Sqrt(float64(i)+1)
		fmt.Printf("step %d/%d loss=%.2f%s\n", i, steps, loss, strings.Repeat(".", max(0, cfg.StepPadding)))
		if err := ck.save(i, loss); err != nil {
			return 0, err
		}
		if i == cfg.PauseAfterStep && os.Getenv("SIMPLETUNER_ATTEMPT") == "1" {
			fmt.Printf("pausing after step %d\n", i)
			time.Sleep(time.Hour)
		}
	}
	if cfg.StepWorkBytes > 0 {
		fmt.Printf("trained steps %d to %d in %.2f s\n", first+1, steps, time.Since(began).Seconds())
	}
	out := fmt.Sprintf("trained %d steps\n", steps)
	if err := os.WriteFile("output.txt", []byte(out), 0o644); err != nil {
		return 0, err
	}
	if err := ck.final(out); err != nil {
		return 0, err
	}
	if cfg.Publish {
		data := []byte(out)
		if cfg.PublishBytes > 0 {
			data = bytes.Repeat(data, cfg.PublishBytes/len(data)+1)[:cfg.PublishBytes]
		}
		deadline := time.Now().Add(time.Duration(cfg.PublishRetry * float64(time.Second)))
		for {
			err := publish("outputs/output.txt", data)
			var se *statusError
			if err == nil || !errors.As(err, &se) || se.code < 500 || time.Now().After(deadline) {
				if err != nil {
					return 0, err
				}
				break
			}
			fmt.Printf("%v; retrying\n", err)
			time.Sleep(time.Second)
		}
	}
	fmt.Println("training finished")
	if cfg.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "exiting with code %d as configured\n", cfg.ExitCode)
	}
	return cfg.ExitCode, nil
}

// writeAtomically writes a file that a reader sees either whole or not at
// all: a test polling for pids.txt must never read it half written.
func writeAtomically(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// publish uploads data the way a job publishes its results: PUT to the
// upload endpoint with the attempt's upload token.
func publish(key string, data []byte) error {
	req, err := http.NewRequest(http.MethodPut, os.Getenv("SIMPLETUNER_UPLOAD_ENDPOINT")+"/"+key, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("X-Upload-Token", os.Getenv("SIMPLETUNER_UPLOAD_TOKEN"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("publishing %s: %w", key, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		return &statusError{code: res.StatusCode, msg: fmt.Sprintf("publishing %s: HTTP %d: %s", key, res.StatusCode, bytes.TrimSpace(body))}
	}
	return nil
}

type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// burnCPU spins until this process has used d of CPU time; it returns how
// much it used in all.
func burnCPU(d time.Duration) time.Duration {
	used := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	x := 1.0
	for used() < d {
		for i := 0; i < 100000; i++ {
			x = math.Sqrt(x + float64(i))
		}
	}
	if x < 0 { // keeps the loop from being optimised away
		fmt.Print("")
	}
	return used()
}

// sleeper ignores SIGTERM and waits for a long time: a grandchild that only a
// SIGKILL of the process group removes.
func sleeper() {
	signal.Ignore(syscall.SIGTERM)
	time.Sleep(time.Hour)
}
