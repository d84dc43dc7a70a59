package config

import (
	"os"
	"testing"
)

func addSeeds(f *testing.F, paths ...string) {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("[server]\nlisten = \"x\"\n[bogus]\na.b.c = 1\n[[jobs]]\n"))
	f.Add([]byte("worker.labels.x = 1\n[job.env]\nA = [1]\n'server.listen' = 2\n"))
}

// The file loader must turn any input into errors, never a panic.
func FuzzLoadOrchestrator(f *testing.F) {
	addSeeds(f, "../../etc/orchestratord.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultOrchestrator()
		l := newLoader(c)
		l.decodeTOML("fuzz.toml", data)
		c.validate(l)
		_ = c.Redacted()
		for _, e := range l.errs {
			_ = e.Error()
		}
	})
}

func FuzzLoadWorker(f *testing.F) {
	addSeeds(f, "../../etc/workerd.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		c := DefaultWorker()
		l := newLoader(c)
		l.decodeTOML("fuzz.toml", data)
		c.validate(l)
		_ = c.Redacted()
		for _, e := range l.errs {
			_ = e.Error()
		}
	})
}
