package svc

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func TestEnvParsersRecordMalformedValues(t *testing.T) {
	cases := []struct {
		name, value string
		read        func() any
		want        any
		complaint   string
	}{
		{"ANVIL_T_DURATION", "5minutes", func() any { return EnvDuration("ANVIL_T_DURATION", time.Minute) }, time.Minute, "Go duration"},
		{"ANVIL_T_INT", "three", func() any { return EnvInt("ANVIL_T_INT", 1) }, 1, "integer"},
		{"ANVIL_T_FLOAT", "fast", func() any { return EnvFloat("ANVIL_T_FLOAT", 2.5) }, 2.5, "number"},
		{"ANVIL_T_BOOL", "yes please", func() any { return EnvBool("ANVIL_T_BOOL", false) }, false, "true or false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ResetConfigErrors()
			t.Cleanup(ResetConfigErrors)
			t.Setenv(c.name, c.value)
			if got := c.read(); got != c.want {
				t.Fatalf("got %v, want the default %v while the program is stopped", got, c.want)
			}
			err := ConfigError()
			if err == nil || !strings.Contains(err.Error(), c.name) || !strings.Contains(err.Error(), c.complaint) || !strings.Contains(err.Error(), c.value) {
				t.Fatalf("ConfigError() = %v, want it to name %s, its value and %q", err, c.name, c.complaint)
			}
		})
	}
}

func TestEnvParsersAcceptWellFormedValues(t *testing.T) {
	ResetConfigErrors()
	t.Cleanup(ResetConfigErrors)
	t.Setenv("ANVIL_T_DURATION", " 90s ")
	t.Setenv("ANVIL_T_INT", "3")
	t.Setenv("ANVIL_T_BOOL", "true")
	if d := EnvDuration("ANVIL_T_DURATION", 0); d != 90*time.Second {
		t.Fatalf("duration %s", d)
	}
	if n := EnvInt("ANVIL_T_INT", 0); n != 3 {
		t.Fatalf("int %d", n)
	}
	if !EnvBool("ANVIL_T_BOOL", false) {
		t.Fatal("bool false")
	}
	if d := EnvDuration("ANVIL_T_UNSET", time.Hour); d != time.Hour {
		t.Fatalf("unset: %s", d)
	}
	t.Setenv("ANVIL_T_EMPTY", "")
	if d := EnvDuration("ANVIL_T_EMPTY", time.Hour); d != time.Hour {
		t.Fatalf("set but empty: %s, want the default", d)
	}
	if err := ConfigError(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckConfig(t *testing.T) {
	ResetConfigErrors()
	t.Cleanup(ResetConfigErrors)
	t.Setenv("ANVIL_STREAM_REPLICAS", "three")
	t.Setenv("ANVIL_LOG_FORMAT", "yaml")
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs, "registry", "")
	if err := fs.Parse([]string{"--log-level", "loud", "extra"}); err != nil {
		t.Fatal(err)
	}
	err := CheckConfig(fs, c.Validate)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`ANVIL_STREAM_REPLICAS="three"`, `--log-level (env ANVIL_LOG_LEVEL) = "loud"`, `--log-format (env ANVIL_LOG_FORMAT) = "yaml"`, `unexpected argument "extra"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}

	ResetConfigErrors()
	t.Setenv("ANVIL_STREAM_REPLICAS", "7")
	t.Setenv("ANVIL_LOG_FORMAT", "text")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs, "registry", "")
	_ = fs.Parse(nil)
	if err := CheckConfig(fs, c.Validate); err == nil || !strings.Contains(err.Error(), "must be 1 to 5") {
		t.Fatalf("replicas 7: %v", err)
	}
	t.Setenv("ANVIL_STREAM_REPLICAS", "3")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs, "registry", "")
	_ = fs.Parse(nil)
	if err := CheckConfig(fs, c.Validate); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
}

// TestListenAddressesAndReplicasAreCheckedUpFront: a listen address that
// cannot be bound and zero stream replicas stop the program with the
// settings read, naming the variable, not at bind time after connecting.
func TestListenAddressesAndReplicasAreCheckedUpFront(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9101": true, ":8080": true, "[::1]:0": true, "localhost:65535": true,
		"garbage": false, "127.0.0.1": false, "127.0.0.1:http": false, ":65536": false, "host:": false,
	} {
		if err := CheckListenAddr(addr); (err == nil) != ok {
			t.Errorf("CheckListenAddr(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	ResetConfigErrors()
	t.Cleanup(ResetConfigErrors)
	t.Setenv("ANVIL_STREAM_REPLICAS", "0")
	t.Setenv("ANVIL_REGISTRY_ADMIN_ADDR", "garbage")
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs, "registry", "")
	_ = fs.Parse(nil)
	err := CheckConfig(fs, c.Validate)
	for _, want := range []string{"--stream-replicas (env ANVIL_STREAM_REPLICAS) = 0: must be 1 to 5", `--admin-addr (env ANVIL_REGISTRY_ADMIN_ADDR) = "garbage": must be host:port`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %s", err, want)
		}
	}
}
