package worker

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/simpletuner/simpletuner-orchestration/internal/protocol"
	"github.com/simpletuner/simpletuner-orchestration/internal/worker/orchclient"
)

// The worker talks to the orchestrator through one orchclient.Client; what
// follows is what the client's errors mean to the worker: which ones no
// retry can fix, and how to say so.
type client = orchclient.Client

// ErrRedirected is returned by Serve when the orchestrator URL redirects to
// another origin: the worker token is never sent there, and retrying cannot
// change where the URL points.
var ErrRedirected = orchclient.ErrRedirected

// statusOf returns the HTTP status of err, or 0 for a transport error.
func statusOf(err error) int { return orchclient.StatusOf(err) }

// refusedToken is the token a 401 refused ("" when err is no 401).
func refusedToken(err error) string { return orchclient.RefusedToken(err) }

// ErrClientCertificate is returned by Serve when the orchestrator demands a
// client certificate the worker does not have, or refuses the one it has.
// Retrying cannot help; the worker's TLS settings must change.
var ErrClientCertificate = errors.New("the orchestrator refused the TLS connection over the client certificate")

// certificateRefusal explains a TLS alert about the worker's client
// certificate, or returns nil. The alerts reach the client only as text
// ("remote error: tls: …"), so that is what is matched.
func certificateRefusal(c *client, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var alert string
	for _, a := range []string{"certificate required", "unknown certificate authority", "bad certificate",
		"expired certificate", "revoked certificate", "unsupported certificate", "certificate unknown"} {
		if strings.Contains(msg, "remote error: tls: "+a) {
			alert = a
			break
		}
	}
	switch {
	case alert == "":
		return nil
	case !c.HasCert():
		return fmt.Errorf("%w: the orchestrator requires a client certificate (TLS alert %q) and none is configured; "+
			"set [orchestrator] cert_file and key_file, or the systemd credentials worker-cert and worker-key", ErrClientCertificate, alert)
	default:
		return fmt.Errorf("%w: the orchestrator refused this worker's client certificate (TLS alert %q); "+
			"it must be valid and signed by a CA in the orchestrator's tls.client_ca_file", ErrClientCertificate, alert)
	}
}

// ErrRegistrationRefused is returned by Serve when the orchestrator found the
// registration itself invalid (HTTP 422: labels over its limits, say); the
// same request would be refused again.
var ErrRegistrationRefused = errors.New("the orchestrator refused the registration as invalid")

// unfixable returns the configuration error a failed registration shows, or
// nil when waiting and retrying may help: the URL is not an orchestrator's,
// redirects to another origin, the client certificate is missing or
// refused, or the registration itself is invalid.
func unfixable(c *client, err error) error {
	if errors.Is(err, ErrRedirected) {
		return err
	}
	if statusOf(err) == http.StatusUnprocessableEntity {
		return fmt.Errorf("%w: %v; fix the worker's configuration", ErrRegistrationRefused, err)
	}
	if e := certificateRefusal(c, err); e != nil {
		return e
	}
	if e := schemeMismatch(c, err); e != nil {
		return e
	}
	return notAnOrchestrator(c, err)
}

// ErrWrongScheme is returned by Serve when the orchestrator URL's scheme does
// not match what answers there: https:// to a plain-HTTP listener, or http://
// to a TLS one. Retrying cannot help; the URL (or the orchestrator's [tls])
// must change.
var ErrWrongScheme = errors.New("the orchestrator URL's scheme does not match the orchestrator's listener")

// schemeMismatch explains a registration that failed because one side
// speaks TLS and the other does not, or returns nil.
func schemeMismatch(c *client, err error) error {
	var he *orchclient.Error
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w: %s answers plain HTTP, not HTTPS; use http:// in [orchestrator] url, or turn TLS on in the "+
			"orchestrator ([tls] cert_file and key_file)", ErrWrongScheme, c.CurrentURL())
	case errors.As(err, &he) && he.Status == http.StatusBadRequest && (strings.Contains(he.Body.Detail, "HTTP request to an HTTPS server") ||
		strings.Contains(he.Body.Detail, "plain HTTP request was sent to HTTPS port")): // Go's TLS listener, nginx
		return fmt.Errorf("%w: %s is served over TLS; use https:// in [orchestrator] url", ErrWrongScheme, c.CurrentURL())
	}
	return nil
}

// tokenHint is what may be logged about a token: its first 8 characters.
func tokenHint(tok string) string {
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return "(short token)"
}

// ErrAuthRejected is returned by Serve when the orchestrator answered 401 to the
// worker's token. Retrying cannot help; an admin must install a new token.
var ErrAuthRejected = errors.New("the orchestrator rejected the worker token (401): it was rotated or revoked; install a new one")

func isAuthError(err error) bool { return statusOf(err) == http.StatusUnauthorized }

// isSessionRefused reports the orchestrator's answer to a workerd whose token
// another live workerd installation is using.
func isSessionRefused(err error) bool {
	var he *orchclient.Error
	return errors.As(err, &he) && he.Status == http.StatusConflict && he.Body.Error == protocol.CodeSessionActive
}

// ErrNotAnOrchestrator is returned by Serve when the configured URL answers,
// but not as an orchestrator would: retrying cannot help, the URL is wrong.
var ErrNotAnOrchestrator = errors.New("the orchestrator URL does not point at simpletuner-orchestratord")

// notAnOrchestrator explains a registration answer that shows the URL is not
// an orchestrator's (404 or 405 on the register endpoint), or returns nil.
func notAnOrchestrator(c *client, err error) error {
	switch statusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
	default:
		return nil
	}
	hint := "set [orchestrator] url to the orchestrator's base URL, e.g. http://orchestrator.example:8001"
	if u, err := url.Parse(c.Base()); err == nil && u.Path != "" {
		hint = fmt.Sprintf("remove the path %q from [orchestrator] url: the worker adds /api/... itself", u.Path)
	}
	return fmt.Errorf("%w: POST %s answered %v; %s", ErrNotAnOrchestrator, c.Resolve("/api/workers/register"), err, hint)
}

// absURL resolves an endpoint the orchestrator gave (often relative) against the
// configured orchestrator URL, for what the job sees.
func absURL(orchestratorURL, endpoint string) string {
	if endpoint == "" || strings.Contains(endpoint, "://") {
		return endpoint
	}
	return strings.TrimRight(orchestratorURL, "/") + "/" + strings.TrimLeft(endpoint, "/")
}
