// Package jobconfig reads and sets keys of a job's training config, a JSON
// object whose keys SimpleTuner spells either as command-line flags
// ("--output_dir") or plainly ("output_dir").
package jobconfig

import (
	"encoding/json"
	"strings"
)

// String returns the value of key, spelled "--key" or "key" (the flag
// spelling wins), when it is a JSON string; ok is false when the config is
// not an object, the key is absent, or its value is not a string.
func String(cfg []byte, key string) (value string, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(cfg, &m) != nil || m == nil {
		return "", false
	}
	for _, k := range []string{"--" + key, key} {
		raw, found := m[k]
		if !found {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	}
	return "", false
}

// Set sets key to value in a config object, in the key style the config
// already uses: the spelling of key that is present, else "--key" when any
// key of the config is a flag, else "key". Another spelling of the same key
// is removed, so the trainer reads one value. Anything that is not a JSON
// object is returned unchanged.
func Set(cfg []byte, key string, value any) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(cfg, &m) != nil || m == nil {
		return cfg
	}
	flag := "--" + key
	_, hasPlain := m[key]
	_, hasFlag := m[flag]
	use := key
	switch {
	case hasFlag:
		use = flag
	case hasPlain:
	default:
		for k := range m {
			if strings.HasPrefix(k, "--") {
				use = flag
				break
			}
		}
	}
	v, err := json.Marshal(value)
	if err != nil {
		return cfg
	}
	delete(m, key)
	delete(m, flag)
	m[use] = v
	out, err := json.Marshal(m)
	if err != nil {
		return cfg
	}
	return out
}
