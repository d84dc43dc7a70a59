package sqlstore

import (
	"context"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
)

// GetAttemptByUploadTokenHash finds the attempt whose upload token hashes to
// hash. Tokens are random, so at most one attempt matches in practice; should
// two ever share a digest, the latest dispatch wins. The second condition repeats the
// partial index's condition so that both engines may use that index.
func (s *Store) GetAttemptByUploadTokenHash(ctx context.Context, hash string) (store.Attempt, error) {
	if hash == "" {
		return store.Attempt{}, store.ErrNotFound
	}
	a, err := scanAttempt(s.reader().queryRow(ctx, `SELECT `+attemptCols+` FROM attempts
		WHERE upload_token_hash = ? AND upload_token_hash <> '' ORDER BY dispatched_at DESC, number DESC LIMIT 1`, hash))
	return a, noRows(err, "attempt with upload token", "…")
}
