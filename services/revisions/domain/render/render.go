// Package render turns a machine revision, its cluster's join material
// and the boot service's options into the Ignition config the machine
// boots with: Butane (variant flatcar 1.1.0) built as a struct, marshalled
// to YAML and translated in-process to Ignition 3.4.0.
package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	butanecommon "github.com/coreos/ignition/v2/butane/config/common"
	flatcar "github.com/coreos/ignition/v2/butane/config/flatcar/v1_1"
	"github.com/coreos/ignition/v2/config/v3_4"
	"github.com/vincent-petithory/dataurl"
	"gopkg.in/yaml.v3"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/catalog"
	"github.com/anvil-fleet/anvil/services/revisions/domain/check"
	"github.com/anvil-fleet/anvil/services/revisions/domain/cluster"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
)

// AgentCredentialPlaceholder appears exactly once in every rendered
// config, inside the data URL of /etc/anvil/agent.env. The boot service
// replaces it byte for byte with the machine's credential, which must
// match api.CredentialPattern (api.InjectCredential does it).
const AgentCredentialPlaceholder = check.AgentCredentialPlaceholder

// Paths on the machine that other components rely on.
const (
	HostnamePath    = "/etc/hostname"
	AgentBinaryPath = "/opt/anvil/bin/anvil-agent"
	AgentEnvPath    = "/etc/anvil/agent.env"
	AgentUnit       = "anvil-agent.service"
	RevisionPath    = "/etc/anvil/revision"
	JoinConfigPath  = "/etc/kubeadm/join.yaml"
	JoinUnit        = "anvil-kubeadm-join.service"
	CacheMountPath  = "/var/lib/containerd"
	cacheLabel      = "anvil-cache" // xfs labels hold at most 12 characters
)

// Options are the boot service's settings and the files it serves that
// end up in the config. Every remote file carries its hash: Ignition
// verifies what it fetched against it and fails the boot on a mismatch.
type Options struct {
	// BaseURL is the boot service's public base URL; the agent talks to it.
	BaseURL string `json:"base_url"`
	// AgentURL is where Ignition fetches the agent binary (http or https).
	AgentURL string `json:"agent_url"`
	// AgentHash is the binary's hash: "sha512-<hex>" (or "sha256-<hex>").
	AgentHash string `json:"agent_hash"`
	// SysextURL is where Ignition fetches the Kubernetes systemd-sysext
	// image of the revision's version and Arch (the boot service answers
	// it, see bootapi.SysextAsset).
	SysextURL string `json:"sysext_url"`
	// SysextHash is that image's hash, as AgentHash.
	SysextHash string `json:"sysext_hash"`
	// Arch is "x86-64" (default) or "arm64", as Flatcar's sysext-bakery
	// names architectures.
	Arch string `json:"arch,omitempty"`
}

// SysextArch is the architecture the options name (x86-64 by default).
func (o Options) SysextArch() string {
	if o.Arch == "" {
		return "x86-64"
	}
	return o.Arch
}

// Input is everything a render reads. Render is a pure function of it.
type Input struct {
	Machine  pool.MachineRevision
	Revision pool.Revision // the pool revision Machine refers to
	Join     cluster.Join
	Options  Options
}

// RenderInput is Input under the name the service contract uses.
type RenderInput = Input

// Key identifies the output: the machine revision's hash plus a hash of
// the join material and options. Two inputs with the same key render the
// same bytes (the pool revision is pinned by the machine revision's hash,
// which Render checks).
func (in Input) Key() string {
	h := sha256.New()
	for _, s := range []string{
		in.Machine.Hash, in.Revision.Hash,
		in.Join.APIEndpoint, in.Join.BootstrapToken.Reveal(), in.Join.CACertHash,
		in.Options.BaseURL, in.Options.AgentURL, in.Options.AgentHash, in.Options.SysextURL, in.Options.SysextHash, in.Options.Arch,
	} {
		// Length-prefixed, so that no two different inputs share a key.
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return in.Machine.Hash + "/" + hex.EncodeToString(h.Sum(nil))
}

// Validate checks that the input is consistent and complete.
func (in Input) Validate() error {
	var f errs.Fields
	if err := in.Machine.Verify(); err != nil {
		f.Add("machine", "%v", err)
	}
	if in.Revision.Hash != in.Revision.Config.Hash() {
		f.Add("revision", "revision %d: hash does not match its config", in.Revision.Number)
	}
	if in.Machine.PoolRevision != in.Revision.Number || in.Machine.PoolRevisionHash != in.Revision.Hash {
		f.Add("revision", "machine revision %s refers to pool revision %d (%s), got %d (%s)",
			in.Machine.ID, in.Machine.PoolRevision, in.Machine.PoolRevisionHash, in.Revision.Number, in.Revision.Hash)
	}
	f.Merge("machine", pool.MachineSettings{Hostname: in.Machine.Hostname, Labels: in.Machine.Labels}.Validate())
	f.Merge("revision.config", in.Revision.Config.Validate())
	if _, err := catalog.ParseVersion(in.Revision.Config.Kubernetes.Version); err != nil {
		f.Add("revision.config.kubernetes.version", "%v", err)
	}
	if err := cluster.CheckAPIEndpoint(in.Join.APIEndpoint); err != nil {
		f.Add("join.api_endpoint", "%v", err)
	}
	if err := cluster.CheckBootstrapToken(in.Join.BootstrapToken); err != nil {
		f.Add("join.bootstrap_token", "%v", err)
	}
	if err := cluster.CheckCACertHash(in.Join.CACertHash); err != nil {
		f.Add("join.ca_cert_hash", "%v", err)
	}
	f.Merge("options", in.Options.Validate())
	return f.Err()
}

var hashRe = regexp.MustCompile(`^(sha256-[a-f0-9]{64}|sha512-[a-f0-9]{128})$`)

// Validate checks the options.
func (o Options) Validate() error {
	var f errs.Fields
	if err := checkURL(o.BaseURL); err != nil {
		f.Add("base_url", "%v", err)
	}
	if err := checkURL(o.AgentURL); err != nil {
		f.Add("agent_url", "%v", err)
	}
	if err := checkURL(o.SysextURL); err != nil {
		f.Add("sysext_url", "%v", err)
	}
	// No remote file without its hash: Ignition would run whatever it got.
	if !hashRe.MatchString(o.AgentHash) {
		f.Add("agent_hash", "must be sha256-<64 hex> or sha512-<128 hex>")
	}
	if !hashRe.MatchString(o.SysextHash) {
		f.Add("sysext_hash", "must be sha256-<64 hex> or sha512-<128 hex>")
	}
	switch o.Arch {
	case "", "x86-64", "arm64":
	default:
		f.Add("arch", "must be x86-64 or arm64, got %q", o.Arch)
	}
	return f.Err()
}

// checkURL accepts absolute http(s) URLs made of characters that need no
// quoting in a systemd environment file or a unit.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || s == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("must be an absolute http(s) URL without credentials or fragment")
	}
	for _, r := range s {
		if r <= ' ' || r > '~' || strings.ContainsRune("\"'`\\$%{}", r) {
			return fmt.Errorf("must not contain spaces, quotes, backslashes, '$', '%%' or braces")
		}
	}
	return nil
}

// Render returns the Ignition 3.4.0 config (pretty-printed JSON) for in.
// Every Butane report entry, warnings included, is an error, and the
// result is parsed again by Ignition's own v3_4 package before it is
// returned.
func Render(in Input) ([]byte, error) {
	bu, err := Butane(in)
	if err != nil {
		return nil, err
	}
	opts := butanecommon.TranslateBytesOptions{
		// Compressed contents could not be diffed or searched, and the
		// placeholder must stay findable; FilesDir stays empty (nothing
		// local is ever embedded server-side).
		TranslateOptions: butanecommon.TranslateOptions{NoResourceAutoCompression: true},
		Pretty:           true,
	}
	out, report, err := flatcar.ToIgn3_4Bytes(bu, opts)
	if err != nil {
		return nil, errs.Internal("render: butane translation failed: %v: %s", err, report.String())
	}
	if len(report.Entries) > 0 {
		return nil, errs.Internal("render: butane reported: %s", report.String())
	}
	if err := VerifyIgnition(out); err != nil {
		return nil, err
	}
	return out, nil
}

// VerifyIgnition parses cfg with Ignition's v3_4 package (any report
// entry is an error) and checks that the placeholder occurs exactly once.
func VerifyIgnition(cfg []byte) error {
	_, report, err := v3_4.Parse(cfg)
	if err != nil {
		return errs.Internal("render: output is not valid Ignition 3.4: %v: %s", err, report.String())
	}
	if len(report.Entries) > 0 {
		return errs.Internal("render: Ignition reported: %s", report.String())
	}
	if n := bytes.Count(cfg, []byte(AgentCredentialPlaceholder)); n != 1 {
		return errs.Internal("render: the credential placeholder occurs %d times, want exactly 1", n)
	}
	return nil
}

// Butane returns the Butane YAML for in (for debugging and the API's
// "show config"; Render translates it).
func Butane(in Input) ([]byte, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	cfg, err := build(in)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return nil, errs.Internal("render: marshalling butane: %v", err)
	}
	if err := enc.Close(); err != nil {
		return nil, errs.Internal("render: marshalling butane: %v", err)
	}
	return buf.Bytes(), nil
}

func build(in Input) (butaneConfig, error) {
	rev := in.Revision.Config.Normalize()
	version, _ := catalog.ParseVersion(rev.Kubernetes.Version)
	endpoint, err := cluster.JoinEndpoint(in.Join.APIEndpoint)
	if err != nil {
		return butaneConfig{}, errs.Invalid("join.api_endpoint", "%v", err)
	}
	sysextName, err := bootapi.SysextFile(version.String(), in.Options.SysextArch())
	if err != nil {
		return butaneConfig{}, errs.Invalid("revision.config.kubernetes.version", "%v", err)
	}

	joinYAML, err := joinConfiguration(in, rev, version, endpoint)
	if err != nil {
		return butaneConfig{}, err
	}

	c := butaneConfig{Variant: "flatcar", Version: "1.1.0"}
	if len(rev.SSHKeys) > 0 {
		c.Passwd = &butanePasswd{Users: []butaneUser{{Name: "core", SSHAuthorizedKeys: rev.SSHKeys}}}
	}
	files := &c.Storage.Files
	addFile := func(path string, mode int, r butaneResource) {
		*files = append(*files, butaneFile{Path: path, Mode: mode, Overwrite: true, Contents: r})
	}

	addFile(HostnamePath, 0o644, inline(hostnameFile(in.Machine)))
	addFile(RevisionPath, 0o644, inline(revisionFile(in.Machine)))
	for _, nf := range renderNetwork(rev.Network) {
		addFile(nf.Path, 0o644, inline(nf.Contents))
	}
	addFile("/etc/modules-load.d/anvil-kubernetes.conf", 0o644, inline("overlay\nbr_netfilter\n"))
	addFile("/etc/sysctl.d/anvil-kubernetes.conf", 0o644, inline(
		"net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\nnet.bridge.bridge-nf-call-ip6tables = 1\n"))
	addFile("/etc/containerd/config.toml", 0o644, inline(fmt.Sprintf(containerdConfig, pauseImage(version))))
	addFile(JoinConfigPath, 0o600, inline(joinYAML))
	addFile("/opt/extensions/kubernetes/"+sysextName, 0o644, source(in.Options.SysextURL, in.Options.SysextHash))
	c.Storage.Links = append(c.Storage.Links, butaneLink{
		Path: "/etc/extensions/kubernetes.raw", Target: "/opt/extensions/kubernetes/" + sysextName, Overwrite: true,
	})
	addFile(AgentBinaryPath, 0o755, source(in.Options.AgentURL, in.Options.AgentHash))
	// The agent's env file is a data URL we build ourselves, percent-
	// escaped: Butane would pick base64 when shorter, and the placeholder
	// must stay verbatim.
	addFile(AgentEnvPath, 0o600, source(agentEnvURL(in), ""))

	containerdDropin := "[Service]\nEnvironment=CONTAINERD_CONFIG=/etc/containerd/config.toml\n"
	if d := rev.CacheDisk; d != nil {
		c.Storage.Filesystems = append(c.Storage.Filesystems, butaneFilesystem{
			Device: d.Device, Format: d.Filesystem, Path: CacheMountPath, Label: cacheLabel,
			WipeFilesystem: d.Wipe, WithMountUnit: true,
		})
		containerdDropin = "[Unit]\nRequires=var-lib-containerd.mount\nAfter=var-lib-containerd.mount\n\n" + containerdDropin
	}

	c.Systemd.Units = []butaneUnit{
		{Name: "containerd.service", Enabled: ptr(true), Dropins: []butaneDropin{{Name: "10-anvil.conf", Contents: containerdDropin}}},
		{Name: JoinUnit, Enabled: ptr(true), Contents: joinUnit},
		{Name: AgentUnit, Enabled: ptr(true), Contents: agentUnit},
		// Machines boot from the network into RAM: there is no USR-B
		// partition to update, new Flatcar versions come as new revisions.
		{Name: "update-engine.service", Mask: true},
		{Name: "locksmithd.service", Mask: true},
	}
	return c, nil
}

// The contents of the files that differ from machine to machine: the
// template (template.go) leaves exactly these out, so they are built by
// these functions for a full render and for a specialisation alike.

func hostnameFile(m pool.MachineRevision) string { return m.Hostname + "\n" }

func revisionFile(m pool.MachineRevision) string { return m.ID + "\n" }

func agentEnvURL(in Input) string { return "data:," + dataurl.EscapeString(agentEnv(in)) }

func agentEnv(in Input) string {
	return "ANVIL_BOOT_URL=" + in.Options.BaseURL + "\n" +
		"ANVIL_MACHINE_REVISION=" + in.Machine.ID + "\n" +
		"ANVIL_AGENT_CREDENTIAL=" + AgentCredentialPlaceholder + "\n"
}

const agentUnit = `[Unit]
Description=anvil agent: heartbeats, reports, carries out instructions
Wants=network-online.target
After=network-online.target

[Service]
EnvironmentFile=/etc/anvil/agent.env
ExecStart=/opt/anvil/bin/anvil-agent
Restart=always
RestartSec=5s

[Install]
WantedBy=multi-user.target
`

const joinUnit = `[Unit]
Description=Join the Kubernetes cluster with kubeadm
Wants=network-online.target
After=network-online.target systemd-sysext.service containerd.service
Requires=containerd.service
ConditionPathExists=!/etc/kubernetes/kubelet.conf

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/kubeadm join --config /etc/kubeadm/join.yaml

[Install]
WantedBy=multi-user.target
`

// containerdConfig uses the version 2 format, which containerd 1.6 and 1.7
// read and 2.x migrates; the systemd cgroup driver matches kubeadm's
// default. %s is the sandbox (pause) image: containerd's own default
// differs from what kubeadm expects, and kubeadm warns on a mismatch.
const containerdConfig = `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "%s"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
`

// Kubelet flags anvil always sets. Flatcar's /usr is read-only, so the
// flexvolume plugin directory moves to /opt.
var defaultKubeletArgs = map[string]string{
	"volume-plugin-dir": "/opt/libexec/kubernetes/kubelet-plugins/volume/exec/",
}

type kubeadmArg struct {
	Name  string `yaml:"name" json:"name"`
	Value string `yaml:"value" json:"value"`
}

type kubeadmTaint struct {
	Key    string `yaml:"key"`
	Value  string `yaml:"value,omitempty"`
	Effect string `yaml:"effect"`
}

// joinConfiguration writes kubeadm's JoinConfiguration: v1beta4 from
// Kubernetes 1.31 on, v1beta3 before (kubelet args are a list in one and a
// map in the other).
func joinConfiguration(in Input, rev pool.Config, version catalog.Version, endpoint string) (string, error) {
	args := map[string]string{}
	for k, v := range defaultKubeletArgs {
		args[k] = v
	}
	for k, v := range rev.KubeletExtraArgs {
		args[k] = v
	}
	labels := in.Machine.NodeLabels(pool.Revision{Config: rev})
	if len(labels) > 0 {
		pairs := make([]string, 0, len(labels))
		for k, v := range labels {
			pairs = append(pairs, k+"="+v)
		}
		slices.Sort(pairs)
		args["node-labels"] = strings.Join(pairs, ",")
	}
	names := make([]string, 0, len(args))
	for k := range args {
		names = append(names, k)
	}
	slices.Sort(names)

	taints := make([]kubeadmTaint, 0, len(rev.Taints))
	for _, t := range rev.Taints {
		taints = append(taints, kubeadmTaint(t))
	}

	v1beta4 := version.Compare(catalog.Version{Major: 1, Minor: 31}) >= 0
	nodeReg := map[string]any{
		"name":      in.Machine.Hostname,
		"criSocket": "unix:///run/containerd/containerd.sock",
		"taints":    taints, // an empty list registers no taints
	}
	if v1beta4 {
		list := make([]kubeadmArg, 0, len(names))
		for _, n := range names {
			list = append(list, kubeadmArg{Name: n, Value: args[n]})
		}
		nodeReg["kubeletExtraArgs"] = list
	} else {
		nodeReg["kubeletExtraArgs"] = args
	}
	apiVersion := "kubeadm.k8s.io/v1beta3"
	if v1beta4 {
		apiVersion = "kubeadm.k8s.io/v1beta4"
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	err := enc.Encode(map[string]any{
		"apiVersion": apiVersion,
		"kind":       "JoinConfiguration",
		"discovery": map[string]any{
			"bootstrapToken": map[string]any{
				"apiServerEndpoint": endpoint,
				"token":             in.Join.BootstrapToken.Reveal(),
				"caCertHashes":      []string{strings.ToLower(in.Join.CACertHash)},
			},
		},
		"nodeRegistration": nodeReg,
	})
	if err == nil {
		err = enc.Close()
	}
	if err != nil {
		return "", errs.Internal("render: join configuration: %v", err)
	}
	return buf.String(), nil
}

// PreviewHostname is the hostname of the stand-in machine that Preview
// renders.
const PreviewHostname = "preview"

// Preview builds the input for a pool revision as a machine without labels
// of its own would boot it; render two previews to diff two revisions.
func Preview(poolName string, rev pool.Revision, join cluster.Join, opts Options) (Input, error) {
	m, err := pool.NewMachineRevision(poolName, rev, pool.MachineSettings{Hostname: PreviewHostname})
	if err != nil {
		return Input{}, err
	}
	return Input{Machine: m, Revision: rev, Join: join, Options: opts}, nil
}

// pauseImage is the sandbox image kubeadm of that Kubernetes minor expects
// (its constants.PauseVersion).
func pauseImage(v catalog.Version) string {
	tag := "3.9"
	switch {
	case v.Compare(catalog.Version{Major: 1, Minor: 36}) >= 0:
		tag = "3.10.2"
	case v.Compare(catalog.Version{Major: 1, Minor: 34}) >= 0:
		tag = "3.10.1"
	case v.Compare(catalog.Version{Major: 1, Minor: 31}) >= 0:
		tag = "3.10"
	}
	return "registry.k8s.io/pause:" + tag
}
