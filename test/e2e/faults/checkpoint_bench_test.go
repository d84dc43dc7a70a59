package faults

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// BenchmarkCheckpointUploadCost runs the same training job on a real
// workerd with checkpoints off, then kept at each upload rate, and reports
// how long its steps took: the cost of uploading checkpoints while training.
// Each step hashes 32 MiB and writes it out synced (a trainer's CPU and disk
// work); a 256 MiB checkpoint is saved every 25 steps. Run it with
//
//	go test -run '^$' -bench CheckpointUploadCost -benchtime 1x ./test/e2e/faults
func BenchmarkCheckpointUploadCost(b *testing.B) {
	cfg := map[string]any{"steps": 200, "step_seconds": 0, "step_work_bytes": 32 << 20, "checkpointing_steps": 25,
		"checkpoint_bytes": 256 << 20, "checkpoints_total_limit": 2, "output_dir": "out"}
	trained := regexp.MustCompile(`trained steps 1 to 200 in ([0-9.]+) s`)
	kept := regexp.MustCompile(`\(step \d+, ([0-9.]+) MiB, \d+ files\) kept in the artifact store in ([0-9.]+) s`)
	for _, c := range []struct{ name, job string }{
		{"off", "checkpoints = false\n"},
		{"rate=unlimited", checkpointTOML("0")},
		{"rate=256M", checkpointTOML("256M")},
		{"rate=64M", checkpointTOML("64M")},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				o := StartOrchestratorWith(b, OrchOptions{LogLevel: "info"})
				o.StartWorker(WorkerSpec{Name: "w", Persistent: true, JobTOML: c.job})
				id := o.Submit(cfg, nil)
				o.WaitJob(id, "completed", 15*time.Minute)
				log := o.Logs(id)
				m := trained.FindStringSubmatch(log)
				if m == nil {
					b.Fatalf("no training time in the log:\n%s", log)
				}
				secs, _ := strconv.ParseFloat(m[1], 64)
				b.ReportMetric(secs*1000/200, "ms/step")
				var mib, upSecs float64
				for _, k := range kept.FindAllStringSubmatch(log, -1) {
					x, _ := strconv.ParseFloat(k[1], 64)
					y, _ := strconv.ParseFloat(k[2], 64)
					mib, upSecs = mib+x, upSecs+y
				}
				if upSecs > 0 {
					b.ReportMetric(mib/upSecs, "upload_MiB/s")
					b.ReportMetric(float64(len(kept.FindAllString(log, -1))), "checkpoints_kept")
				}
			}
		})
	}
}
