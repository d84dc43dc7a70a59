package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// checkpointer saves and resumes checkpoints the way SimpleTuner lays them
// out: <output_dir>/checkpoint-<step>/ holding the model, the training
// state, and the guard written last (to .guard.tmp, then renamed).
type checkpointer struct {
	cfg   config
	dir   string
	bytes int64
	guard bool
}

func newCheckpointer(cfg config) *checkpointer {
	c := &checkpointer{cfg: cfg, dir: cfg.OutputDir, bytes: 1024, guard: true}
	if c.dir == "" {
		c.dir = "simpletuner-results"
	}
	if cfg.CheckpointBytes != nil {
		c.bytes = *cfg.CheckpointBytes
	}
	if cfg.CheckpointGuard != nil {
		c.guard = *cfg.CheckpointGuard
	}
	return c
}

type trainingState struct {
	GlobalStep int     `json:"global_step"`
	Loss       float64 `json:"loss"`
}

// resume returns the step the checkpoint to resume from was saved at (0:
// none), after checking it holds what this trainer saves.
func (c *checkpointer) resume() (int, error) {
	from := c.cfg.ResumeFrom
	if from == "" {
		from = os.Getenv("SIMPLETUNER_RESUME_FROM")
	}
	switch from {
	case "":
		return 0, nil
	case "latest":
		steps := c.list()
		if len(steps) == 0 {
			fmt.Println("no checkpoint to resume from; starting afresh")
			return 0, nil
		}
		from = filepath.Join(c.dir, fmt.Sprintf("checkpoint-%d", steps[len(steps)-1]))
	}
	raw, err := os.ReadFile(filepath.Join(from, "training_state.json"))
	if err != nil {
		return 0, fmt.Errorf("resume_from_checkpoint %s: %w", from, err)
	}
	var st trainingState
	if err := json.Unmarshal(raw, &st); err != nil {
		return 0, fmt.Errorf("resume_from_checkpoint %s: %w", from, err)
	}
	info, err := os.Stat(filepath.Join(from, "model.safetensors"))
	if err != nil || info.Size() != c.bytes {
		return 0, fmt.Errorf("resume_from_checkpoint %s: the model is not the one saved (%v)", from, err)
	}
	fmt.Printf("resumed from %s at step %d (loss=%.2f)\n", filepath.Base(from), st.GlobalStep, st.Loss)
	return st.GlobalStep, nil
}

// list returns the steps of the checkpoints under the output directory, in
// order.
func (c *checkpointer) list() []int {
	entries, _ := os.ReadDir(c.dir)
	var steps []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "checkpoint-")
		if n, err := strconv.Atoi(rest); ok && err == nil {
			steps = append(steps, n)
		}
	}
	slices.Sort(steps)
	return steps
}

// save writes the checkpoint of step when it is one, then prunes.
func (c *checkpointer) save(step int, loss float64) error {
	if c.cfg.CheckpointingSteps <= 0 || step%c.cfg.CheckpointingSteps != 0 {
		return nil
	}
	dir := filepath.Join(c.dir, fmt.Sprintf("checkpoint-%d", step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(dir, ".guard"))
	if err := c.model(filepath.Join(dir, "model.safetensors"), step); err != nil {
		return err
	}
	st, _ := json.Marshal(trainingState{GlobalStep: step, Loss: loss})
	if err := os.WriteFile(filepath.Join(dir, "training_state.json"), st, 0o644); err != nil {
		return err
	}
	if c.guard {
		if err := writeAtomically(filepath.Join(dir, ".guard"), []byte("complete\n")); err != nil {
			return err
		}
	}
	fmt.Printf("saved checkpoint-%d\n", step)
	if lim := c.cfg.TotalLimit; lim > 0 {
		steps := c.list()
		for _, old := range steps[:max(0, len(steps)-lim)] {
			_ = os.RemoveAll(filepath.Join(c.dir, fmt.Sprintf("checkpoint-%d", old)))
		}
	}
	return nil
}

// model writes the checkpoint's weights: bytes that depend on the step, or
// a sparse file of that size.
func (c *checkpointer) model(path string, step int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if c.cfg.CheckpointSparse {
		return f.Truncate(c.bytes)
	}
	block := []byte(strings.Repeat(fmt.Sprintf("weights of step %d\n", step), 4096))
	for left := c.bytes; left > 0; {
		n := min(left, int64(len(block)))
		if _, err := f.Write(block[:n]); err != nil {
			return err
		}
		left -= n
	}
	return f.Close()
}

// final writes the trained weights into the output directory when the
// trainer checkpoints there.
func (c *checkpointer) final(summary string) error {
	if c.cfg.CheckpointingSteps <= 0 && c.cfg.OutputDir == "" {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "pytorch_lora_weights.safetensors"), []byte(summary), 0o644)
}

// stepWork is a step's work besides sleeping: hashing a buffer and writing
// it out, synced.
type stepWork struct{ buf []byte }

func newStepWork(n int) *stepWork {
	w := &stepWork{buf: make([]byte, max(n, 0))}
	for i := range w.buf {
		w.buf[i] = byte(i * 7)
	}
	return w
}

func (w *stepWork) step() error {
	if len(w.buf) == 0 {
		return nil
	}
	sum := sha256.Sum256(w.buf)
	w.buf[0] ^= sum[0]
	f, err := os.Create("work.bin")
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(w.buf); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
