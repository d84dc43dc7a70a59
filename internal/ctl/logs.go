package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/client"
	"github.com/simpletuner/simpletuner-orchestration/internal/ctl/output"
)

func (a *app) logsCommand() *cobra.Command {
	var (
		follow bool
		giveUp time.Duration
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a job's log; -f follows it until the job ends",
		Long: `Print a job's log. With -f, follow it as the worker ships it and exit when
the job ends. When the connection breaks (an orchestrator restart), -f
reconnects and carries on where it was, without repeating or skipping a line.
With -o json, each line is a JSON object {"job_id","line"}, and -f ends with
the orchestrator's end event {"job_id","status"}.`,
		Example:           `  simpletunerctl logs j_abc123def456 -f`,
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
			if !follow {
				res, err := cl.Open(ctx, client.Request{Method: http.MethodGet, Path: "/api/queue/" + client.PathEscape(id) + "/logs"})
				if err != nil {
					return err
				}
				defer res.Body.Close()
				if a.format != output.JSONFormat {
					_, err = io.Copy(a.out(), res.Body)
					return err
				}
				// JSON lines, one per log line, as logs -f -o json prints them.
				f := &logFollower{jobID: id, jsonLines: true}
				w := bufio.NewWriter(a.out())
				sc := bufio.NewScanner(res.Body)
				sc.Buffer(make([]byte, 64<<10), client.MaxEventLine)
				for sc.Scan() {
					f.writeLine(w, strings.TrimSuffix(sc.Text(), "\r"))
				}
				if err := sc.Err(); err != nil {
					return err
				}
				return w.Flush()
			}
			f := &logFollower{cl: cl, jobID: id, out: a.out(), note: a.note, giveUp: giveUp, jsonLines: a.format == output.JSONFormat}
			status, err := f.run(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted: not a failure of the command
				}
				return err
			}
			a.note("-- job %s %s", id, status)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the job ends")
	cmd.Flags().DurationVar(&giveUp, "reconnect-for", 5*time.Minute, "with -f, how long to keep trying to reconnect before giving up")
	return cmd
}

// logFollower prints a job's log from the follow stream and resumes after a
// broken connection.
//
// The stream replays the log from its start on every connection; each log
// line is one data line, and stored chunks never change, so the count of
// lines already printed tells where to carry on. Should the orchestrator tag
// events with ids, they are used instead: an event whose id was printed is
// skipped, and the last id is sent as Last-Event-ID, so that a server that
// resumes and one that replays both work.
type logFollower struct {
	cl     *client.Client
	jobID  string
	out    io.Writer
	note   func(string, ...any)
	giveUp time.Duration

	// jsonLines prints each line as {"job_id","line"} (-o json).
	jsonLines bool

	lines   int64           // log lines printed (resume by count)
	seenIDs map[string]bool // ids of events printed (resume by id)
	lastID  string
}

// errNotStream means the orchestrator answered with something else than an
// event stream; retrying would not change that.
var errNotStream = errors.New("the orchestrator did not answer with an event stream")

func (f *logFollower) run(ctx context.Context) (string, error) {
	const minDelay, maxDelay = 200 * time.Millisecond, 3 * time.Second
	delay := minDelay
	var outageSince time.Time
	for {
		status, connected, err := f.once(ctx)
		if err == nil {
			return status, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if !retryableStreamErr(err) {
			return "", err
		}
		if connected {
			// It was up for a while: this is a new outage.
			outageSince, delay = time.Time{}, minDelay
		}
		if outageSince.IsZero() {
			outageSince = time.Now()
			f.note("-- lost the log stream of %s (%v); reconnecting", f.jobID, err)
		} else if f.giveUp > 0 && time.Since(outageSince) > f.giveUp {
			return "", fmt.Errorf("gave up reconnecting after %s: %w", f.giveUp, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// retryableStreamErr: a refusal (4xx: no such job, no permission) ends -f;
// a broken or refused connection, a stream cut short or a 5xx is waited out.
func retryableStreamErr(err error) bool {
	var (
		ae *client.APIError
		oe *outputError
	)
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return !errors.Is(err, errNotStream) && !errors.As(err, &oe)
}

// once reads one connection's worth of the stream. It returns the job's
// final status and a nil error at the end event; connected tells whether the
// orchestrator answered at all, so that run can tell an outage from a cut.
func (f *logFollower) once(ctx context.Context) (status string, connected bool, err error) {
	hdr := http.Header{}
	hdr.Set("Accept", "text/event-stream")
	if f.lastID != "" {
		hdr.Set("Last-Event-ID", f.lastID)
	}
	res, err := f.cl.Open(ctx, client.Request{Method: http.MethodGet, Path: "/api/queue/" + client.PathEscape(f.jobID) + "/logs",
		Query: url.Values{"follow": {"1"}}, Header: hdr})
	if err != nil {
		return "", false, err
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return "", true, fmt.Errorf("%w (Content-Type %q)", errNotStream, ct)
	}
	w := bufio.NewWriterSize(f.out, 64<<10)
	rd := client.NewEventReader(res.Body)
	var pos int64 // log lines seen on this connection
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended before the job did")
			}
			return "", true, err
		}
		switch ev.Name {
		case "log":
			if ev.HasID {
				if f.seenIDs[ev.ID] {
					continue
				}
				if f.seenIDs == nil {
					f.seenIDs = map[string]bool{}
				}
				f.seenIDs[ev.ID], f.lastID = true, ev.ID
				for _, line := range ev.Data {
					f.writeLine(w, line)
				}
				f.lines += int64(len(ev.Data))
			} else {
				for _, line := range ev.Data {
					pos++
					if pos <= f.lines {
						continue // printed before the reconnect
					}
					f.writeLine(w, line)
					f.lines = pos
				}
			}
			if err := w.Flush(); err != nil {
				return "", true, &outputError{err}
			}
		case "end":
			data := strings.Join(ev.Data, "\n")
			var end struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal([]byte(data), &end)
			if f.jsonLines && json.Valid([]byte(data)) {
				// The end event's own JSON closes a JSON-lines log.
				w.WriteString(compactRaw(json.RawMessage(data)))
				w.WriteByte('\n')
			}
			if err := w.Flush(); err != nil {
				return "", true, &outputError{err}
			}
			return first(end.Status, "ended"), true, nil
		}
		// Other events (a newer orchestrator's) are not for us.
	}
}

func (f *logFollower) writeLine(w *bufio.Writer, line string) {
	if f.jsonLines {
		b, _ := json.Marshal(struct {
			JobID string `json:"job_id"`
			Line  string `json:"line"`
		}{f.jobID, line})
		w.Write(b)
	} else {
		w.WriteString(line)
	}
	w.WriteByte('\n')
}

// outputError is a failed write to our own stdout (a closed pipe): retrying
// cannot help.
type outputError struct{ err error }

func (e *outputError) Error() string { return "writing the log: " + e.err.Error() }
