package keeper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// client speaks to the orchestrator for one attempt: workerd's protocol
// client, authenticating with the attempt's upload token.
type client struct {
	api     *orchclient.Client // a view with the attempt's upload token
	storage string             // the upload endpoint
	ckpts   string             // the checkpoints endpoint
	timeout time.Duration      // a request without a body to stream
	stall   time.Duration      // a transfer that moved no byte this long is given up
}

func statusOf(err error) int { return orchclient.StatusOf(err) }

// over reports an answer that ends every upload of the attempt: the
// orchestrator replaced it (409 stale_attempt) or its token expired (401).
func over(err error) bool {
	return statusOf(err) == http.StatusUnauthorized || orchclient.CodeOf(err) == protocol.CodeStaleAttempt
}

// transient reports an error worth trying again: no answer, or one that
// says so (5xx but a full disk, 408, 429).
func transient(err error) bool {
	var nk *notKept
	switch s := statusOf(err); {
	case err == nil, errors.As(err, &nk):
		return false
	case s == 0:
		return !errors.Is(err, context.Canceled)
	case s == http.StatusInsufficientStorage:
		return false
	default:
		return s >= 500 || s == http.StatusRequestTimeout || s == http.StatusTooManyRequests
	}
}

// call is one JSON request of the attempt; an answer other than want is an
// *orchclient.Error.
func (c *client) call(ctx context.Context, op, method, endpoint string, in, out any, want int) error {
	return c.api.Call(ctx, orchclient.Call{Op: op, Method: method, Path: endpoint, In: in, Out: out, Timeout: c.timeout, Want: want})
}

func (c *client) list(ctx context.Context) (protocol.CheckpointList, error) {
	var l protocol.CheckpointList
	err := c.call(ctx, "list checkpoints", http.MethodGet, c.ckpts, nil, &l, http.StatusOK)
	return l, err
}

func (c *client) commit(ctx context.Context, cm protocol.CheckpointCommit) error {
	return c.call(ctx, "commit "+cm.Name, http.MethodPost, c.ckpts, cm, nil, http.StatusCreated)
}

func (c *client) abort(ctx context.Context, name string) error {
	return c.call(ctx, "abort "+name, http.MethodDelete, c.ckpts+"/"+url.PathEscape(name), nil, nil, http.StatusNoContent)
}

// escapeKey escapes each segment of a slash-separated key for a URL path.
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// stallGuard cancels a transfer that moved no byte for limit: a peer that
// stopped reading or sending is not waited on for ever.
type stallGuard struct {
	last   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

func guard(ctx context.Context, limit time.Duration) (context.Context, *stallGuard) {
	ctx, cancel := context.WithCancel(ctx)
	g := &stallGuard{last: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		t := time.NewTimer(limit)
		defer t.Stop()
		for {
			select {
			case <-g.done:
				return
			case <-ctx.Done():
				return
			case <-g.last:
				t.Reset(limit)
			case <-t.C:
				cancel()
				return
			}
		}
	}()
	return ctx, g
}

func (g *stallGuard) touch() {
	select {
	case g.last <- struct{}{}:
	default:
	}
}

func (g *stallGuard) stop() { close(g.done); g.cancel() }

// progressReader touches the guard with every read.
type progressReader struct {
	r io.Reader
	g *stallGuard
}

func (p progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.g.touch()
	}
	return n, err
}

// put uploads size bytes of body to bucket/key, hashing them; the answer
// must confirm the size and SHA-256 the worker computed.
func (c *client) put(ctx context.Context, bucket, key string, body io.Reader, size int64, rate *Limiter) (sum string, err error) {
	ctx, g := guard(ctx, c.stall)
	defer g.stop()
	h := sha256.New()
	rd := io.TeeReader(rate.Reader(ctx, progressReader{r: body, g: g}), h)
	req, err := c.api.Request(ctx, http.MethodPut, c.storage+"/"+bucket+"/"+escapeKey(key), rd)
	if err != nil {
		return "", err
	}
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	op := "upload " + bucket + "/" + key
	res, err := c.api.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, err)
	}
	if err := c.api.Check(res, op, http.StatusOK); err != nil {
		return "", err
	}
	defer res.Body.Close()
	var ans struct {
		Size   int64  `json:"Size"`
		SHA256 string `json:"SHA256"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&ans); err != nil {
		return "", fmt.Errorf("%s: decoding the answer: %w", op, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	if ans.Size != size || ans.SHA256 != sum {
		return "", fmt.Errorf("%s: the orchestrator stored %d bytes with SHA-256 %s; %d bytes with %s were sent",
			op, ans.Size, ans.SHA256, size, sum)
	}
	return sum, nil
}

// get downloads one file of a complete checkpoint into w and returns its
// size and SHA-256.
func (c *client) get(ctx context.Context, cp protocol.Checkpoint, path string, w io.Writer) (int64, string, error) {
	ctx, g := guard(ctx, c.stall)
	defer g.stop()
	endpoint := c.ckpts + "/" + strconv.Itoa(cp.Attempt) + "/" + url.PathEscape(cp.Name) + "/" + escapeKey(path)
	req, err := c.api.Request(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return 0, "", err
	}
	op := "download " + cp.Name + "/" + path
	res, err := c.api.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", op, err)
	}
	if err := c.api.Check(res, op, http.StatusOK); err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	h := sha256.New()
	buf := make([]byte, chunk)
	n, err := io.CopyBuffer(io.MultiWriter(w, h), progressReader{r: res.Body, g: g}, buf)
	if err != nil {
		return n, "", fmt.Errorf("%s: %w", op, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
