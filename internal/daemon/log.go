package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// NewLogger builds the daemon's logger. format is auto, text or json; auto means text
// when stderr is connected to the journal (JOURNAL_STREAM names stderr's device and
// inode) and JSON otherwise. Under the journal, time is dropped (journald stamps each
// line) and each line starts with a syslog "<N>" prefix so journalctl -p works.
// The returned LevelVar changes the level live (a configuration reload).
func NewLogger(c config.LogConfig, stderr *os.File) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(c.SlogLevel())
	return newLogger(level, c.Format, stderr), level
}

func newLogger(level *slog.LevelVar, format string, stderr *os.File) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	journal := journalStream(stderr)
	switch strings.ToLower(format) {
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts))
	case "text":
		if !journal {
			return slog.New(slog.NewTextHandler(stderr, opts))
		}
	default: // auto
		if !journal {
			return slog.New(slog.NewJSONHandler(stderr, opts))
		}
	}
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	w := &prefixWriter{w: stderr}
	return slog.New(&journalHandler{h: slog.NewTextHandler(w, opts), mu: &sync.Mutex{}, w: w})
}

// journalStream reports whether f is the stream systemd connected to the journal.
func journalStream(f *os.File) bool {
	want := os.Getenv("JOURNAL_STREAM")
	if want == "" || f == nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return want == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// journalHandler prefixes each record with its syslog priority, which journald strips
// and stores as PRIORITY=. The text handler writes each record in one Write call, so the
// prefix is set under a lock shared by all derived handlers.
type journalHandler struct {
	h  slog.Handler
	mu *sync.Mutex
	w  *prefixWriter
}

func (j *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return j.h.Enabled(ctx, l)
}

func (j *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.w.prefix = syslogPrefix(r.Level)
	return j.h.Handle(ctx, r)
}

func (j *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{h: j.h.WithAttrs(as), mu: j.mu, w: j.w}
}

func (j *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{h: j.h.WithGroup(name), mu: j.mu, w: j.w}
}

type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}

func syslogPrefix(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "<3>"
	case l >= slog.LevelWarn:
		return "<4>"
	case l >= slog.LevelInfo:
		return "<6>"
	default:
		return "<7>"
	}
}
