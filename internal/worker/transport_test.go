package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/testpki"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// elsewhere is a server on another origin that records the worker tokens it
// is sent.
type elsewhere struct {
	srv    *httptest.Server
	mu     sync.Mutex
	tokens []string
	hits   int
}

func newElsewhere(t *testing.T) *elsewhere {
	e := &elsewhere{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.hits++
		if tok := r.Header.Get("X-Worker-Token"); tok != "" {
			e.tokens = append(e.tokens, tok)
		}
		e.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func redirector(to string, tlsOn bool) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	})
	if tlsOn {
		return httptest.NewTLSServer(h)
	}
	return httptest.NewServer(h)
}

// An orchestrator URL that redirects to another origin (another host or port,
// or from https to plain http) never gets the worker token sent there: the
// worker stops with a configuration error instead of retrying.
func TestWorkerTokenDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tlsOn bool
	}{{"another port", false}, {"https to http", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			thief := newElsewhere(t)
			front := redirector(thief.srv.URL, tc.tlsOn)
			t.Cleanup(front.Close)
			f := newFakeOrch(t) // only for its token and the test options
			r := startWorker(t, f, func(o *Options) {
				o.URL = front.URL
				o.InsecureSkipVerify = tc.tlsOn // the test server's own certificate
			})
			err := r.wait(t, 10*time.Second)
			if !errors.Is(err, ErrRedirected) {
				t.Fatalf("Serve returned %v; want ErrRedirected", err)
			}
			thief.mu.Lock()
			defer thief.mu.Unlock()
			if thief.hits != 0 || len(thief.tokens) != 0 {
				t.Fatalf("the redirect target got %d requests carrying %d tokens", thief.hits, len(thief.tokens))
			}
			if !strings.Contains(r.logs.String(), "Set [orchestrator] url to the address that answers itself") {
				t.Errorf("the log does not say what to fix:\n%s", r.logs.String())
			}
		})
	}
}

// A redirect within the orchestrator's own origin is followed, token and all.
func TestSameOriginRedirectIsFollowed(t *testing.T) {
	t.Parallel()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
			return
		}
		got = r.Header.Get("X-Worker-Token")
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(srv.Close)
	c, err := orchclient.New(srv.URL, "wt_secret", orchclient.TLS{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DoJSON(context.Background(), 5*time.Second, "probe", http.MethodPost, "/old", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	if got != "wt_secret" {
		t.Fatalf("token after a same-origin redirect: %q", got)
	}
}

// mtlsOrch is the fake orchestrator behind TLS that requires a client
// certificate from ca.
func mtlsOrch(t *testing.T, ca *testpki.CA) (*fakeOrch, string) {
	t.Helper()
	f := newFakeOrchUnstarted(t)
	srv := ca.Server(t)
	cert, err := tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	f.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	f.srv.StartTLS()
	t.Cleanup(f.close)
	return f, ca.Write(t, t.TempDir(), "ca")
}

// With an orchestrator that requires client certificates, the worker's own
// certificate works; none, or one from another CA, is a configuration error
// that says so, not an endless retry.
func TestClientCertificates(t *testing.T) {
	t.Parallel()
	ca, other := testpki.NewCA(t, "fleet"), testpki.NewCA(t, "stranger")
	dir := t.TempDir()
	goodCert, goodKey := ca.Client(t, "gpu-1").Write(t, dir, "good")
	badCert, badKey := other.Client(t, "gpu-1").Write(t, dir, "bad")
	for _, tc := range []struct {
		name       string
		cert, key  string
		wantLog    string
		wantServed bool
	}{
		{"valid", goodCert, goodKey, "", true},
		{"none", "", "", "none is configured", false},
		{"another CA", badCert, badKey, "refused this worker's client certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, caFile := mtlsOrch(t, ca)
			r := startWorker(t, f, func(o *Options) {
				o.URL, o.CAFile, o.CertFile, o.KeyFile = f.url(), caFile, tc.cert, tc.key
			})
			if tc.wantServed {
				f.connected(1)
				return
			}
			err := r.wait(t, 10*time.Second)
			if !errors.Is(err, ErrClientCertificate) || !strings.Contains(err.Error(), tc.wantLog) {
				t.Fatalf("Serve returned %v; want ErrClientCertificate saying %q", err, tc.wantLog)
			}
			if !strings.Contains(r.logs.String(), "configuration error; not retrying") {
				t.Errorf("no clear log line:\n%s", r.logs.String())
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.registers) != 0 {
				t.Fatalf("a registration got through")
			}
		})
	}
}

// insecure_skip_verify is announced at every start.
func TestInsecureSkipVerifyWarns(t *testing.T) {
	t.Parallel()
	f := newFakeOrch(t)
	r := startWorker(t, f, func(o *Options) { o.InsecureSkipVerify = true })
	if !strings.Contains(r.logs.String(), "TLS verification of the orchestrator is off") {
		t.Fatalf("no warning:\n%s", r.logs.String())
	}
}

// A registration the orchestrator finds invalid (labels over its limits) is
// not sent again and again: the worker stops with the orchestrator's reason.
func TestRefusedRegistrationIsNotRetried(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	registers := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		registers++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte(`{"detail":"field \"labels\": the value of \"rack\" is 300 bytes long; at most 63","error":"invalid_request"}`))
	}))
	t.Cleanup(srv.Close)
	f := newFakeOrch(t)
	r := startWorker(t, f, func(o *Options) { o.URL = srv.URL })
	err := r.wait(t, 10*time.Second)
	if !errors.Is(err, ErrRegistrationRefused) || !strings.Contains(err.Error(), `the value of "rack"`) {
		t.Fatalf("Serve returned %v; want ErrRegistrationRefused with the orchestrator's reason", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if registers != 1 {
		t.Fatalf("%d registrations sent; want 1", registers)
	}
}

// A URL whose scheme does not match the listener (https:// to plain HTTP;
// http:// to a TLS port of nginx, which answers 400) is a configuration
// error said once, not a retry loop with a warning each time.
func TestWrongSchemeIsNotRetried(t *testing.T) {
	t.Parallel()
	t.Run("https to plain HTTP", func(t *testing.T) {
		t.Parallel()
		f := newFakeOrch(t)
		r := startWorker(t, f, func(o *Options) { o.URL = strings.Replace(f.url(), "http://", "https://", 1) })
		wantWrongScheme(t, r, "answers plain HTTP, not HTTPS; use http://")
	})
	t.Run("http to nginx's TLS port", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte("<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n</html>\r\n"))
		}))
		t.Cleanup(srv.Close)
		f := newFakeOrch(t)
		r := startWorker(t, f, func(o *Options) { o.URL = srv.URL })
		wantWrongScheme(t, r, "is served over TLS; use https://")
	})
}

func wantWrongScheme(t *testing.T, r *running, want string) {
	t.Helper()
	err := r.wait(t, 10*time.Second)
	if !errors.Is(err, ErrWrongScheme) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Serve returned %v; want ErrWrongScheme saying %q", err, want)
	}
	if n := strings.Count(r.logs.String(), "; retrying"); n != 0 {
		t.Errorf("the worker retried %d times:\n%s", n, r.logs.String())
	}
}
