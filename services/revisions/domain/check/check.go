// Package check holds the format rules the revisions service's aggregates
// use (names, Kubernetes labels, hostnames, SSH keys). The rules every
// service shares are libs/fields' (one rule per field everywhere); these
// functions are them under the names this service's code calls. Each
// returns an error whose message is a human reason; callers attach the
// field path.
package check

import (
	"errors"
	"fmt"
	"strings"

	"github.com/anvil-fleet/anvil/libs/fields"
	"github.com/anvil-fleet/anvil/services/revisions/api"
)

// DNSLabel checks an RFC 1123 label: the form of every aggregate id here,
// because ids end up in NATS subjects, URLs and file names.
func DNSLabel(s string) error { return fields.DNSLabel(s) }

// DNSSubdomain checks an RFC 1123 subdomain (dot-separated labels, at most 253 characters).
func DNSSubdomain(s string) error { return fields.DNSSubdomain(s) }

// Hostname checks a machine hostname. It is RFC 1123 and lowercase (the
// kubelet registers the node under it, and node names are DNS subdomains),
// and at most 63 characters because that is what Linux keeps (HOST_NAME_MAX
// is 64 including the terminator).
func Hostname(s string) error { return fields.Hostname(s) }

// LabelKey checks a Kubernetes label (or taint) key: an optional DNS
// subdomain prefix and a '/', then a name of at most 63 characters.
func LabelKey(k string) error { return fields.LabelKey(k) }

// LabelValue checks a Kubernetes label (or taint) value; empty is allowed.
func LabelValue(v string) error { return fields.LabelValue(v) }

// kubeletAllowedLabels are the labels in the kubernetes.io and k8s.io
// namespaces that a kubelet may set on its own node; it refuses to start
// with any other such label in --node-labels.
var kubeletAllowedLabels = map[string]bool{
	"kubernetes.io/hostname":                   true,
	"kubernetes.io/arch":                       true,
	"kubernetes.io/os":                         true,
	"beta.kubernetes.io/arch":                  true,
	"beta.kubernetes.io/os":                    true,
	"beta.kubernetes.io/instance-type":         true,
	"node.kubernetes.io/instance-type":         true,
	"failure-domain.beta.kubernetes.io/region": true,
	"failure-domain.beta.kubernetes.io/zone":   true,
	"topology.kubernetes.io/region":            true,
	"topology.kubernetes.io/zone":              true,
}

// NodeLabelKey checks a label key that the kubelet sets on its own node at
// registration. Besides the label syntax, the kubelet refuses keys in the
// kubernetes.io and k8s.io namespaces except a few well-known ones and the
// kubelet.kubernetes.io/ and node.kubernetes.io/ prefixes; such a label would
// stop the node from ever joining, so it is refused here.
func NodeLabelKey(k string) error {
	if err := LabelKey(k); err != nil {
		return err
	}
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return nil
	}
	prefix := k[:i]
	restricted := prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") ||
		prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io")
	if !restricted || kubeletAllowedLabels[k] {
		return nil
	}
	if prefix == "kubelet.kubernetes.io" || strings.HasSuffix(prefix, ".kubelet.kubernetes.io") ||
		prefix == "node.kubernetes.io" || strings.HasSuffix(prefix, ".node.kubernetes.io") {
		return nil
	}
	return fmt.Errorf("the kubelet may not set labels in the %q namespace on its own node (NodeRestriction); use another prefix, or node.kubernetes.io/", prefix)
}

// DisplayName checks a free-text name shown in UIs.
func DisplayName(s string) error { return fields.DisplayName(s) }

// Text checks a free-text message (a revision message, say): valid UTF-8,
// bounded, no control characters except newline and tab.
func Text(s string, max int) error { return fields.Text(s, max, true) }

// AgentCredentialPlaceholder is the token that the boot service replaces,
// byte for byte, with a machine's agent credential in the rendered
// Ignition. It uses only characters that neither a data URL nor JSON
// escapes, so it appears verbatim; no user-settable field may contain it.
const AgentCredentialPlaceholder = api.AgentCredentialPlaceholder

// NoPlaceholder refuses text that contains the agent credential placeholder.
func NoPlaceholder(s string) error {
	if strings.Contains(s, AgentCredentialPlaceholder) {
		return errors.New("must not contain the reserved agent credential placeholder")
	}
	return nil
}
