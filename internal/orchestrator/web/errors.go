package web

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/api"
	"github.com/simpletuner/simpletuner-orchestration/internal/orchestrator/diskfull"
	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// Errors answers failed calls, over HTTP and in process alike.
type Errors struct {
	Log *slog.Logger
	// Disk is the full-disk state a write that found no space enters.
	Disk *diskfull.State
}

// Write answers err, as APIError says.
func (e *Errors) Write(w http.ResponseWriter, r *http.Request, err error) {
	ae, retryAfter := e.apiError(err, r.Method+" "+r.URL.Path)
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	if ae.Body.RequestID != "" {
		w.Header().Set("X-Request-ID", ae.Body.RequestID)
	}
	WriteJSON(w, ae.Status, ae.Body)
}

// APIError is what a call of the API that failed with err answers, for a
// caller in process (the dashboard) as for HTTP. An *api.Error says it
// itself; a full disk is 507 (see DiskFull); anything else is either the
// database being out of reach (503, worth a retry) or a fault of ours (500).
// Neither shows the error itself, which may name hosts, paths or driver
// internals: the log has it, under a request id the reply names. what
// names the call in that log line.
func (e *Errors) APIError(err error, what string) *api.Error {
	ae, _ := e.apiError(err, what)
	return ae
}

func (e *Errors) apiError(err error, what string) (ae *api.Error, retryAfter string) {
	if ae = api.ErrorOf(err); ae != nil {
		if ae.RetryAfter > 0 {
			retryAfter = strconv.Itoa(int(math.Ceil(ae.RetryAfter.Seconds())))
		}
		return ae, retryAfter
	}
	if diskfull.IsNoSpace(err) {
		// Logged once for the whole episode, not per request.
		disk := diskfull.Artifacts
		if errors.Is(err, store.ErrDiskFull) {
			disk = diskfull.Database
		}
		return e.DiskFull(disk, err), "30"
	}
	id := protocol.NewRequestID()
	if IsUnavailable(err) {
		e.Log.Warn("request failed: database unreachable", "call", what, "request_id", id, "err", err)
		ae = Errorf(http.StatusServiceUnavailable, protocol.CodeUnavailable, "the database is unreachable; try again shortly")
		retryAfter = "5"
	} else {
		e.Log.Error("request failed", "call", what, "request_id", id, "err", err)
		ae = Errorf(http.StatusInternalServerError, protocol.CodeInternal, "internal error (request id %s); the orchestrator's log has the details", id)
	}
	ae.Body.RequestID = id
	return ae, retryAfter
}

// DiskFull enters the full state for disk and returns the 507 answer.
// The answer names the disk by its role, not its path: paths stay in the log,
// which has the path the one time the state is entered.
func (e *Errors) DiskFull(disk diskfull.Disk, err error) *api.Error {
	e.Disk.Note(disk, err)
	if disk == diskfull.Artifacts {
		return Errorf(http.StatusInsufficientStorage, protocol.CodeInsufficientStorage,
			"no space left on the disk that keeps artifacts; the upload was not stored. Uploads work again once space is freed")
	}
	return Errorf(http.StatusInsufficientStorage, protocol.CodeInsufficientStorage,
		"no space left on the database's disk; nothing was changed. Writes are refused until space is freed; reads still work")
}

// IsUnavailable reports whether err means the database could not be reached
// or used just now. Only errors of the database connection count: a file
// error (a config name too long for the file system, say) carries a syscall
// errno that looks like a network error to errors.As, and is not one.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) {
		return true
	}
	var oe *net.OpError // dialling or talking to the database server
	if errors.As(err, &oe) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{
		"connection refused", "the database system is shutting down", "the database system is starting up",
		"bad connection", "database is closed", "database is locked", "too many clients",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
