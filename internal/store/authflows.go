package store

import (
	"context"
	"time"
)

// AuthFlow is a sign-in in progress: a browser was sent to an identity
// provider and is expected back with the state it was given. The state
// itself is never stored, only its hex SHA-256, so a copy of the database
// cannot finish anyone's sign-in.
type AuthFlow struct {
	StateHash string // hex SHA-256 of the state handed to the provider
	Provider  string // which sign-in the flow belongs to ("oidc")
	Nonce     string // the nonce the ID token must carry
	Verifier  string // the PKCE code verifier the code is redeemed with
	ReturnTo  string // where to send the browser once signed in
	CreatedAt time.Time
	ExpiresAt time.Time
}

// AuthFlows keeps sign-ins in progress where every orchestrator sharing the
// database sees them, so any of them can finish a sign-in another began.
type AuthFlows interface {
	// PutAuthFlow stores a new flow (a used state hash is ErrDuplicate) and
	// deletes the flows that expired by its CreatedAt.
	PutAuthFlow(ctx context.Context, f AuthFlow) error
	// TakeAuthFlow removes the flow and returns it, once: a second take of
	// the same state, an unknown state and a flow expired by now are all
	// ErrNotFound. Of two orchestrators taking one state at the same time,
	// one gets the flow.
	TakeAuthFlow(ctx context.Context, stateHash string, now time.Time) (AuthFlow, error)
}
