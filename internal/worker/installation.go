package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// A workerd installation is its state directory. Its id, kept there, is sent
// with every request (protocol.HeaderWorkerSession) so that the orchestrator
// lets one installation at a time use the worker's token: a restart keeps the
// id and resumes at once, a copy of the configuration on another host does
// not and is refused while this one is alive. Two processes on one state
// directory would share the id, so the directory is also locked.

const (
	installationFile = "installation-id"
	lockFile         = "workerd.lock"
)

// ErrStateDirInUse is returned by Start when another workerd holds the state
// directory.
var ErrStateDirInUse = errors.New("the state directory is in use by another simpletuner-workerd")

// lockStateDir takes an exclusive lock on the state directory for as long as
// the returned file stays open. The descriptor is close-on-exec: jobs and the
// reaper must not keep the lock once workerd is gone.
func lockStateDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (%s); two workerd processes must not share a state_dir", ErrStateDirInUse, dir, lockFile)
		}
		return nil, fmt.Errorf("state directory lock %s: %w", filepath.Join(dir, lockFile), err)
	}
	return f, nil
}

// installationID reads the id kept in dir, creating it on first use.
func installationID(dir string) (string, error) {
	path := filepath.Join(dir, installationFile)
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); validInstallationID(id) {
			return id, nil
		}
		// Unreadable content: a new id is safe, it only costs a takeover wait.
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("installation id: %w", err)
	}
	raw := make([]byte, 16)
	_, _ = rand.Read(raw) // never fails on Linux
	id := hex.EncodeToString(raw)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("installation id: %w", err)
	}
	return id, nil
}

func validInstallationID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}
