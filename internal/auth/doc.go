// Package auth holds the credential primitives of the orchestrator: token
// generation and recognition, digests, scopes and principals, unix-socket
// peer credentials, and a limiter for repeated authentication failures.
//
// # Tokens
//
// A worker token is "wt_" and an admin token "sta_", followed by a 43-character
// body (32 random bytes in unpadded base64url) and a 6-character checksum. The
// checksum is CRC-32 (IEEE) of prefix+body, written as a fixed-width base62
// number (alphabet 0-9, A-Z, a-z, zero-padded on the left), in the manner of
// GitHub's tokens. It is not a secret and adds no strength: it lets a secret
// scanner, or this daemon, tell a well-formed token from a typo or garbage
// offline (see WellFormed). The store keeps only Hash(token), compared with
// Equal; logs show only Accessor(token), or use the Token type, which prints
// nothing else.
//
// # Rate limiting failed authentication
//
// The protocol limits repeated failures from one peer address (10 a minute by
// default), "counted before the digest compare", while "a valid credential is
// never rate limited". FailureLimiter reconciles the two like this:
//
//	key := auth.LimitKey(r.RemoteAddr) // an IPv6 client counts by its /64
//	if wait, blocked := limiter.Blocked(key); blocked && !auth.WellFormed(token) {
//		// 429, Retry-After: ceil(wait seconds); no hashing, no lookup
//	}
//	// hash, look up, compare; on failure:
//	limiter.Fail(key) // then 401, or 429 if Blocked(key) now says so
//
// So a blocked peer's garbage costs no hashing and no database work, while a
// well-formed token (which a flood of guesses cannot hit by chance) is still
// looked up and, when valid, accepted. Only failures are ever recorded; the
// limiter never sees successes.
package auth
