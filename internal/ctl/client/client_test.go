package client

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in, base, socket, err string
	}{
		{in: "http://localhost:8001", base: "http://localhost:8001"},
		{in: "https://orch.example.com:8443/", base: "https://orch.example.com:8443"},
		{in: " http://[::1]:8001 ", base: "http://[::1]:8001"},
		{in: "unix:///run/simpletuner/orchestratord.sock", base: "http://unix", socket: "/run/simpletuner/orchestratord.sock"},
		{in: "/tmp/o.sock", base: "http://unix", socket: "/tmp/o.sock"},
		{in: "", err: "empty"},
		{in: "ftp://x", err: "scheme must be http, https or unix"},
		{in: "localhost:8001", err: "scheme must be"},
		{in: "http://", err: "has no host"},
		{in: "http://h:1/api", err: "without a path"},
		{in: "http://user:secret@h:1", err: "put credentials in --token-file"},
		{in: "unix://relative.sock", err: "unix:///absolute/path.sock"},
	} {
		base, socket, err := ParseEndpoint(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: the error repeats the password: %v", tc.in, err)
			}
			continue
		}
		if err != nil || base.String() != tc.base || socket != tc.socket {
			t.Errorf("%q: %v %q %v, want %s %q", tc.in, base, socket, err, tc.base, tc.socket)
		}
	}
}

// recorder is a real HTTP server that answers every request with a fixed
// status and body and remembers the request's Authorization header.
type recorder struct {
	status int
	body   string
	ctype  string
	auth   chan string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	select {
	case r.auth <- req.Header.Get("Authorization"):
	default:
	}
	if r.ctype != "" {
		w.Header().Set("Content-Type", r.ctype)
	}
	w.WriteHeader(r.status)
	io.WriteString(w, r.body)
}

func newRecorder(status int, body string) *recorder {
	return &recorder{status: status, body: body, ctype: "application/json", auth: make(chan string, 1)}
}

func TestAPIErrors(t *testing.T) {
	for _, tc := range []struct {
		status       int
		body, ctype  string
		code, detail string
	}{
		{404, `{"detail": "Job not found: j_x", "error": "not_found"}`, "", "not_found", "Job not found: j_x"},
		{422, `{"detail": [{"loc": ["body", "name"], "msg": "field required"}]}`, "", "", `[{"loc":["body","name"],"msg":"field required"}]`},
		{409, `{"detail": "line one\nline two", "error": "conflict"}`, "", "conflict", "line one line two"},
		{502, `<html>Bad Gateway</html>`, "text/html", "", "GET /api/queue: HTTP 502 Bad Gateway"},
		{401, ``, "", "", "GET /api/queue: HTTP 401 Unauthorized"},
	} {
		rec := newRecorder(tc.status, tc.body)
		if tc.ctype != "" {
			rec.ctype = tc.ctype
		}
		srv := httptest.NewServer(rec)
		c, err := New(Options{URL: srv.URL, Token: "sta_t"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetJSON(context.Background(), "/api/queue", nil, nil)
		srv.Close()
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Fatalf("%d: %v is not an APIError", tc.status, err)
		}
		if ae.Status != tc.status || ae.Code != tc.code || ae.Error() != tc.detail {
			t.Errorf("%d %s: got %d %q %q, want %q %q", tc.status, tc.body, ae.Status, ae.Code, ae.Error(), tc.code, tc.detail)
		}
	}
}

func TestConnErrorNamesTheEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c, _ := New(Options{URL: "http://" + addr, Token: "sta_secret"})
	_, err = c.GetJSON(context.Background(), "/healthz", nil, nil)
	var ce *ConnError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot reach the orchestrator at http://"+addr) {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), "sta_secret") || strings.Contains(err.Error(), "/healthz") {
		t.Errorf("message leaks the token or the request: %v", err)
	}
}

// TestTokenOnlyOverTCP: the bearer token goes over TCP; over the unix socket,
// where the peer's uid is the credential, it is not sent at all.
func TestTokenOnlyOverTCP(t *testing.T) {
	rec := newRecorder(200, `{}`)
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c, _ := New(Options{URL: srv.URL, Token: "sta_tok"})
	if _, err := c.GetJSON(context.Background(), "/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.auth; got != "Bearer sta_tok" {
		t.Fatalf("over TCP Authorization is %q", got)
	}

	sock := filepath.Join(t.TempDir(), "o.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rec}
	go hs.Serve(l)
	defer hs.Close()
	c, _ = New(Options{URL: "unix://" + sock, Token: "sta_tok"})
	if _, err := c.GetJSON(context.Background(), "/x", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := <-rec.auth; got != "" {
		t.Fatalf("over the socket Authorization is %q", got)
	}
	if !c.OverSocket() || c.Endpoint() != "unix://"+sock || !SocketUsable(sock) {
		t.Errorf("socket client: over %v endpoint %q usable %v", c.OverSocket(), c.Endpoint(), SocketUsable(sock))
	}
	if SocketUsable(filepath.Join(t.TempDir(), "none.sock")) {
		t.Error("a missing socket is usable")
	}
	plain := filepath.Join(t.TempDir(), "file")
	os.WriteFile(plain, nil, 0o600)
	if SocketUsable(plain) {
		t.Error("a plain file is a usable socket")
	}
}

func TestOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		o   Options
		err string
	}{
		{Options{URL: "http://h:1", CertFile: "c.pem"}, "both --cert-file and --key-file"},
		{Options{URL: "http://h:1", CAFile: "ca.pem"}, "need an https:// URL"},
		{Options{URL: "unix:///s.sock", CAFile: "ca.pem"}, "do not apply to the unix socket"},
		{Options{URL: "https://h:1", CAFile: "/nonexistent/ca.pem"}, "CA file"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.err)
		}
	}
}

// TestMutualTLS talks to a real TLS server that requires a client
// certificate signed by its CA.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	serverCert := issue(t, ca, caKey, "127.0.0.1", x509.ExtKeyUsageServerAuth)
	clientCert := issue(t, ca, caKey, "admin", x509.ExtKeyUsageClientAuth)
	writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", clientCert.Certificate[0])
	keyDER, _ := x509.MarshalECPrivateKey(clientCert.PrivateKey.(*ecdsa.PrivateKey))
	writePEM(t, filepath.Join(dir, "client.key"), "EC PRIVATE KEY", keyDER)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"cn": "`+r.TLS.PeerCertificates[0].Subject.CommonName+`"}`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes below are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	c, err := New(Options{URL: srv.URL, CAFile: filepath.Join(dir, "ca.pem"),
		CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")})
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ CN string }
	if _, err := c.GetJSON(context.Background(), "/", nil, &got); err != nil || got.CN != "admin" {
		t.Fatalf("mTLS request: %v %+v", err, got)
	}
	// Without the client certificate the server refuses the handshake.
	c, _ = New(Options{URL: srv.URL, CAFile: filepath.Join(dir, "ca.pem")})
	if _, err := c.GetJSON(context.Background(), "/", nil, nil); err == nil {
		t.Fatal("a client without a certificate got through")
	}
	// Without our CA the server's certificate is not trusted.
	c, _ = New(Options{URL: srv.URL})
	if _, err := c.GetJSON(context.Background(), "/", nil, nil); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted server: %v", err)
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
