package app

import (
	"context"
	"strings"
	"testing"

	"github.com/anvil-fleet/anvil/libs/events/errs"
	bootapi "github.com/anvil-fleet/anvil/services/boot/api"
	"github.com/anvil-fleet/anvil/services/revisions/domain/pool"
	"github.com/anvil-fleet/anvil/services/revisions/domain/render"
)

// answers is a table of canned resolve answers: the mapping from the boot
// service's answer to render options and errors is pure logic (the real
// resolver over NATS is tested in the service's tests).
type answers map[string]bootapi.Asset

func (a answers) ResolveAssets(_ context.Context, names []string) ([]bootapi.Asset, error) {
	out := make([]bootapi.Asset, len(names))
	for i, n := range names {
		as, ok := a[n]
		if !ok {
			return nil, errs.Unavailable("no service answers %s", bootapi.SubjectAssetsResolve)
		}
		as.Name, as.Path = n, "/"+n
		out[i] = as
	}
	return out, nil
}

func TestRenderOptionsFromAssets(t *testing.T) {
	const agent, sysext = "assets/anvil-agent-linux-amd64", "sysext/kubernetes-v1.33.4-x86-64.raw"
	h := "sha512-" + strings.Repeat("1", 128)
	rev := pool.Revision{Number: 1, Config: pool.Config{Kubernetes: pool.Kubernetes{Minor: "1.33", Version: "1.33.4"}}}
	mk := func(a answers, s AssetSettings) *App {
		return &App{Assets: a, AssetSettings: s, RenderOptions: render.Options{BaseURL: "http://boot:8081"}}
	}
	ready := bootapi.Asset{Status: bootapi.AssetReady, Hash: h}

	// No URL from the boot service: under the configured boot URL.
	o, err := mk(answers{agent: ready, sysext: ready}, AssetSettings{BootURL: "http://boot:8081/"}).renderOptions(context.Background(), rev)
	if err != nil || o.AgentURL != "http://boot:8081/"+agent || o.SysextURL != "http://boot:8081/"+sysext || o.AgentHash != h || o.SysextHash != h || o.Arch != "x86-64" {
		t.Errorf("%+v %v", o, err)
	}
	// Its own URL wins.
	withURL := ready
	withURL.URL = "http://public:8081/" + sysext
	if o, _ := mk(answers{agent: ready, sysext: withURL}, AssetSettings{BootURL: "http://boot:8081"}).renderOptions(context.Background(), rev); o.SysextURL != withURL.URL {
		t.Errorf("sysext URL %s", o.SysextURL)
	}
	for name, c := range map[string]struct {
		a     answers
		kind  errs.Kind
		field string
	}{
		"sysext missing": {answers{agent: ready, sysext: {Status: bootapi.AssetMissing, Reason: "no sysext"}}, errs.KindValidation, "kubernetes.version"},
		"sysext pending": {answers{agent: ready, sysext: {Status: bootapi.AssetPending, Reason: "fetching"}}, errs.KindUnavailable, ""},
		"agent missing":  {answers{sysext: ready, agent: {Status: bootapi.AssetMissing, Reason: "make assets"}}, errs.KindConflict, ""},
		"boot down":      {answers{}, errs.KindUnavailable, ""},
	} {
		_, err := mk(c.a, AssetSettings{BootURL: "http://boot:8081"}).renderOptions(context.Background(), rev)
		e := errs.As(err)
		if e.Kind != c.kind || c.field != "" && (len(e.Fields) != 1 || e.Fields[0].Field != c.field) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// An agent elsewhere is not asked for.
	o, err = mk(answers{sysext: ready}, AssetSettings{BootURL: "http://boot:8081", AgentURL: "https://a/agent", AgentHash: h}).renderOptions(context.Background(), rev)
	if err != nil || o.AgentURL != "https://a/agent" {
		t.Errorf("agent elsewhere: %+v %v", o, err)
	}
}
