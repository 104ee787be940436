package ipxe

import (
	"strings"
	"testing"
	"time"
)

const (
	uuid  = "4c4c4544-0035-4b10-8056-b7c04f4e3532"
	token = "anvil_enroll_abcdefghijklmnop_0123456789abcdefghijklmnopqrstuvwxyz234567abcdefghij"
	base  = "http://boot.example:8081"
)

func TestParseMachineQuery(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		reason    Reason // "" means accepted
		want      MachineQuery
	}{
		{"ipxe", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token, "",
			MachineQuery{UUID: uuid, MAC: "52:54:00:12:34:56", Token: token}},
		{"upper case and colons, attempt", "uuid=4C4C4544-0035-4B10-8056-B7C04F4E3532&mac=52:54:00:AB:CD:EF&token=" + token + "&attempt=7", "",
			MachineQuery{UUID: uuid, MAC: "52:54:00:ab:cd:ef", Token: token, Attempt: 7}},
		{"unknown parameters are ignored", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&arch=x86_64", "",
			MachineQuery{UUID: uuid, MAC: "52:54:00:12:34:56", Token: token}},
		{"attempt capped", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&attempt=999999999999", "",
			MachineQuery{UUID: uuid, MAC: "52:54:00:12:34:56", Token: token, Attempt: MaxAttempt}},
		{"negative attempt", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&attempt=-3", "",
			MachineQuery{UUID: uuid, MAC: "52:54:00:12:34:56", Token: token}},
		{"empty", "", ReasonTokenMissing, MachineQuery{}},
		{"no token", "uuid=" + uuid + "&mac=52-54-00-12-34-56", ReasonTokenMissing, MachineQuery{}},
		{"token with a dollar", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=a%24%7Bpassword%7D", ReasonTokenMalformed, MachineQuery{Token: "a${password}"}},
		{"token too long", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + strings.Repeat("a", MaxTokenLen+1), ReasonTokenMalformed, MachineQuery{}},
		{"token twice", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=a&token=b", ReasonBadQuery, MachineQuery{}},
		{"bad escape", "uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&x=%zz", ReasonBadQuery, MachineQuery{Token: token}},
		{"missing uuid (firmware without ${uuid})", "mac=52-54-00-12-34-56&token=" + token, ReasonUUIDInvalid, MachineQuery{Token: token}},
		{"template not expanded", "uuid=${uuid}&mac=52-54-00-12-34-56&token=" + token, ReasonUUIDInvalid, MachineQuery{Token: token}},
		{"nil uuid", "uuid=00000000-0000-0000-0000-000000000000&mac=52-54-00-12-34-56&token=" + token, ReasonUUIDInvalid, MachineQuery{Token: token}},
		{"all-F uuid", "uuid=FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF&mac=52-54-00-12-34-56&token=" + token, ReasonUUIDInvalid, MachineQuery{Token: token}},
		{"braced uuid", "uuid={" + uuid[:34] + "}&mac=52-54-00-12-34-56&token=" + token, ReasonUUIDInvalid, MachineQuery{Token: token}},
		{"no mac", "uuid=" + uuid + "&token=" + token, ReasonMACInvalid, MachineQuery{Token: token}},
		{"zero mac", "uuid=" + uuid + "&mac=00-00-00-00-00-00&token=" + token, ReasonMACInvalid, MachineQuery{Token: token}},
		{"mixed separators", "uuid=" + uuid + "&mac=52-54:00-12-34-56&token=" + token, ReasonMACInvalid, MachineQuery{Token: token}},
		{"EUI-64", "uuid=" + uuid + "&mac=52-54-00-12-34-56-78-9a&token=" + token, ReasonMACInvalid, MachineQuery{Token: token}},
		{"oversized", "uuid=" + uuid + "&token=" + token + "&pad=" + strings.Repeat("x", MaxQueryLen), ReasonQueryTooLong, MachineQuery{}},
	} {
		got, ref := ParseMachineQuery(tc.raw)
		switch {
		case tc.reason == "" && ref != nil:
			t.Errorf("%s: refused: %v", tc.name, ref)
		case tc.reason != "" && (ref == nil || ref.Reason != tc.reason):
			t.Errorf("%s: got %v, want reason %s", tc.name, ref, tc.reason)
		case got != tc.want:
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseChainQuery(t *testing.T) {
	for _, tc := range []struct {
		raw    string
		reason Reason
		want   ChainQuery
	}{
		{"token=" + token, "", ChainQuery{Token: token}},
		{"token=" + token + "&attempt=3", "", ChainQuery{Token: token, Attempt: 3}},
		{"", ReasonTokenMissing, ChainQuery{}},
		{"token=", ReasonTokenMissing, ChainQuery{}},
		{"token=a+b", ReasonTokenMalformed, ChainQuery{Token: "a b"}},
		{"token=" + token + "&token=" + token, ReasonBadQuery, ChainQuery{}},
		{"token=%", ReasonBadQuery, ChainQuery{}},
	} {
		got, ref := ParseChainQuery(tc.raw)
		if (ref == nil) != (tc.reason == "") || (ref != nil && ref.Reason != tc.reason) || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v, %s", tc.raw, got, ref, tc.want, tc.reason)
		}
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		attempt  int
		rnd      float64
		want     int
		min, max time.Duration
	}{
		{0, 0.5, 5, 5 * time.Second, 5 * time.Minute},
		{1, 0.5, 10, 5 * time.Second, 5 * time.Minute},
		{3, 0.5, 40, 5 * time.Second, 5 * time.Minute},
		{6, 0.5, 300, 5 * time.Second, 5 * time.Minute}, // 320 capped
		{MaxAttempt, 0.5, 300, 5 * time.Second, 5 * time.Minute},
		{1 << 40, 0.5, 300, 5 * time.Second, 5 * time.Minute},
		{-5, 0.5, 5, 5 * time.Second, 5 * time.Minute},
		{0, 0, 4, 5 * time.Second, 5 * time.Minute},      // -20%
		{0, 0.9999, 6, 5 * time.Second, 5 * time.Minute}, // +20%
		{0, 0.5, 1, 0, 0}, // defaults: at least a second
		{0, 0.5, 1, 100 * time.Millisecond, time.Second},
		{2, 7, 20, 5 * time.Second, time.Minute}, // a bad rnd is taken as the middle
	} {
		if got := Backoff(tc.attempt, tc.min, tc.max, tc.rnd); got != tc.want {
			t.Errorf("Backoff(%d, %v, %v, %v) = %d, want %d", tc.attempt, tc.min, tc.max, tc.rnd, got, tc.want)
		}
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{
		"machine 4c4c4544 waits: pool (none)":  "machine 4c4c4544 waits: pool (none)",
		"${password} && shell || goto x; #cmt": "??password? ?? shell ?? goto x; ?cmt",
		"line one\nline two\r\n\ttabbed":       "line one line two tabbed",
		"  leading and trailing  ":             "leading and trailing",
		"caf\u00e9 \xff \"quoted\" 'single'":   "caf? ? ?quoted? ?single?",
		"`backtick` <tag> a\\b":                "?backtick? ?tag? a?b",
		"":                                     "",
	} {
		if got := Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
	long := Sanitize(strings.Repeat("x", 10*maxMessage))
	if len(long) > maxMessage+3 || !strings.HasSuffix(long, "...") {
		t.Errorf("long message not cut: %d bytes", len(long))
	}
}

func TestAssetBase(t *testing.T) {
	for _, tc := range []struct {
		template, channel, version, want string
		ok                               bool
	}{
		{"http://{channel}.release.flatcar-linux.net/amd64-usr/{version}", "stable", "4230.2.3", "http://stable.release.flatcar-linux.net/amd64-usr/4230.2.3", true},
		{"http://mirror.local/flatcar", "beta", "4344.1.0", "http://mirror.local/flatcar/beta/4344.1.0", true},
		{"http://mirror.local/flatcar/", "lts", "current", "http://mirror.local/flatcar/lts/current", true},
		{"http://mirror.local/flatcar", "stable", "1.0; shell", "", false},
		{"http://mirror.local/flatcar", "sta${x}ble", "1", "", false},
		{"http://mirror.local/flatcar", "", "1", "", false},
		{"http://mirror.local/flatcar", "-x", "1", "", false},
		{"ftp://mirror.local/flatcar", "stable", "1", "", false},
		{"http://mirror.local/flat car", "stable", "1", "", false},
		{"http://mirror.local/flatcar?x=1", "stable", "1", "", false},
	} {
		got, err := AssetBase(tc.template, tc.channel, tc.version)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("AssetBase(%q, %q, %q) = %q, %v", tc.template, tc.channel, tc.version, got, err)
		}
	}
}

func TestCheckBaseURL(t *testing.T) {
	for s, ok := range map[string]bool{
		"http://10.0.2.2:8081":            true,
		"https://boot.example/anvil":      true,
		"http://[fd00::1]:8081":           true,
		"http://boot.example/a b":         false,
		"http://boot.example/${uuid}":     false,
		"http://user:pw@boot.example":     false,
		"http://boot.example/?q=1":        false,
		"http://boot.example/#frag":       false,
		"boot.example:8081":               false,
		"http://boot.example/\"quoted\"":  false,
		"http://boot.example/caf\u00e9":   false,
		"http://boot.example/a&&shell":    false,
		"http://boot.example/a||goto x":   false,
		"javascript://boot.example/alert": false,
	} {
		if err := CheckBaseURL(s); (err == nil) != ok {
			t.Errorf("CheckBaseURL(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func TestChainScript(t *testing.T) {
	s := ChainScript(MachineURL(base, token, 0))
	want := "#!ipxe\n" +
		"echo anvil: asking the boot service what this machine boots\n"
	if !strings.HasPrefix(s, want) {
		t.Errorf("script starts %q", s)
	}
	line := "chain --replace --autofree " + base + "/ipxe?uuid=${uuid}&mac=${net0/mac:hexhyp}&token=" + token + " || goto unreachable\n"
	if !strings.Contains(s, line) {
		t.Errorf("no chain line %q in\n%s", line, s)
	}
	if err := Lint(s); err != nil {
		t.Errorf("lint: %v\n%s", err, s)
	}
}

func TestWaitAndRefusalScripts(t *testing.T) {
	wait := WaitScript([]string{"machine " + uuid + " is registered in organization acme and waits to be assigned to a pool"}, 40, 3, MachineURL(base, token, 4))
	for _, want := range []string{
		"echo anvil: machine " + uuid + " is registered in\n",
		"echo anvil: organization acme and waits to be assigned to a pool\n",
		"echo anvil: asking again in 40 seconds (attempt 4)\n",
		"sleep 40\n:retry\nchain --replace --autofree " + base + "/ipxe?uuid=${uuid}&mac=${net0/mac:hexhyp}&token=" + token + "&attempt=4 || goto unreachable\n",
		":unreachable\n", "sleep 30\ngoto retry\n",
	} {
		if !strings.Contains(wait, want) {
			t.Errorf("wait script lacks %q:\n%s", want, wait)
		}
	}
	// An attacker's token is URL-escaped in the retry URL, and the message
	// (which could quote input) is sanitized.
	evil := "x ${net0/ip} || shell\n#!ipxe"
	r := Refuse(ReasonTokenMalformed, "bad token %s", evil)
	s := RefusalScript(r, 5, 0, MachineURL(base, evil, 1))
	if strings.Contains(s, "${net0/ip}") || strings.Contains(s, "|| shell") {
		t.Errorf("input leaked into the script:\n%s", s)
	}
	for _, sc := range []string{wait, s} {
		if err := Lint(sc); err != nil {
			t.Errorf("lint: %v\n%s", err, sc)
		}
	}
}

func TestBootScript(t *testing.T) {
	asset, err := AssetBase("http://mirror.local/flatcar", "stable", "4230.2.3")
	if err != nil {
		t.Fatal(err)
	}
	s, err := BootScript(Boot{
		Messages:    []string{"machine " + uuid + " boots pool workers revision 3 (Flatcar stable 4230.2.3)"},
		AssetBase:   asset,
		IgnitionURL: IgnitionURL(base, uuid, "pb1.abc.def"),
		KernelArgs:  []string{"console=tty0", "console=ttyS0,115200n8"},
		RetryDelay:  10,
		RetryURL:    MachineURL(base, token, 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "kernel http://mirror.local/flatcar/stable/4230.2.3/flatcar_production_pxe.vmlinuz initrd=flatcar_production_pxe_image.cpio.gz flatcar.first_boot=1 " +
		"ignition.config.url=" + base + "/ignition?uuid=" + uuid + "&token=pb1.abc.def console=tty0 console=ttyS0,115200n8 || goto failed\n" +
		"initrd http://mirror.local/flatcar/stable/4230.2.3/flatcar_production_pxe_image.cpio.gz || goto failed\n" +
		"boot || goto failed\n:failed\n"
	if !strings.Contains(s, want) {
		t.Errorf("boot script lacks\n%s\nin\n%s", want, s)
	}
	if err := Lint(s); err != nil {
		t.Errorf("lint: %v\n%s", err, s)
	}
	for name, b := range map[string]Boot{
		"bad asset":    {AssetBase: "http://x/${y}", IgnitionURL: IgnitionURL(base, uuid, "t"), RetryURL: MachineURL(base, token, 1)},
		"bad arg":      {AssetBase: asset, IgnitionURL: IgnitionURL(base, uuid, "t"), KernelArgs: []string{"a b"}, RetryURL: MachineURL(base, token, 1)},
		"ignition arg": {AssetBase: asset, IgnitionURL: IgnitionURL(base, uuid, "t"), KernelArgs: []string{"ignition.config.url=http://evil"}},
		"raw ignition": {AssetBase: asset, IgnitionURL: "http://x/ignition?token=${x}"},
	} {
		if _, err := BootScript(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestLintCatchesInjection(t *testing.T) {
	for _, s := range []string{
		"#!ipxe\necho anvil: ${password}\n",
		"#!ipxe\necho hello\n",
		"#!ipxe\nshell\n",
		"#!ipxe\nchain http://x/${net0/ip} || goto retry\n:retry\n",
		"#!ipxe\nchain http://x/a || goto nowhere\n",
		"#!ipxe\nchain http://x/a\n",
		"#!ipxe\nsleep x\n",
		"echo anvil: no header\n",
	} {
		if err := Lint(s); err == nil {
			t.Errorf("Lint accepted %q", s)
		}
	}
}

// TestPreparedBootRetriesAsEveryScript: a boot script prepared once and
// completed per request retries exactly as the scripts the builder writes.
func TestPreparedBootRetriesAsEveryScript(t *testing.T) {
	p := preparedBoot(t)
	for _, delay := range []int{0, 1, 7, 300} {
		retry := MachineURL(base, token, 2)
		s, err := p.AppendScript(nil, IgnitionURL(base, uuid, "pb1.abc.def"), delay, retry)
		if err != nil {
			t.Fatal(err)
		}
		wait := WaitScript(nil, delay, 1, retry)
		tail := wait[strings.Index(wait, "\nsleep ")+1:]
		if !strings.HasSuffix(string(s), tail) || cap(s) != len(s) {
			t.Fatalf("delay %d: the boot script's retry differs from the builder's (or its size was guessed wrong, cap %d len %d):\n%s\nwant suffix:\n%s", delay, cap(s), len(s), s, tail)
		}
		again, _ := p.Script(IgnitionURL(base, uuid, "pb1.abc.def"), delay, retry)
		if again != string(s) {
			t.Fatal("Script and AppendScript differ")
		}
		if err := Lint(string(s)); err != nil {
			t.Fatalf("lint: %v\n%s", err, s)
		}
	}
}

// preparedBoot is a machine's boot script prepared from a local mirror.
func preparedBoot(t *testing.T) *PreparedBoot {
	t.Helper()
	asset, err := AssetBase("http://mirror.local/flatcar", "stable", "4230.2.3")
	if err != nil {
		t.Fatal(err)
	}
	p, err := PrepareBoot(Boot{Messages: []string{"machine " + uuid + " boots"}, AssetBase: asset, KernelArgs: []string{"console=tty0"}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
