package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/anvil-fleet/anvil/agent/api"
)

// stateVersion lets a future agent recognise (and migrate) what it finds on disk.
const stateVersion = 1

// persistedState is the state file. It survives reboots, so the instruction
// that caused a reboot is recognised when the server delivers it again.
type persistedState struct {
	Version         int               `json:"version"`
	LastInstruction *actedInstruction `json:"last_instruction,omitempty"`
}

// actedInstruction is an instruction the agent started to carry out.
type actedInstruction struct {
	ID       string   `json:"id"`
	Kind     api.Kind `json:"kind"`
	Revision string   `json:"revision"`
	// BootedRevision and BootID describe the boot that acted; comparing them
	// with the next boot tells whether the reboot happened and where it landed.
	BootedRevision string    `json:"booted_revision"`
	BootID         string    `json:"boot_id,omitempty"`
	ActedAt        time.Time `json:"acted_at"`
	// Outcome is the terminal ack once known; empty while the reboot is pending.
	Outcome api.AckStatus `json:"outcome,omitempty"`
	Message string        `json:"message,omitempty"`
}

func loadState(path string) (persistedState, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return persistedState{Version: stateVersion}, nil
	}
	if err != nil {
		return persistedState{Version: stateVersion}, err
	}
	var st persistedState
	if err := json.Unmarshal(data, &st); err != nil {
		return persistedState{Version: stateVersion}, fmt.Errorf("state file %s: %w", path, err)
	}
	if st.Version != stateVersion {
		return persistedState{Version: stateVersion}, fmt.Errorf("state file %s: unknown version %d", path, st.Version)
	}
	return st, nil
}

// saveState replaces the state file atomically (temp file, fsync, rename,
// fsync of the directory): a reboot right after must find either the old or
// the new state, never a torn one.
func saveState(path string, st persistedState) error {
	st.Version = stateVersion
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".state-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
