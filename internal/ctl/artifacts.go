package ctl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

func (a *app) artifactsCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "artifacts ID",
		Short:             "List the files a job produced (where the orchestrator serves them)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, err := a.resolveJob(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			raw, err := cl.GetJSON(ctx, artifactsPath(id), nil, nil)
			if err != nil {
				return a.explainArtifacts404(ctx, id, err)
			}
			if a.format == output.JSONFormat {
				return output.WriteJSON(a.out(), raw)
			}
			list, err := decodeArtifacts(raw)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				_, err := fmt.Fprintf(a.out(), "job %s has no artifacts\n", id)
				return err
			}
			return a.renderer().artifacts(a.out(), list)
		},
	}
}

func artifactsPath(id string) string { return "/api/queue/" + client.PathEscape(id) + "/artifacts" }

// artifactPath escapes each segment of a file path inside the job's artifacts.
func artifactPath(id, file string) string {
	segs := strings.Split(strings.Trim(file, "/"), "/")
	for i, s := range segs {
		segs[i] = client.PathEscape(s)
	}
	return artifactsPath(id) + "/" + strings.Join(segs, "/")
}

// explainArtifacts404 tells "no such job" from "this orchestrator has no
// artifacts endpoint": both answer 404, and only the job lookup tells them apart.
func (a *app) explainArtifacts404(ctx context.Context, id string, err error) error {
	var ae *client.APIError
	if !errors.As(err, &ae) || (ae.Status != http.StatusNotFound && ae.Status != http.StatusMethodNotAllowed) {
		return err
	}
	cl, cerr := a.client()
	if cerr != nil {
		return cerr
	}
	if _, jerr := cl.GetJSON(ctx, "/api/queue/"+client.PathEscape(id), nil, nil); jerr != nil {
		if client.IsStatus(jerr, http.StatusNotFound) {
			return jerr
		}
		return err
	}
	if ae.Status == http.StatusMethodNotAllowed || ae.Detail == "" || strings.HasPrefix(ae.Detail, "no such endpoint") {
		return notFoundf("this orchestrator does not serve artifacts (%d on GET %s)", ae.Status, ae.Path)
	}
	return err
}

func (a *app) downloadCommand() *cobra.Command {
	var (
		dest  string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "download ID PATH",
		Short: "Download one of a job's artifacts, resuming a partial download",
		Long: `Download one of a job's artifacts (see "simpletunerctl artifacts ID").
The file is written as DEST.part and renamed to DEST when complete; a broken
download is resumed with an HTTP Range request, in the same run or the next.
DEST.part must be a regular file of its own (a link is refused), and the
whole file is checked against the SHA-256 the orchestrator keeps with it.`,
		Example: `  simpletunerctl download j_abc123def456 checkpoints/final/model.safetensors
  simpletunerctl download j_abc123def456 output.txt -O - | head`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			file := args[1]
			if strings.Trim(file, "/") == "" || strings.HasSuffix(file, "/") {
				return usagef("PATH %q must name a file", file)
			}
			id, err := a.resolveJob(ctx, args[0])
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			if dest == "" {
				dest = path.Base(file)
			}
			d := &downloader{cl: cl, path: artifactPath(id, file), note: a.note}
			if dest == "-" {
				_, err := d.toWriter(ctx, a.out())
				if err != nil {
					return a.explainArtifacts404(ctx, id, err)
				}
				return nil
			}
			if _, err := os.Stat(dest); err == nil && !force {
				return fmt.Errorf("%s exists; use --force to replace it", dest)
			}
			res, err := d.toFile(ctx, dest)
			if err != nil {
				return a.explainArtifacts404(ctx, id, err)
			}
			if a.format == output.JSONFormat {
				return output.MarshalJSON(a.out(), map[string]any{"job_id": id, "path": file, "file": dest,
					"bytes": res.size, "resumed_from": res.resumedFrom})
			}
			msg := fmt.Sprintf("saved %s (%s)", dest, humanBytes(res.size))
			if res.resumedFrom > 0 {
				msg += fmt.Sprintf(", resumed at %s", humanBytes(res.resumedFrom))
			}
			_, err = fmt.Fprintln(a.out(), msg)
			return err
		},
	}
	cmd.Flags().StringVarP(&dest, "output-file", "O", "", "where to save it (default: the file name in the current directory; - for standard output)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing file")
	return cmd
}

// downloader fetches one file with Range requests, retrying a connection that
// breaks mid-body from where it stopped.
type downloader struct {
	cl   *client.Client
	path string
	note func(string, ...any)
	// retries bounds attempts after a broken connection (0: 5).
	retries int
	// restarted is set when the server sent the whole file in answer to a
	// range request, so that the bytes kept before were thrown away.
	restarted bool
	// sha256 is the file's SHA-256 (hex) the orchestrator sent; "" when it
	// has none (an object stored without its checksum record).
	sha256 string
}

// errChecksum is a download whose bytes do not match the artifact's SHA-256.
var errChecksum = errors.New("the downloaded file does not match the artifact's SHA-256")

type downloadResult struct {
	size        int64
	resumedFrom int64
}

// toWriter streams the file without resuming (standard output cannot seek),
// and fails when what it streamed does not match the artifact's SHA-256.
func (d *downloader) toWriter(ctx context.Context, w io.Writer) (int64, error) {
	res, err := d.cl.Open(ctx, client.Request{Method: http.MethodGet, Path: d.path})
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), res.Body)
	if err == nil && !checksumMatches(res.Header.Get(api.ArtifactSHA256Header), h) {
		err = fmt.Errorf("%w; what was written is not that file", errChecksum)
	}
	return n, err
}

func checksumMatches(want string, h hash.Hash) bool {
	return want == "" || strings.EqualFold(want, hex.EncodeToString(h.Sum(nil)))
}

// openPart opens (creating it) the partial download part for appending. It
// must be a regular file with no other name: a symbolic link, a FIFO or a
// hard link planted there (in a shared directory, say) would make the
// download write somewhere else.
func openPart(part string) (*os.File, error) {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	notRegular := fmt.Errorf("%s is not a regular file; refusing to write to it (remove it and run again)", part)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link; refusing to write through it (remove it and run again)", part)
	case errors.Is(err, syscall.ENXIO): // a FIFO nobody reads
		return nil, notRegular
	case err != nil:
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		err = notRegular
	case ok && st.Nlink > 1:
		err = fmt.Errorf("%s has other names (hard links); refusing to write to it (remove it and run again)", part)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// verify hashes the whole file at path against the artifact's SHA-256.
func (d *downloader) verify(path string) error {
	if d.sha256 == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if !checksumMatches(d.sha256, h) {
		return errChecksum
	}
	return nil
}

// toFile downloads into dest+".part", resuming what a previous run left
// there, and renames it to dest once complete and checked against the
// artifact's SHA-256 (a part that does not match is removed).
func (d *downloader) toFile(ctx context.Context, dest string) (downloadResult, error) {
	part := dest + ".part"
	f, err := openPart(part)
	if err != nil {
		return downloadResult{}, err
	}
	defer f.Close()
	have, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return downloadResult{}, err
	}
	result := downloadResult{resumedFrom: have}
	retries := d.retries
	if retries == 0 {
		retries = 5
	}
	var (
		validator string // ETag or Last-Modified of this run's first answer, for If-Range
		total     int64  = -1
	)
	for attempt := 0; ; attempt++ {
		done, err := d.fetch(ctx, f, &have, &validator, &total)
		if err == nil && done {
			break
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		var ae *client.APIError
		if errors.As(err, &ae) || ctx.Err() != nil || attempt >= retries {
			return result, err
		}
		d.note("download of %s broke at %s (%v); resuming", d.path, humanBytes(have), err)
		select {
		case <-ctx.Done():
			return result, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	if err := f.Sync(); err != nil {
		return result, err
	}
	if err := f.Close(); err != nil {
		return result, err
	}
	if err := d.verify(part); err != nil {
		if errors.Is(err, errChecksum) {
			_ = os.Remove(part)
			err = fmt.Errorf("%w (%s); the partial file was removed, run again to download it afresh", err, d.sha256)
		}
		return result, err
	}
	if err := os.Rename(part, dest); err != nil {
		return result, err
	}
	if dir, err := os.Open(filepath.Dir(dest)); err == nil {
		_ = dir.Sync()
		dir.Close()
	}
	result.size = have
	if d.restarted {
		result.resumedFrom = 0
	}
	return result, nil
}

// fetch makes one request for the bytes from *have on and appends them to f.
// It reports done when the file is complete.
func (d *downloader) fetch(ctx context.Context, f *os.File, have *int64, validator *string, total *int64) (bool, error) {
	req := client.Request{Method: http.MethodGet, Path: d.path, Header: http.Header{}}
	if *have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", *have))
		if *validator != "" {
			req.Header.Set("If-Range", *validator)
		}
	}
	res, err := d.cl.Send(ctx, req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	sum := res.Header.Get(api.ArtifactSHA256Header)
	switch res.StatusCode {
	case http.StatusOK:
		// Whole file: the server ignored the range, or it changed since the
		// part was written (If-Range failed). Start over.
		d.restarted = d.restarted || *have > 0
		d.sha256 = sum
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
		*have = 0
		*total = res.ContentLength
	case http.StatusPartialContent:
		start, _, size, err := parseContentRange(res.Header.Get("Content-Range"))
		if err != nil {
			return false, err
		}
		if start != *have {
			return false, fmt.Errorf("asked for bytes from %d, the server sent from %d", *have, start)
		}
		if *total >= 0 && size >= 0 && size != *total {
			return false, fmt.Errorf("the file changed size during the download (%d, now %d bytes)", *total, size)
		}
		if d.sha256 != "" && sum != d.sha256 {
			return false, fmt.Errorf("the file changed during the download (its SHA-256 is now %s)", sum)
		}
		*total, d.sha256 = size, sum
	case http.StatusRequestedRangeNotSatisfiable:
		// Nothing after *have: complete if the server's size agrees.
		_, _, size, err := parseContentRange(res.Header.Get("Content-Range"))
		if err == nil && size == *have {
			d.sha256 = sum
			return true, nil
		}
		return false, fmt.Errorf("%s is %d bytes, smaller than the %d already downloaded; remove the .part file", d.path, size, *have)
	default:
		return false, client.ErrorFrom(req, res)
	}
	if *validator == "" {
		if et := res.Header.Get("ETag"); et != "" && !strings.HasPrefix(et, "W/") {
			*validator = et
		} else if lm := res.Header.Get("Last-Modified"); lm != "" {
			*validator = lm
		}
	}
	n, err := io.Copy(f, res.Body)
	*have += n
	if err != nil {
		return false, err
	}
	if *total >= 0 && *have < *total {
		return false, nil
	}
	return true, nil
}

// parseContentRange reads "bytes START-END/SIZE" or "bytes */SIZE"; SIZE may
// be "*" (unknown, -1).
func parseContentRange(h string) (start, end, size int64, err error) {
	bad := fmt.Errorf("malformed Content-Range %q", h)
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, sz, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	size = -1
	if sz != "*" {
		if size, err = strconv.ParseInt(sz, 10, 64); err != nil || size < 0 {
			return 0, 0, 0, bad
		}
	}
	if rng == "*" {
		return -1, -1, size, nil
	}
	s, e, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	if start, err = strconv.ParseInt(s, 10, 64); err != nil || start < 0 {
		return 0, 0, 0, bad
	}
	if end, err = strconv.ParseInt(e, 10, 64); err != nil || end < start || (size >= 0 && end >= size) {
		return 0, 0, 0, bad
	}
	return start, end, size, nil
}
