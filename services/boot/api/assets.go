package api

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/anvil-fleet/anvil/libs/events/command"
)

// The files a rendered Ignition config makes a machine fetch live in the
// boot service's assets directory (--assets-dir / ANVIL_BOOT_ASSETS_DIR)
// and are served under the same path by its HTTP listener. An asset's name
// is that path, relative, with forward slashes:
//
//	assets/anvil-agent-linux-<goarch>                 the agent (amd64, arm64)
//	sysext/kubernetes-v<x.y.z>-<arch>.raw             a Kubernetes sysext (x86-64, arm64)
//	flatcar/<channel>/<version>/<file>                a Flatcar image of a local mirror
//
// The naming functions below are the only place these names are spelled,
// so that the revisions service (which renders the URLs) and the boot
// service (which serves the files) cannot disagree.

// SubjectAssetsResolve answers a ResolveAssetsRequest with a
// ResolveAssetsReply: for each asset named, its URL, hash and size, or why
// the boot service does not have it.
const SubjectAssetsResolve = "cmd.boot.assets.resolve"

// MaxResolveNames bounds the names of one ResolveAssetsRequest.
const MaxResolveNames = 64

// Asset kinds, the first segment of a name.
const (
	KindAgent   = "agent"
	KindSysext  = "sysext"
	KindFlatcar = "flatcar"
)

// Directories of the assets directory, one per kind.
const (
	AgentDir   = "assets"
	SysextDir  = "sysext"
	FlatcarDir = "flatcar"
)

// AgentArches are the Go architectures the agent is built for.
var AgentArches = []string{"amd64", "arm64"}

// sysextArches maps a Go architecture to the name Flatcar's sysext-bakery
// gives it in image names.
var sysextArches = map[string]string{"amd64": "x86-64", "arm64": "arm64"}

// SysextArch returns the sysext-bakery name of a Go architecture (amd64 is
// x86-64).
func SysextArch(goarch string) (string, error) {
	if a, ok := sysextArches[goarch]; ok {
		return a, nil
	}
	return "", fmt.Errorf("architecture %q: want one of amd64, arm64", goarch)
}

// GoArch returns the Go architecture of a sysext-bakery architecture name.
func GoArch(sysextArch string) (string, error) {
	for g, s := range sysextArches {
		if s == sysextArch {
			return g, nil
		}
	}
	return "", fmt.Errorf("sysext architecture %q: want x86-64 or arm64", sysextArch)
}

// AgentFile is the agent binary's file name for a Go architecture:
// anvil-agent-linux-amd64.
func AgentFile(goarch string) (string, error) {
	if _, err := SysextArch(goarch); err != nil {
		return "", err
	}
	return "anvil-agent-linux-" + goarch, nil
}

// AgentAsset is the agent binary's asset name: assets/anvil-agent-linux-amd64.
func AgentAsset(goarch string) (string, error) {
	f, err := AgentFile(goarch)
	if err != nil {
		return "", err
	}
	return AgentDir + "/" + f, nil
}

var versionRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$`)

// SysextFile is a Kubernetes sysext image's file name as Flatcar's
// sysext-bakery names it: kubernetes-v1.33.4-x86-64.raw. version is x.y.z
// (without "v"); arch is x86-64 or arm64.
func SysextFile(version, arch string) (string, error) {
	if !versionRe.MatchString(version) {
		return "", fmt.Errorf("version %q of Kubernetes: want x.y.z", version)
	}
	if _, err := GoArch(arch); err != nil {
		return "", err
	}
	return "kubernetes-v" + version + "-" + arch + ".raw", nil
}

// SysextAsset is a Kubernetes sysext's asset name:
// sysext/kubernetes-v1.33.4-x86-64.raw.
func SysextAsset(version, arch string) (string, error) {
	f, err := SysextFile(version, arch)
	if err != nil {
		return "", err
	}
	return SysextDir + "/" + f, nil
}

// segmentRe is a safe path segment: no dot files, no "..", nothing a URL
// or a shell would need to quote.
var segmentRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// FlatcarAsset is a file of a local Flatcar mirror:
// flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz.
func FlatcarAsset(channel, version, file string) (string, error) {
	for _, s := range []string{channel, version, file} {
		if !segmentRe.MatchString(s) {
			return "", fmt.Errorf("flatcar asset segment %q: want letters, digits, '.', '_' or '-', not starting with '.'", s)
		}
	}
	return FlatcarDir + "/" + channel + "/" + version + "/" + file, nil
}

var (
	agentNameRe  = regexp.MustCompile(`^assets/anvil-agent-linux-([a-z0-9]+)$`)
	sysextNameRe = regexp.MustCompile(`^sysext/kubernetes-v([0-9.]+)-(x86-64|arm64)\.raw$`)
)

// AssetRef is a parsed asset name.
type AssetRef struct {
	Name string // as given
	Kind string // KindAgent, KindSysext, KindFlatcar
	// GoArch (agent), Version and Arch (sysext, Arch in the bakery's
	// spelling), or Channel, Version and File (flatcar).
	GoArch, Version, Arch, Channel, File string
}

// ParseAsset checks that name is one of the asset names above and takes it
// apart. Anything else, including every path that could leave the assets
// directory, is an error.
func ParseAsset(name string) (AssetRef, error) {
	if len(name) > 512 {
		return AssetRef{}, fmt.Errorf("asset name is longer than 512 bytes")
	}
	r := AssetRef{Name: name}
	switch {
	case strings.HasPrefix(name, AgentDir+"/"):
		m := agentNameRe.FindStringSubmatch(name)
		if m == nil {
			return AssetRef{}, fmt.Errorf("asset %q: the agent is %s/anvil-agent-linux-<amd64|arm64>", name, AgentDir)
		}
		if _, err := SysextArch(m[1]); err != nil {
			return AssetRef{}, fmt.Errorf("asset %q: %v", name, err)
		}
		r.Kind, r.GoArch = KindAgent, m[1]
	case strings.HasPrefix(name, SysextDir+"/"):
		m := sysextNameRe.FindStringSubmatch(name)
		if m == nil || !versionRe.MatchString(m[1]) {
			return AssetRef{}, fmt.Errorf("asset %q: a Kubernetes sysext is %s/kubernetes-v<x.y.z>-<x86-64|arm64>.raw", name, SysextDir)
		}
		r.Kind, r.Version, r.Arch = KindSysext, m[1], m[2]
		r.GoArch, _ = GoArch(m[2])
	case strings.HasPrefix(name, FlatcarDir+"/"):
		parts := strings.Split(name, "/")
		if len(parts) != 4 {
			return AssetRef{}, fmt.Errorf("asset %q: a Flatcar image is %s/<channel>/<version>/<file>", name, FlatcarDir)
		}
		if _, err := FlatcarAsset(parts[1], parts[2], parts[3]); err != nil {
			return AssetRef{}, fmt.Errorf("asset %q: %v", name, err)
		}
		r.Kind, r.Channel, r.Version, r.File = KindFlatcar, parts[1], parts[2], parts[3]
	default:
		return AssetRef{}, fmt.Errorf("asset %q: names start with %s/, %s/ or %s/", name, AgentDir, SysextDir, FlatcarDir)
	}
	return r, nil
}

// ResolveAssetsRequest names the assets a render needs.
type ResolveAssetsRequest struct {
	Names []string `json:"names"`
}

// AssetStatus says whether the boot service can serve an asset.
type AssetStatus string

const (
	// AssetReady: the file is there; URL, Hash and Size are set.
	AssetReady AssetStatus = "ready"
	// AssetMissing: the boot service does not have it; Reason says what to
	// do about it.
	AssetMissing AssetStatus = "missing"
	// AssetPending: the boot service is fetching it from its sysext mirror
	// (ANVIL_BOOT_SYSEXT_MIRROR); asking again shortly will find it, or
	// find why the download failed.
	AssetPending AssetStatus = "pending"
)

// Asset is what the boot service knows of one asset.
type Asset struct {
	Name   string      `json:"name"`
	Status AssetStatus `json:"status"`
	// Path is where the boot service serves it: "/" + Name.
	Path string `json:"path"`
	// URL is Path under the boot service's public URL; empty when the boot
	// service has no --public-url (it then takes each request's Host), in
	// which case the caller puts Path under its own idea of that URL.
	URL string `json:"url,omitempty"`
	// Hash is Ignition's verification hash of the file: sha512-<hex>.
	Hash string `json:"hash,omitempty"`
	Size int64  `json:"size,omitempty"`
	// Reason, for a missing or pending asset, says why and what to do, for
	// a person.
	Reason string `json:"reason,omitempty"`
}

// ResolveAssetsReply answers each name of the request, in its order.
type ResolveAssetsReply struct {
	Assets []Asset `json:"assets"`
}

// ResolveAssets asks the boot service about the assets a render needs. A
// name that is not an asset name is errs.KindValidation; the boot service
// not answering is errs.KindUnavailable.
func ResolveAssets(ctx context.Context, nc *nats.Conn, r ResolveAssetsRequest) (ResolveAssetsReply, error) {
	return command.Call[ResolveAssetsRequest, ResolveAssetsReply](ctx, nc, SubjectAssetsResolve, r)
}
