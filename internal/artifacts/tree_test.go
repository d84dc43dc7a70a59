package artifacts

import (
	"slices"
	"strings"
	"testing"
)

func TestDeleteTree(t *testing.T) {
	t.Parallel()
	s, _ := newLocalStore(t, Limits{MaxObjectBytes: 1 << 20, MaxJobBytes: 1 << 20, MaxJobObjects: 100})
	ctx := t.Context()
	put := func(attempt int, key string) {
		t.Helper()
		ref := Ref{JobID: "j_1", Attempt: attempt, Bucket: "checkpoints", Key: key}
		if _, err := s.Put(ctx, ref, strings.NewReader("data"), 4, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(1, "checkpoint-10/model.bin")
	put(1, "checkpoint-10/sub/state.json")
	put(1, "checkpoint-100/model.bin")
	put(2, "checkpoint-10/model.bin")
	if err := s.DeleteTree(ctx, Ref{JobID: "j_1", Attempt: 1, Bucket: "checkpoints", Key: "checkpoint-10"}); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(ctx, "j_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.Path)
	}
	if strings.Join(got, " ") != "checkpoints/checkpoint-10/model.bin checkpoints/checkpoint-100/model.bin" || objs[0].Attempt != 2 {
		t.Fatalf("left: %v", objs)
	}
	entries, _ := s.Backend().List(ctx, "j_1/1/.meta/")
	if len(entries) != 1 {
		t.Fatalf("checksum records left for attempt 1: %v", entries)
	}
	if err := s.DeleteTree(ctx, Ref{JobID: "j_1", Attempt: 3, Bucket: "checkpoints", Key: "nothing"}); err != nil {
		t.Fatalf("an empty tree: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	s, _ := newLocalStore(t, Limits{MaxObjectBytes: 1 << 20, MaxJobBytes: 1 << 20, MaxJobObjects: 100})
	ref := Ref{JobID: "j_1", Attempt: 1, Bucket: "checkpoints", Key: "checkpoint-1/a"}
	put, err := s.Put(t.Context(), ref, strings.NewReader("hello"), 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Describe(t.Context(), ref)
	if err != nil || got.SHA256 != put.SHA256 || got.Size != 5 || got.SHA256 == "" {
		t.Fatalf("Describe = %+v %v, stored %+v", got, err, put)
	}
	if _, err := s.Describe(t.Context(), Ref{JobID: "j_1", Attempt: 1, Bucket: "checkpoints", Key: "nope"}); err == nil {
		t.Fatal("described a missing object")
	}
}

func TestDirs(t *testing.T) {
	t.Parallel()
	s, _ := newLocalStore(t, Limits{MaxObjectBytes: 1 << 20, MaxJobBytes: 1 << 20, MaxJobObjects: 100})
	for _, r := range []Ref{
		{JobID: "j_1", Attempt: 1, Bucket: "checkpoints", Key: "checkpoint-10/a"},
		{JobID: "j_1", Attempt: 1, Bucket: "checkpoints", Key: "checkpoint-10/b/c"},
		{JobID: "j_1", Attempt: 2, Bucket: "checkpoints", Key: "checkpoint-20/a"},
		{JobID: "j_1", Attempt: 2, Bucket: "checkpoints", Key: "loose-file"},
		{JobID: "j_1", Attempt: 2, Bucket: "outputs", Key: "x/y"},
	} {
		if _, err := s.Put(t.Context(), r, strings.NewReader("x"), 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Dirs(t.Context(), "j_1", "checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b Dir) int { return a.Attempt - b.Attempt })
	if !slices.Equal(got, []Dir{{1, "checkpoint-10"}, {2, "checkpoint-20"}}) {
		t.Fatalf("Dirs = %v", got)
	}
}
