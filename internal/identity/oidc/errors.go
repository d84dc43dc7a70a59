package oidc

import (
	"fmt"

	"github.com/simpletuner/simpletuner-orchestration/internal/identity"
)

var (
	// ErrProviderUnavailable: the identity provider could not be reached
	// or answered with a server error (discovery, token endpoint). The
	// wrapped error says how; it never holds a code or a token.
	ErrProviderUnavailable = identity.ErrProviderUnavailable
	// ErrState: the state that came back names no sign-in in progress: it
	// was never issued here, was used already or has expired. Start again.
	ErrState = identity.ErrState
	// ErrTokenInvalid is what every *TokenError is.
	ErrTokenInvalid = identity.ErrTokenInvalid
	// ErrDenied is what every *DeniedError is.
	ErrDenied = identity.ErrDenied
)

// TokenError: the provider answered, but what it sent cannot be trusted:
// the code was refused, the ID token is missing, expired, for another
// client, from another issuer, badly signed or carries the wrong nonce.
type TokenError struct {
	Reason string // a sentence without any token or code in it
	Err    error  // the library's error, when there is one
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("%v: %s", ErrTokenInvalid, e.Reason)
}

// Is makes errors.Is(err, ErrTokenInvalid) hold.
func (e *TokenError) Is(target error) bool { return target == ErrTokenInvalid }

func (e *TokenError) Unwrap() error { return e.Err }

// DeniedError: the provider sent the browser back with error= instead of a
// code (the person declined, or the provider refused them).
type DeniedError struct {
	Code        string // access_denied, login_required, …
	Description string // as the provider wrote it, when it did
}

func (e *DeniedError) Error() string {
	if e.Description != "" {
		return fmt.Sprintf("%v (%s: %s)", ErrDenied, e.Code, e.Description)
	}
	return fmt.Sprintf("%v (%s)", ErrDenied, e.Code)
}

// Is makes errors.Is(err, ErrDenied) hold.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }
