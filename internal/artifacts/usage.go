package artifacts

import (
	"context"
	"strings"
)

// TotalBytes is the size of every object of every job (metadata records and
// unfinished uploads left out). It lists the whole store, so callers run it
// in the background, not per request.
func (s *Store) TotalBytes(ctx context.Context) (int64, error) {
	entries, err := s.b.List(ctx, "")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		job, _, ok := strings.Cut(e.Name, "/")
		if !ok || validJobID(job) != nil {
			continue
		}
		if _, isMeta, _, ok := parseName(job, e.Name); ok && !isMeta {
			total += e.Size
		}
	}
	return total, nil
}
