package e2e

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
	. "github.com/simpletuner/simpletuner-orchestration/test/e2e/e2etest"
)

// An orchestrator that requires client certificates (tls.client_ca_file,
// private CA made here): a workerd with a certificate from that CA registers
// and runs a job; one without a certificate, and one whose certificate comes
// from another CA, are refused, say why once, and exit with status 1 instead
// of retrying.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, stranger := testpki.NewCA(t, "fleet"), testpki.NewCA(t, "stranger")
	caFile := ca.Write(t, dir, "fleet-ca")
	srvCert, srvKey := ca.Server(t).Write(t, dir, "orchestrator")
	h := ca.Client(t, "harness")
	harness, err := tls.X509KeyPair(h.CertPEM, h.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	o := StartOrchestratorWith(t, OrchOptions{TLS: &TLSOptions{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: caFile,
		RootCAs: ca.Pool(), HarnessCert: &harness}})

	tomlFor := func(cert, key string) string {
		s := fmt.Sprintf("ca_file = %q\n", caFile)
		if cert != "" {
			s += fmt.Sprintf("cert_file = %q\nkey_file = %q\n", cert, key)
		}
		return s
	}
	goodCert, goodKey := ca.Client(t, "gpu-good").Write(t, dir, "gpu-good")
	o.StartWorker(WorkerSpec{Name: "good", Persistent: true, OrchestratorTOML: tomlFor(goodCert, goodKey)})
	id := o.Submit(slowJob(0.1), nil)
	o.WaitJob(id, "completed", 30*time.Second)

	strangerCert, strangerKey := stranger.Client(t, "gpu-stranger").Write(t, dir, "gpu-stranger")
	for _, c := range []struct {
		name, toml, want string
	}{
		{"no-cert", tomlFor("", ""), "requires a client certificate"},
		{"stranger", tomlFor(strangerCert, strangerKey), "refused this worker's client certificate"},
	} {
		w := o.StartWorker(WorkerSpec{Name: c.name, Persistent: true, NoWait: true, OrchestratorTOML: c.toml})
		code, exited := w.P.Exited(20 * time.Second)
		if !exited || code != 1 {
			t.Fatalf("%s: exited %v with %d; want exit status 1", c.name, exited, code)
		}
		out := w.P.Output()
		if !strings.Contains(out, c.want) || strings.Count(out, "configuration error; not retrying") != 1 {
			t.Fatalf("%s: want one clear line saying %q:\n%s", c.name, c.want, out)
		}
		if st := o.Worker(w.ID)["status"]; st != "connecting" {
			t.Fatalf("%s: the refused worker is %v; it never registered, so it should still be connecting", c.name, st)
		}
	}
}
