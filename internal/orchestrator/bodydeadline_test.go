package orchestrator_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator"
)

// bodyServer serves h behind BodyDeadline with a short body timeout.
func bodyServer(t *testing.T, timeout time.Duration, h http.HandlerFunc) string {
	t.Helper()
	s := orchestrator.NewBare(orchestrator.Options{BodyTimeout: timeout})
	srv := httptest.NewServer(s.BodyDeadline(h))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// waitClosed reads from c until the server closes it, and says when.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit)) // only a bound on a failing test
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s", limit)
	}
	return time.Since(start)
}

// A body that stops coming (before or after the handler gave up on it) costs
// its connection after the body timeout; one that keeps coming at a useful
// rate goes on for many timeouts; once a body is in, a long answer is not cut.
func TestBodyDeadline(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	done := make(chan string, 4)
	addr := bodyServer(t, timeout, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refuse": // a refused credential: the body is never read
			w.WriteHeader(http.StatusUnauthorized)
			return
		case "/stream": // the body, then an answer longer than the timeout
			n, _ := io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
			for i := range 5 {
				fmt.Fprintf(w, "tick %d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(timeout / 2)
			}
			done <- fmt.Sprintf("stream after %d bytes", n)
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		done <- fmt.Sprintf("read %d bytes, err %v", n, err)
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
	})

	for _, path := range []string{"/read", "/refuse"} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"a\":", path)
		took := waitClosed(t, c, 20*time.Second)
		if took < timeout/2 {
			t.Errorf("%s: a stalled body was cut after %s, before the timeout", path, took)
		}
		t.Logf("%s: a stalled body cost its connection after %s", path, took.Round(time.Millisecond))
	}
	if got := <-done; !strings.Contains(got, "timeout") {
		t.Errorf("the handler reading a stalled body saw %q", got)
	}

	// 64 KiB every quarter timeout: slow, but progress, for twice the timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const chunks = 8
	fmt.Fprintf(c, "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", chunks*config.BodyProgressBytes)
	chunk := strings.Repeat("x", config.BodyProgressBytes)
	for range chunks {
		if _, err := io.WriteString(c, chunk); err != nil {
			t.Fatalf("a progressing body was cut: %v", err)
		}
		time.Sleep(timeout / 4) // the client's pace
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(body), "tick") != 5 {
		t.Errorf("the answer after the body was cut: %q %v", body, err)
	}
	if got := <-done; got != fmt.Sprintf("stream after %d bytes", chunks*config.BodyProgressBytes) {
		t.Errorf("%s", got)
	}
}
