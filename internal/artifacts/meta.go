package artifacts

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// meta is what is kept beside each object: its size and checksums, written
// after the bytes are in place. The record travels with the object (a copy
// of the artifacts directory or bucket is self-describing), and it needs no
// database: the orchestrator's database only says who may upload.
type meta struct {
	Version  int       `json:"v"`
	Size     int64     `json:"size"`
	MD5      string    `json:"md5"`
	SHA256   string    `json:"sha256"`
	Modified time.Time `json:"modified_at"`
}

const metaVersion = 1

// maxMetaBytes bounds what is read of a metadata object; a real one is ~200 bytes.
const maxMetaBytes = 4 << 10

func (m meta) encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

// decodeMeta reads a metadata record and checks every field, so a damaged or
// foreign file is reported rather than believed.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) > maxMetaBytes {
		return m, fmt.Errorf("metadata is %d bytes, more than %d", len(b), maxMetaBytes)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return meta{}, fmt.Errorf("metadata is not valid JSON: %w", err)
	}
	switch {
	case m.Version != metaVersion:
		return meta{}, fmt.Errorf("metadata version %d is not %d", m.Version, metaVersion)
	case m.Size < 0:
		return meta{}, errors.New("metadata size is negative")
	case !isHex(m.MD5, 16):
		return meta{}, errors.New("metadata md5 is not 32 hex digits")
	case !isHex(m.SHA256, 32):
		return meta{}, errors.New("metadata sha256 is not 64 hex digits")
	}
	return m, nil
}

func isHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
