package artifacts

import (
	"context"
	"strings"
)

// DeleteTree removes every object of ref's attempt whose key lies below
// ref.Key (a directory of keys), with their checksum records. Nothing there
// is not an error.
func (s *Store) DeleteTree(ctx context.Context, ref Ref) error {
	if err := ref.Validate(); err != nil {
		return err
	}
	// The records first: a crash in between leaves objects without
	// checksums, never checksums without their object.
	if err := s.b.DeleteAll(ctx, ref.metaName()+"/"); err != nil {
		return err
	}
	return s.b.DeleteAll(ctx, ref.dataName()+"/")
}

// Describe returns what is stored under ref, with its checksums when its
// record agrees with it, without reading its bytes.
func (s *Store) Describe(ctx context.Context, ref Ref) (Object, error) {
	if err := ref.Validate(); err != nil {
		return Object{}, err
	}
	e, err := s.b.Stat(ctx, ref.dataName())
	if err != nil {
		return Object{}, err
	}
	o := Object{Attempt: ref.Attempt, Path: ref.Path(), Size: e.Size, Modified: e.Modified.UTC()}
	s.fill(ctx, ref.JobID, &o)
	return o, nil
}

// Dir is a first-level directory of a bucket in one attempt's objects.
type Dir struct {
	Attempt int
	Name    string
}

// Dirs lists the first-level directories of bucket in every attempt of a
// job, from the names alone (no checksum record is read).
func (s *Store) Dirs(ctx context.Context, job, bucket string) ([]Dir, error) {
	if err := validJobID(job); err != nil {
		return nil, err
	}
	entries, err := s.b.List(ctx, job+"/")
	if err != nil {
		return nil, err
	}
	seen := map[Dir]bool{}
	var out []Dir
	for _, e := range entries {
		n, isMeta, path, ok := parseName(job, e.Name)
		if !ok || isMeta {
			continue
		}
		b, key, _ := SplitPath(path)
		name, _, isDir := strings.Cut(key, "/")
		if d := (Dir{Attempt: n, Name: name}); b == bucket && isDir && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out, nil
}
