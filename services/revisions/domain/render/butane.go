package render

// The subset of the Butane flatcar 1.1.0 schema that anvil writes. It is
// our own struct, with omitempty, so that the YAML we hand to Butane is
// small and readable; Butane's strict parse (unknown keys are errors)
// catches any drift from its schema.

type butaneConfig struct {
	Variant string        `yaml:"variant"`
	Version string        `yaml:"version"`
	Passwd  *butanePasswd `yaml:"passwd,omitempty"`
	Storage butaneStorage `yaml:"storage"`
	Systemd butaneSystemd `yaml:"systemd"`
}

type butanePasswd struct {
	Users []butaneUser `yaml:"users"`
}

type butaneUser struct {
	Name              string   `yaml:"name"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys,omitempty"`
}

type butaneStorage struct {
	Filesystems []butaneFilesystem `yaml:"filesystems,omitempty"`
	Directories []butaneDirectory  `yaml:"directories,omitempty"`
	Files       []butaneFile       `yaml:"files,omitempty"`
	Links       []butaneLink       `yaml:"links,omitempty"`
}

type butaneFilesystem struct {
	Device         string `yaml:"device"`
	Format         string `yaml:"format"`
	Path           string `yaml:"path"`
	Label          string `yaml:"label,omitempty"`
	WipeFilesystem bool   `yaml:"wipe_filesystem"`
	WithMountUnit  bool   `yaml:"with_mount_unit"`
}

type butaneDirectory struct {
	Path string `yaml:"path"`
	Mode int    `yaml:"mode"`
}

type butaneFile struct {
	Path      string         `yaml:"path"`
	Mode      int            `yaml:"mode"`
	Overwrite bool           `yaml:"overwrite"`
	Contents  butaneResource `yaml:"contents"`
}

type butaneResource struct {
	Inline       *string             `yaml:"inline,omitempty"`
	Source       *string             `yaml:"source,omitempty"`
	Verification *butaneVerification `yaml:"verification,omitempty"`
}

type butaneVerification struct {
	Hash string `yaml:"hash"`
}

type butaneLink struct {
	Path      string `yaml:"path"`
	Target    string `yaml:"target"`
	Hard      bool   `yaml:"hard"`
	Overwrite bool   `yaml:"overwrite"`
}

type butaneSystemd struct {
	Units []butaneUnit `yaml:"units,omitempty"`
}

type butaneUnit struct {
	Name     string         `yaml:"name"`
	Enabled  *bool          `yaml:"enabled,omitempty"`
	Mask     bool           `yaml:"mask,omitempty"`
	Contents string         `yaml:"contents,omitempty"`
	Dropins  []butaneDropin `yaml:"dropins,omitempty"`
}

type butaneDropin struct {
	Name     string `yaml:"name"`
	Contents string `yaml:"contents"`
}

func inline(s string) butaneResource { return butaneResource{Inline: &s} }

func source(url, hash string) butaneResource {
	r := butaneResource{Source: &url}
	if hash != "" {
		r.Verification = &butaneVerification{Hash: hash}
	}
	return r
}

func ptr[T any](v T) *T { return &v }
