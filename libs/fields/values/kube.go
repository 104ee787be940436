package values

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// KubeVersion is a full Kubernetes version x.y.z.
type KubeVersion struct{ Major, Minor, Patch int }

// KubeMinor is a Kubernetes minor version x.y, the part a user chooses.
type KubeMinor struct{ Major, Minor int }

func (v KubeVersion) String() string     { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }
func (v KubeVersion) IsZero() bool       { return v == KubeVersion{} }
func (v KubeVersion) MinorOf() KubeMinor { return KubeMinor{v.Major, v.Minor} }
func (m KubeMinor) String() string       { return fmt.Sprintf("%d.%d", m.Major, m.Minor) }

// Compare orders versions: -1, 0 or +1.
func (v KubeVersion) Compare(o KubeVersion) int {
	if c := v.MinorOf().Compare(o.MinorOf()); c != 0 {
		return c
	}
	switch {
	case v.Patch < o.Patch:
		return -1
	case v.Patch > o.Patch:
		return 1
	}
	return 0
}

// Compare orders minors: -1, 0 or +1.
func (m KubeMinor) Compare(o KubeMinor) int {
	switch {
	case m.Major != o.Major:
		if m.Major < o.Major {
			return -1
		}
		return 1
	case m.Minor < o.Minor:
		return -1
	case m.Minor > o.Minor:
		return 1
	}
	return 0
}

// ParseKubeVersion reads "1.33.4" (a leading "v" is accepted).
func ParseKubeVersion(s string) (KubeVersion, error) {
	n, err := parseNums(s, 3)
	if err != nil {
		return KubeVersion{}, fmt.Errorf("%q is not a Kubernetes version of the form x.y.z: %w", s, err)
	}
	return KubeVersion{n[0], n[1], n[2]}, nil
}

// ParseKubeMinor reads "1.33" (a leading "v" is accepted).
func ParseKubeMinor(s string) (KubeMinor, error) {
	n, err := parseNums(s, 2)
	if err != nil {
		return KubeMinor{}, fmt.Errorf("%q is not a Kubernetes minor version of the form x.y: %w", s, err)
	}
	return KubeMinor{n[0], n[1]}, nil
}

func parseNums(s string, want int) ([]int, error) {
	s = strings.TrimPrefix(s, "v")
	parts := strings.Split(s, ".")
	if len(parts) != want {
		return nil, fmt.Errorf("want %d dot-separated numbers", want)
	}
	out := make([]int, want)
	for i, p := range parts {
		// No leading zeros or signs, so that each version has one spelling.
		if p == "" || len(p) > 6 || (len(p) > 1 && p[0] == '0') || strings.TrimLeft(p, "0123456789") != "" {
			return nil, errors.New("each part must be a number without leading zeros")
		}
		out[i], _ = strconv.Atoi(p)
	}
	return out, nil
}

// MaxKubeletMinorsBehind is how many minors a kubelet may trail the control
// plane (Kubernetes' skew policy since 1.28).
const MaxKubeletMinorsBehind = 3

// CheckKubeletSkew applies the version skew policy to a kubelet and its
// control plane: the kubelet is never newer than the control plane
// (compared on the full version, so the control plane is upgraded first
// even for a patch), and at most three minors older. The error states
// both versions.
func CheckKubeletSkew(controlPlane, kubelet KubeVersion) error {
	if kubelet.Compare(controlPlane) > 0 {
		return fmt.Errorf("kubelet %s would be newer than the control plane %s; upgrade the control plane first", kubelet, controlPlane)
	}
	if kubelet.Major != controlPlane.Major || controlPlane.Minor-kubelet.Minor > MaxKubeletMinorsBehind {
		return fmt.Errorf("kubelet %s would be more than %d minor versions older than the control plane %s", kubelet, MaxKubeletMinorsBehind, controlPlane)
	}
	return nil
}
