package ipxe

import (
	"strings"
	"testing"
)

// FuzzParseMachineQuery: any query gives either a refusal or a query whose
// fields are canonical, and every script built from it passes Lint.
func FuzzParseMachineQuery(f *testing.F) {
	for _, s := range []string{
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token,
		"uuid=" + uuid + "&mac=52-54-00-12-34-56&token=" + token + "&attempt=3",
		"uuid=${uuid}&mac=${net0/mac:hexhyp}&token=x",
		"token=a%24%7Bpassword%7D&uuid=%00",
		"token=%&uuid=&mac=",
		"attempt=99999999999999999999",
		";;&&==",
		strings.Repeat("a=b&", 2000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, ref := ParseMachineQuery(raw)
		if ref == nil {
			if _, err := ParseUUID(q.UUID); err != nil || strings.ToLower(q.UUID) != q.UUID {
				t.Fatalf("accepted uuid %q", q.UUID)
			}
			if m, err := ParseMAC(q.MAC); err != nil || m != q.MAC {
				t.Fatalf("accepted mac %q", q.MAC)
			}
			if q.Token == "" || !tokenChars(q.Token) {
				t.Fatalf("accepted token %q", q.Token)
			}
		} else if ref.Reason == "" || ref.Message == "" {
			t.Fatalf("refusal without a reason: %+v", ref)
		}
		if q.Attempt < 0 || q.Attempt > MaxAttempt || len(q.Token) > MaxTokenLen {
			t.Fatalf("bounds: %+v", q)
		}
		retry := MachineURL(base, q.Token, q.Attempt+1)
		msg := "refused"
		if ref != nil {
			msg = ref.Message
		}
		for _, s := range []string{
			WaitScript([]string{msg, raw}, Backoff(q.Attempt, 0, 0, 0.5), q.Attempt, retry),
			ChainScript(MachineURL(base, q.Token, 0)),
		} {
			if err := Lint(s); err != nil {
				t.Fatalf("lint: %v\n%s", err, s)
			}
		}
	})
}

// FuzzScripts: whatever text is echoed and whatever token is carried, the
// scripts pass Lint (no ${...} or command separators from the input).
func FuzzScripts(f *testing.F) {
	f.Add("machine waits", "anvil_enroll_x_y", 3)
	f.Add("${password} || shell", "${net0/ip}&&x", 0)
	f.Add("\n#!ipxe\nshell\n", "a b\nc", -1)
	f.Add(strings.Repeat("long ", 200), strings.Repeat("t", 300), 1<<30)
	f.Fuzz(func(t *testing.T, msg, tok string, attempt int) {
		r := Refuse(ReasonInternal, "%s", msg)
		for _, s := range []string{
			RefusalScript(r, Backoff(attempt, 0, 0, 0.1), attempt, MachineURL(base, tok, attempt+1)),
			RefusalScript(r, 5, attempt, ChainURL(base, tok, attempt+1)),
			ChainScript(MachineURL(base, tok, attempt)),
		} {
			if err := Lint(s); err != nil {
				t.Fatalf("lint: %v\n%s", err, s)
			}
		}
		if b, err := BootScript(Boot{Messages: []string{msg}, AssetBase: "http://m/f/stable/1", IgnitionURL: IgnitionURL(base, msg, tok),
			RetryDelay: attempt, Attempt: attempt, RetryURL: MachineURL(base, tok, attempt)}); err == nil {
			if err := Lint(b); err != nil {
				t.Fatalf("lint: %v\n%s", err, b)
			}
		}
		// A token appended in place (what signing appends, or anything
		// else) makes a script that lints, or none.
		if p, err := PrepareBoot(Boot{Messages: []string{msg}, AssetBase: "http://m/f/stable/1"}); err == nil {
			b, err := p.AppendBoot(nil, base, msg, func(b []byte) []byte { return append(b, tok...) }, attempt, MachineURL(base, tok, attempt))
			if err == nil {
				if err := Lint(string(b)); err != nil {
					t.Fatalf("lint: %v\n%s", err, b)
				}
			}
		}
	})
}
