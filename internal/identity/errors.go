package identity

import "errors"

// What a sign-in with a provider can end in, besides ErrDisabled and
// ErrNoRole. The providers (packages oidc and ldap) return these, so that
// a caller (the dashboard) can tell them apart without importing the
// providers and their libraries.
var (
	// ErrProviderUnavailable: the OpenID provider could not be reached or
	// answered with a server error.
	ErrProviderUnavailable = errors.New("the identity provider is unavailable")
	// ErrState: the state that came back names no sign-in in progress.
	ErrState = errors.New("this sign-in is unknown, was already used or has expired; start again")
	// ErrTokenInvalid: the OpenID provider answered, but what it sent
	// cannot be trusted.
	ErrTokenInvalid = errors.New("the identity provider's answer was refused")
	// ErrDenied: the OpenID provider sent the browser back with an error
	// instead of a code.
	ErrDenied = errors.New("the identity provider did not sign you in")

	// ErrInvalidCredentials: a wrong password, an unknown or malformed
	// user name (they read the same on purpose).
	ErrInvalidCredentials = errors.New("invalid user name or password")
	// ErrBusy: too many directory sign-ins are in flight.
	ErrBusy = errors.New("too many sign-ins in progress; try again shortly")
	// ErrDirectoryUnavailable: the LDAP directory could not be reached or failed.
	ErrDirectoryUnavailable = errors.New("the LDAP directory is unavailable")
	// ErrThrottled: too many recent failures for this user name.
	ErrThrottled = errors.New("too many failed sign-ins for this user name; try again later")
)
