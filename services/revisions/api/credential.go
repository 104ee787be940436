package api

import (
	"bytes"
	"regexp"

	"github.com/anvil-fleet/anvil/libs/events/errs"
)

// CredentialPattern is the form of a credential that may replace
// AgentCredentialPlaceholder: it needs no escaping in a data URL or in
// JSON, so the config stays valid.
var CredentialPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{20,128}$`)

// InjectCredential replaces the placeholder in a rendered config with a
// machine's agent credential: what the boot service does per request with
// RenderedMachine.Ignition.
func InjectCredential(cfg []byte, credential string) ([]byte, error) {
	if !CredentialPattern.MatchString(credential) {
		return nil, errs.Invalid("credential", "must match %s", CredentialPattern)
	}
	if n := bytes.Count(cfg, []byte(AgentCredentialPlaceholder)); n != 1 {
		return nil, errs.Internal("render: the credential placeholder occurs %d times, want exactly 1", n)
	}
	return bytes.Replace(cfg, []byte(AgentCredentialPlaceholder), []byte(credential), 1), nil
}
