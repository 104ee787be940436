package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment keys of /etc/anvil/agent.env, written by Ignition.
const (
	EnvBootURL = "ANVIL_BOOT_URL"
	// EnvURL is the boot service's URL under the name the revisions
	// service's renderer writes; EnvBootURL wins when both are set.
	EnvURL              = "ANVIL_URL"
	EnvMachineUUID      = "ANVIL_MACHINE_UUID"
	EnvAgentCredential  = "ANVIL_AGENT_CREDENTIAL"
	EnvCAFile           = "ANVIL_CA_FILE"
	EnvHeartbeatSeconds = "ANVIL_HEARTBEAT_SECONDS"
	// EnvMachineRevision is the machine revision id the renderer also
	// writes into the env file; it stands in for the revision file when
	// that cannot be read.
	EnvMachineRevision = "ANVIL_MACHINE_REVISION"
)

// ParseEnvFile reads KEY=VALUE lines. Blank lines and lines starting with #
// are skipped, an "export " prefix is tolerated, and a value may be wrapped in
// single or double quotes, so the same file also works as a systemd
// EnvironmentFile. Errors name the line, never its content: it may hold the
// credential.
func ParseEnvFile(data []byte) (map[string]string, error) {
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			val = val[1 : len(val)-1]
		}
		env[key] = val
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return env, nil
}

// LoadEnvFile reads and parses the env file at path.
func LoadEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env, err := ParseEnvFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

// ApplyEnv copies the ANVIL_* settings of env into cfg. Missing optional keys
// leave cfg unchanged; required keys are checked later by New.
func ApplyEnv(cfg *Config, env map[string]string) error {
	if v, ok := env[EnvBootURL]; ok && v != "" {
		cfg.BootURL = v
	} else if v, ok := env[EnvURL]; ok {
		cfg.BootURL = v
	}
	if v, ok := env[EnvMachineRevision]; ok {
		cfg.BootedRevision = strings.TrimSpace(v)
	}
	if v, ok := env[EnvMachineUUID]; ok {
		cfg.MachineUUID = v
	}
	if v, ok := env[EnvAgentCredential]; ok {
		cfg.Credential = v
	}
	if v, ok := env[EnvCAFile]; ok {
		cfg.CAFile = v
	}
	if v, ok := env[EnvHeartbeatSeconds]; ok && v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s <= 0 {
			return fmt.Errorf("%s=%q: want a positive number of seconds", EnvHeartbeatSeconds, v)
		}
		cfg.HeartbeatInterval = time.Duration(s) * time.Second
	}
	return nil
}

// ReadRevisionFile returns the first line of the revision file, trimmed.
func ReadRevisionFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line), nil
}
