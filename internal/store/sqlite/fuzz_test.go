package sqlite

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/simpletuner/simpletuner-orchestration/internal/store"
	"github.com/simpletuner/simpletuner-orchestration/internal/store/sqlstore"
)

// logModel is the obvious in-memory version of AppendLog's contract.
type logModel struct {
	limit     int64
	size      map[int]int64  // per attempt: bytes accounted for
	text      map[int][]byte // per attempt: what ReadLog must return
	stored    int64
	truncated bool
}

// streamByte is byte p of attempt a's output: resent bytes always agree, as a
// real worker's would.
func streamByte(a int, p int64) byte { return byte('a' + (p*7+int64(a))%26) }

func (m *logModel) append(a int, off int64, data []byte) (int64, bool, error) {
	size := m.size[a]
	if off > size {
		return size, m.truncated, store.ErrConflict
	}
	end := off + int64(len(data))
	if end <= size {
		return size, m.truncated, nil
	}
	fresh := data[size-off:]
	if !m.truncated {
		if m.limit > 0 && m.stored+int64(len(fresh)) > m.limit {
			keep := m.limit - m.stored
			m.text[a] = append(append(m.text[a], fresh[:keep]...), sqlstore.TruncationMarker(m.limit)...)
			m.stored, m.truncated = m.limit, true
		} else {
			m.text[a] = append(m.text[a], fresh...)
			m.stored += int64(len(fresh))
		}
	}
	m.size[a] = end
	return end, m.truncated, nil
}

// FuzzAppendLog replays random chunk sequences (resends, overlaps, gaps,
// interleaved attempts, a cap) against the store and the model.
func FuzzAppendLog(f *testing.F) {
	f.Add([]byte{0, 0, 10, 0, 0, 10, 0, 0xf8, 20, 1, 0, 5}, uint8(0))
	f.Add([]byte{0, 0, 30, 0, 0x10, 3, 1, 0, 30, 0, 0xf0, 31}, uint8(40))
	f.Add([]byte{2, 0, 1, 1, 0, 1, 0, 0, 1, 2, 0xff, 9}, uint8(3))
	s, err := Open(f.Context(), filepath.Join(f.TempDir(), "fuzz.db"), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })

	f.Fuzz(func(t *testing.T, ops []byte, limit uint8) {
		j, err := s.InsertJob(t.Context(), store.Job{ConfigName: "fuzz"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := &logModel{limit: int64(limit), size: map[int]int64{}, text: map[int][]byte{}}
		for i := 0; i+2 < len(ops) && i < 3*64; i += 3 {
			a := 1 + int(ops[i]%3)
			// Offsets land near the current size so resends, overlaps and gaps all occur.
			off := max(0, m.size[a]+int64(int8(ops[i+1]))/8)
			data := make([]byte, ops[i+2]%40)
			for k := range data {
				data[k] = streamByte(a, off+int64(k))
			}
			wantSize, wantTrunc, wantErr := m.append(a, off, data)
			size, trunc, err := s.AppendLog(t.Context(), j.ID, a, off, data, int64(limit))
			if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
				t.Fatalf("op %d: AppendLog(%d, %d, %d bytes) error %v, want %v", i/3, a, off, len(data), err, wantErr)
			}
			if size != wantSize || trunc != wantTrunc {
				t.Fatalf("op %d: AppendLog(%d, %d, %d bytes) = %d %v, want %d %v", i/3, a, off, len(data), size, trunc, wantSize, wantTrunc)
			}
		}
		// Read back whole, then in small pages: both must equal the model.
		for _, maxBytes := range []int{0, 7} {
			got := map[int][]byte{}
			var cur store.LogCursor
			for {
				chunks, err := s.ReadLog(t.Context(), j.ID, cur, maxBytes)
				if err != nil {
					t.Fatal(err)
				}
				if len(chunks) == 0 {
					break
				}
				for _, c := range chunks {
					if int64(len(got[c.Attempt])) != c.Offset {
						t.Fatalf("attempt %d: chunk at %d after %d bytes", c.Attempt, c.Offset, len(got[c.Attempt]))
					}
					got[c.Attempt] = append(got[c.Attempt], c.Data...)
					cur = store.LogCursor{Attempt: c.Attempt, Offset: c.Offset + int64(len(c.Data))}
				}
			}
			for a := 1; a <= 3; a++ {
				if !bytes.Equal(got[a], m.text[a]) {
					t.Fatalf("maxBytes %d, attempt %d: read %q, want %q", maxBytes, a, got[a], m.text[a])
				}
			}
		}
	})
}
