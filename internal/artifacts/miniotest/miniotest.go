// Package miniotest starts a throwaway MinIO server for tests of the S3
// backend. It never downloads anything: the minio binary must already be
// installed (make minio builds it from the Go module proxy); without it the
// calling test is skipped with a message saying how to get it.
package miniotest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/simpletuner/simpletuner-orchestration/internal/testutil"
)

// Credentials of every test server.
const (
	AccessKey = "simpletuner-test"
	SecretKey = "simpletuner-test-secret"
)

// Binary finds the minio server: $SIMPLETUNER_TEST_MINIO, then PATH, then
// $(go env GOPATH)/bin. "" when there is none.
func Binary() string {
	if p := os.Getenv("SIMPLETUNER_TEST_MINIO"); p != "" {
		return p
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		home, _ := os.UserHomeDir()
		gopath = filepath.Join(home, "go")
	}
	if p := filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", "minio"); isExecutable(p) {
		return p
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Server is a running MinIO.
type Server struct {
	Endpoint string // http://127.0.0.1:port
	client   *minio.Client
	cmd      *exec.Cmd
	dir      string
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
)

// Start returns the package's MinIO server, starting it on first use (one
// server per test binary, stopped when the process exits), or skips t when
// the binary is absent.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no minio server binary: run `make minio` (builds it from the Go module proxy into $GOPATH/bin) " +
			"or set SIMPLETUNER_TEST_MINIO; the S3 backend is then tested against a real MinIO")
	}
	sharedOnce.Do(func() { shared, sharedErr = start(bin) })
	if sharedErr != nil {
		t.Fatalf("starting minio (%s): %v", bin, sharedErr)
	}
	return shared
}

func start(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "minio-test-")
	if err != nil {
		return nil, err
	}
	port, err := testutil.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", "127.0.0.1:0", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+AccessKey, "MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME="+dir)
	logf, err := os.Create(filepath.Join(dir, "minio.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// The server dies with the test binary: nothing to clean up by hand.
	cmd.SysProcAttr = deathSignal()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + addr, cmd: cmd, dir: dir}
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(s.Endpoint + "/minio/health/ready")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("not ready after 60s: %s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.client, err = minio.New(addr, &minio.Options{Creds: credentials.NewStaticV4(AccessKey, SecretKey, "")})
	return s, err
}

// Stop ends the shared server, if one was started, and removes its data.
// Call it from TestMain after m.Run.
func Stop() {
	if shared == nil {
		return
	}
	_ = shared.cmd.Process.Kill()
	_ = shared.cmd.Wait()
	_ = os.RemoveAll(shared.dir)
}

var bucketSeq struct {
	sync.Mutex
	n int
}

// Bucket makes a fresh, empty bucket and returns its name.
func (s *Server) Bucket(t testing.TB) string {
	t.Helper()
	bucketSeq.Lock()
	bucketSeq.n++
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), bucketSeq.n)
	bucketSeq.Unlock()
	if err := s.client.MakeBucket(context.Background(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
	return name
}

// IncompleteUploads counts multipart uploads begun and neither completed nor
// aborted in a bucket: what a cut upload must not leave behind.
func (s *Server) IncompleteUploads(t testing.TB, bucket string) int {
	t.Helper()
	n := 0
	for u := range s.client.ListIncompleteUploads(context.Background(), bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("list incomplete uploads: %v", u.Err)
		}
		n++
	}
	return n
}
