package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
)

// The worker's client certificate: files named in the config, or the
// systemd credentials worker-cert and worker-key; both or neither, a usable
// pair, and an https:// URL to present it to.
func TestWorkerClientCertificate(t *testing.T) {
	t.Parallel()
	ca, other := testpki.NewCA(t, "fleet"), testpki.NewCA(t, "other")
	dir := t.TempDir()
	cert, key := ca.Client(t, "gpu").Write(t, dir, "gpu")
	_, otherKey := other.Client(t, "gpu").Write(t, dir, "other")
	creds := func(files map[string]string) string {
		d := t.TempDir()
		for name, src := range files {
			b := []byte{}
			if src != "" {
				b, _ = os.ReadFile(src)
			}
			if err := os.WriteFile(filepath.Join(d, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	const https = "[orchestrator]\nurl = \"https://o.example:8001\"\n"
	full := creds(map[string]string{"worker-cert": cert, "worker-key": key})
	for _, c := range []struct {
		name, toml, creds string
		wantCert, wantErr string
	}{
		{"files", https + "cert_file = \"" + cert + "\"\nkey_file = \"" + key + "\"\n", "", cert, ""},
		{"credentials", https, full, filepath.Join(full, "worker-cert"), ""},
		{"files win over credentials", https + "cert_file = \"" + cert + "\"\nkey_file = \"" + key + "\"\n", creds(map[string]string{"worker-cert": key, "worker-key": key}), cert, ""},
		{"empty credentials are absent", https, creds(map[string]string{"worker-cert": "", "worker-key": ""}), "", ""},
		{"one credential", https, creds(map[string]string{"worker-cert": cert}), "", `"worker-key" is not`},
		{"cert without key", https + "cert_file = \"" + cert + "\"\n", "", "", "orchestrator.cert_file and orchestrator.key_file must be set together"},
		{"mismatched pair", https + "cert_file = \"" + cert + "\"\nkey_file = \"" + otherKey + "\"\n", "", "", "not a usable PEM certificate and key"},
		{"plain http", "[orchestrator]\nurl = \"http://o.example:8001\"\ncert_file = \"" + cert + "\"\nkey_file = \"" + key + "\"\n", "", "", "must start with https://"},
	} {
		getenv := env()
		if c.creds != "" {
			getenv = env("CREDENTIALS_DIRECTORY", c.creds)
		}
		w, _, err := loadW(t, c.toml, getenv)
		switch {
		case c.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v; want one saying %q", c.name, err, c.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case w.Orchestrator.CertFile != c.wantCert:
			t.Errorf("%s: cert_file %q; want %q", c.name, w.Orchestrator.CertFile, c.wantCert)
		}
	}
}

// A worker's own labels are held to the orchestrator's limits when the
// configuration is loaded, not only when the orchestrator refuses them.
func TestWorkerLabelLimits(t *testing.T) {
	t.Parallel()
	_, _, err := loadW(t, "[worker.labels]\nrack = \""+strings.Repeat("r", 64)+"\"\n", env())
	if err == nil || !strings.Contains(err.Error(), "w.toml") || !strings.Contains(err.Error(), "worker.labels") || !strings.Contains(err.Error(), "at most 63") {
		t.Fatalf("error %v; want one naming the file, worker.labels and the limit", err)
	}
	if _, _, err := loadW(t, "[worker.labels]\nrack = \""+strings.Repeat("r", 63)+"\"\n", env()); err != nil {
		t.Fatal(err)
	}
}
