package charttest

import (
	"os"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
)

// TestDump writes the rendered manifests of every value set to $CHARTTEST_DUMP/<set>.yaml, for
// reading them; it is skipped unless that variable is set.
func TestDump(t *testing.T) {
	dir := os.Getenv("CHARTTEST_DUMP")
	if dir == "" {
		t.Skip("set CHARTTEST_DUMP=<dir> to write the rendered manifests")
	}
	ch := loadChart(t)
	for _, vs := range valueSets {
		inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
		inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
		inst.ReleaseName, inst.Namespace = "anvil", "anvil"
		inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.1", Major: "1", Minor: "37"}
		rel, err := inst.Run(ch, vs.parse(t))
		if err != nil {
			t.Fatalf("%s: %v", vs.name, err)
		}
		if err := os.WriteFile(dir+"/"+vs.name+".yaml", []byte(rel.Manifest+"\n---\n# NOTES\n"+rel.Info.Notes), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
