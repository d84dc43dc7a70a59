package worker

import (
	"context"
	"errors"
	"time"

	"github.com/simpletuner/simpletuner-orchestration/internal/config"
)

// tokenCheck asks the loop to re-read the token's source now (a reload).
type tokenCheck struct{}

// CheckToken re-reads the worker token from its source (Options.TokenSource)
// and uses it from now on if it changed. It does not block.
func (w *Worker) CheckToken() {
	select {
	case w.msgs <- tokenCheck{}:
	default: // the loop is busy or gone; a 401 makes it look anyway
	}
}

// onTokenRefused handles a 401. A token rotated by an admin while workerd
// runs is not the end: the new one is read from the token's source (the
// token file, the systemd credential or the configuration file) at once and
// then every Timers.TokenPoll, for as long as the running jobs may go on
// without an acknowledged heartbeat (the self-fence limit). The jobs keep
// running meanwhile; the first new token found is used and the worker
// registers again with its jobs. Only when no new token comes in time, or
// the token cannot change (no source, or refused before this process ever
// registered), does the worker stop as before (ErrAuthRejected). conn says
// whether err ended the connection (a registration or the stream), which must
// then be made again once a newer token is in force.
func (w *Worker) onTokenRefused(ctx context.Context, s *session, err error, conn bool) (bool, error) {
	if !w.c.Token().Refuse(refusedToken(err)) {
		// Sent with a token replaced since: the new one gets its own answer.
		if conn && s.tokenC == nil {
			w.reconnect(s, err)
		}
		return false, nil
	}
	if w.opt.TokenSource == nil || !w.link.hasRegistered() {
		return true, w.authFailed(err)
	}
	w.link.refused()
	if s.tokenC != nil {
		return w.pollToken(ctx, s)
	}
	wait := w.link.fenceLimit()
	if wait <= 0 {
		wait = config.DefaultWorker().Worker.SelfFenceAfter.Duration
	}
	s.tokenDeadline = time.Now().Add(wait)
	// At least ten looks within the wait, however short it is.
	s.tokenTick = time.NewTicker(max(min(w.opt.Timers.TokenPoll, wait/10), 10*time.Millisecond))
	s.tokenC = s.tokenTick.C
	refused := w.c.Token().Get()
	done, derr := w.pollToken(ctx, s)
	if s.tokenC != nil {
		w.log.Warn("the orchestrator refused the worker token (rotated or revoked); waiting for a new one; running jobs go on",
			"token", tokenHint(refused), "source", s.tokenWhere, "wait", wait.String(), "err", err)
	} else {
		w.log.Info("the orchestrator refused the previous worker token", "token", tokenHint(refused), "err", err)
	}
	return done, derr
}

// pollToken re-reads the token's source and installs a token that changed;
// while waiting for one (after a 401) it registers again with it, or gives
// up once the wait is over.
func (w *Worker) pollToken(ctx context.Context, s *session) (bool, error) {
	if w.opt.TokenSource == nil {
		return false, nil
	}
	tok, where, err := w.opt.TokenSource()
	if where != "" {
		s.tokenWhere = where
	}
	switch {
	case err != nil:
		if msg := err.Error(); msg != s.tokenErr {
			s.tokenErr = msg
			w.log.Warn("cannot read the worker token's source", "err", err)
		}
	case tok != "" && w.c.Token().Set(tok):
		s.tokenErr = ""
		w.log.Info("using the new worker token", "token", tokenHint(tok), "from", where)
		if s.tokenC != nil {
			s.stopTokenWait()
			s.retry.reset()
			s.retryC = nil
			w.dial(ctx, s)
		}
		return false, nil
	}
	if s.tokenC != nil && time.Now().After(s.tokenDeadline) {
		return true, w.authFailed(errors.New("no new worker token appeared in its source in time"))
	}
	return false, nil
}

func (s *session) stopTokenWait() {
	if s.tokenTick != nil {
		s.tokenTick.Stop()
	}
	s.tokenTick, s.tokenC, s.tokenErr = nil, nil, ""
}
