package client_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"

	// The generated client's runtime: imported so that this module pins
	// its version (and the module cache holds it) for the build below.
	_ "github.com/oapi-codegen/runtime"

	"github.com/anvil-fleet/anvil/client"
)

// TestGeneratedClient generates a Go client from the document the gateway
// serves with oapi-codegen (as a library), builds it in a module of its
// own with the module versions this one pins, and runs it against the
// stack: the document is one a generator takes as it is.
func TestGeneratedClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: not with -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newOrg(t, "gen")
	for i := range 3 {
		if _, err := c.PreregisterMachine(ctx, client.MachinePreregister{UUID: uuidN(100 + i), Hostname: fmt.Sprintf("g%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := c.OpenAPI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("the document does not load: %v", err)
	}
	src, err := codegen.Generate(spec, codegen.Configuration{PackageName: "anvilapi",
		Generate: codegen.GenerateOptions{Client: true, Models: true}})
	if err != nil {
		t.Fatalf("oapi-codegen: %v", err)
	}

	dir := t.TempDir()
	runtimeVersion := moduleVersion(t, goBin, "github.com/oapi-codegen/runtime")
	write(t, filepath.Join(dir, "go.mod"), "module example.com/anvilgen\n\ngo 1.26.0\n\nrequire github.com/oapi-codegen/runtime "+runtimeVersion+"\n")
	// The checksums of what this module already fetched.
	var sums bytes.Buffer
	for _, f := range []string{"go.sum", "../go.work.sum"} {
		b, _ := os.ReadFile(f)
		sums.Write(b)
	}
	write(t, filepath.Join(dir, "go.sum"), sums.String())
	write(t, filepath.Join(dir, "anvilapi", "anvilapi.gen.go"), src)
	write(t, filepath.Join(dir, "main.go"), generatedMain)

	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0")
	for _, args := range [][]string{{"vet", "./..."}, {"build", "-o", filepath.Join(dir, "anvilgen"), "."}} {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s of the generated client: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "anvilgen"), gateway, adminToken, "gen")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the generated client: %v\n%s", err, out)
	}
	if want := "machines=2 next=true preregistered=3 version=true\n"; string(out) != want {
		t.Fatalf("the generated client printed %q, want %q", out, want)
	}
}

// generatedMain calls the API with the generated client: a page of
// machines, all machines of a status (an enum parameter), the version.
const generatedMain = `package main

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"example.com/anvilgen/anvilapi"
)

func main() {
	base, token, org := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	c, err := anvilapi.NewClientWithResponses(base, anvilapi.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		fail(err)
	}
	limit := 2
	page, err := c.ListMachinesWithResponse(ctx, org, &anvilapi.ListMachinesParams{Limit: &limit})
	if err != nil || page.JSON200 == nil {
		fail(fmt.Errorf("list machines: %v %s", err, page.Body))
	}
	status := anvilapi.MachineStatusPreregistered
	n := 0
	for cursor := ""; ; {
		p := &anvilapi.ListMachinesParams{Status: &status}
		if cursor != "" {
			p.Cursor = &cursor
		}
		res, err := c.ListMachinesWithResponse(ctx, org, p)
		if err != nil || res.JSON200 == nil {
			fail(fmt.Errorf("list machines: %v %s", err, res.Body))
		}
		n += len(res.JSON200.Items)
		if res.JSON200.Next == nil || *res.JSON200.Next == "" {
			break
		}
		cursor = *res.JSON200.Next
	}
	v, err := c.GetVersionWithResponse(ctx)
	if err != nil || v.JSON200 == nil {
		fail(fmt.Errorf("version: %v", err))
	}
	fmt.Printf("machines=%d next=%t preregistered=%d version=%t\n", len(page.JSON200.Items), page.JSON200.Next != nil && *page.JSON200.Next != "",
		n, v.JSON200.Version != "" && v.JSON200.GoVersion != "")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
`

// moduleVersion is the version of a module this one builds with.
func moduleVersion(t *testing.T, goBin, path string) string {
	t.Helper()
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{.Version}}", path).Output()
	v := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(v, "v") {
		t.Fatalf("go list -m %s: %q %v", path, v, err)
	}
	return v
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
