package agent

import (
	"regexp"
	"testing"
)

// FuzzParseEnvFile checks that a damaged env file never crashes the agent and
// that errors never echo file content, which may include the credential.
func FuzzParseEnvFile(f *testing.F) {
	f.Add([]byte("ANVIL_BOOT_URL=https://b:8443\n# c\nexport ANVIL_AGENT_CREDENTIAL=\"x\"\n"))
	f.Add([]byte("ANVIL_AGENT_CREDENTIAL: secret\n"))
	f.Add([]byte("=\n'\n\"\n"))
	safe := regexp.MustCompile(`^(line \d+: want KEY=VALUE|bufio.Scanner: token too long)$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseEnvFile(data)
		if err != nil {
			if !safe.MatchString(err.Error()) {
				t.Fatalf("error may echo content: %q", err)
			}
			return
		}
		var cfg Config
		_ = ApplyEnv(&cfg, env)
	})
}
