package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxScriptSteps bounds the commands a script may run without sleeping or
// fetching anything, so a script that loops on itself cannot spin a core.
const maxScriptSteps = 10000

// maxBody bounds what is read of a script or an Ignition config.
const maxBody = 8 << 20

// kernelBoot is what a boot script handed to the kernel: the kernel image
// and its command line. The images are never downloaded.
type kernelBoot struct {
	Kernel      string
	Args        []string
	IgnitionURL string
}

// firmware plays iPXE from power-on until a boot script boots a kernel. It
// returns only then, or with ctx's error.
func (m *Machine) firmware(ctx context.Context) (*kernelBoot, error) {
	chain := m.fleet.cfg.BootURL + "/boot.ipxe?token=" + url.QueryEscape(m.fleet.cfg.EnrollmentToken)
	for {
		body, err := m.fetchScript(ctx, chain)
		if err == nil {
			var kb *kernelBoot
			kb, err = m.interpret(ctx, body)
			if kb != nil || ctx.Err() != nil {
				return kb, ctx.Err()
			}
			if err == nil {
				err = errors.New("the script ended without booting")
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Real firmware would fall through to the next boot device; the
		// simulated machine power-cycles and tries again.
		m.console(fmt.Sprintf("iPXE: %v; power-cycling", err))
		m.setPhase(PhaseWaiting, "")
		if !m.wait(ctx, DefaultUnreachableWait) {
			return nil, ctx.Err()
		}
	}
}

// interpret runs an iPXE script the way iPXE does for the commands anvil's
// scripts use: echo, sleep, labels, goto, chain, kernel, initrd, boot, with
// "|| goto label" on failure. Other commands (dhcp, set, …) succeed without
// doing anything. It returns the kernel once a boot succeeds, or nil when
// the script ends or fails without booting.
func (m *Machine) interpret(ctx context.Context, script string) (*kernelBoot, error) {
	lines, labels, err := parseScript(script)
	if err != nil {
		return nil, err
	}
	var kernel *kernelBoot
	steps := 0
	for pc := 0; pc < len(lines); {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if steps++; steps > maxScriptSteps {
			return nil, errors.New("the script loops without waiting")
		}
		cmd, onFail := splitFallback(lines[pc])
		f := strings.Fields(cmd)
		if len(f) == 0 || strings.HasPrefix(f[0], ":") || strings.HasPrefix(f[0], "#") {
			pc++
			continue
		}
		var failure error
		switch f[0] {
		case "echo":
			m.console(strings.TrimSpace(strings.TrimPrefix(cmd, "echo")))
		case "sleep":
			secs := 0
			if len(f) > 1 {
				secs, _ = strconv.Atoi(f[1])
			}
			if kernel == nil {
				m.setPhase(PhaseWaiting, "")
			}
			if !m.wait(ctx, time.Duration(secs)*time.Second) {
				return nil, ctx.Err()
			}
			steps = 0
		case "goto":
			if len(f) < 2 {
				failure = errors.New("goto without a label")
				break
			}
			target, ok := labels[f[1]]
			if !ok {
				failure = fmt.Errorf("no label %q", f[1])
				break
			}
			pc = target
			continue
		case "chain":
			u := lastArg(f[1:])
			body, err := m.fetchScript(ctx, m.expand(u))
			if err != nil {
				failure = err
				break
			}
			// chain --replace: the new script takes over.
			if lines, labels, err = parseScript(body); err != nil {
				failure = err
				break
			}
			kernel, pc, steps = nil, 0, 0
			continue
		case "kernel", "imgexec":
			args := nonOptions(f[1:])
			if len(args) == 0 {
				failure = errors.New("kernel without an image")
				break
			}
			kb := &kernelBoot{Kernel: m.expand(args[0])}
			for _, a := range args[1:] {
				a = m.expand(a)
				kb.Args = append(kb.Args, a)
				if v, ok := strings.CutPrefix(a, "ignition.config.url="); ok {
					kb.IgnitionURL = v
				}
			}
			kernel = kb
			m.console("iPXE: loaded kernel " + kb.Kernel)
		case "initrd", "imgfetch", "module":
			// The Flatcar images live on the internet; nothing is fetched.
		case "boot":
			if kernel == nil {
				failure = errors.New("boot without a kernel")
				break
			}
			return kernel, nil
		case "exit":
			return nil, errors.New("the script exited")
		}
		if failure != nil {
			m.console("iPXE: " + failure.Error())
			if onFail == "" {
				return nil, failure
			}
			target, ok := labels[onFail]
			if !ok {
				return nil, fmt.Errorf("%v, and no label %q", failure, onFail)
			}
			pc = target
			continue
		}
		pc++
	}
	return nil, nil
}

// parseScript splits a script into lines and finds its labels.
func parseScript(script string) ([]string, map[string]int, error) {
	if !strings.HasPrefix(script, "#!ipxe") {
		return nil, nil, errors.New("not an iPXE script")
	}
	lines := strings.Split(strings.ReplaceAll(script, "\r\n", "\n"), "\n")
	labels := map[string]int{}
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, ":"); ok && name != "" {
			labels[strings.Fields(name)[0]] = i
		}
	}
	return lines, labels, nil
}

// splitFallback splits "cmd || goto label" into cmd and label.
func splitFallback(line string) (cmd, label string) {
	cmd, rest, ok := strings.Cut(line, "||")
	if !ok {
		return line, ""
	}
	f := strings.Fields(rest)
	if len(f) == 2 && f[0] == "goto" {
		return cmd, f[1]
	}
	return cmd, ""
}

func nonOptions(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			out = append(out, a)
		}
	}
	return out
}

func lastArg(args []string) string {
	a := nonOptions(args)
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

// expand substitutes the iPXE settings anvil's scripts use; any other
// setting expands to nothing, as in iPXE.
func (m *Machine) expand(s string) string {
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return s
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return s
		}
		var v string
		switch s[i+2 : i+j] {
		case "uuid":
			v = m.uuid
		case "net0/mac:hexhyp", "mac:hexhyp":
			v = strings.ReplaceAll(m.mac, ":", "-")
		case "net0/mac", "mac":
			v = m.mac
		}
		s = s[:i] + v + s[i+j+1:]
	}
}

// fetchScript GETs a script as iPXE does: anything but a 2xx answer fails.
func (m *Machine) fetchScript(ctx context.Context, rawURL string) (string, error) {
	if strings.Contains(rawURL, "/ipxe?") {
		m.ipxeRequests.Add(1)
	}
	body, status, err := m.get(ctx, rawURL)
	if err != nil {
		return "", err
	}
	if status/100 != 2 {
		return "", fmt.Errorf("%s: HTTP %d", redactURL(rawURL), status)
	}
	return string(body), nil
}

// get fetches a URL with the shared client, bounded in time and size.
func (m *Machine) get(ctx context.Context, rawURL string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("bad URL %s", redactURL(rawURL))
	}
	req.Header.Set("User-Agent", "iPXE/1.21.1 (anvil-sim)")
	resp, err := m.fleet.cfg.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, token included
		}
		return nil, 0, fmt.Errorf("GET %s: %w", redactURL(rawURL), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", redactURL(rawURL), err)
	}
	return body, resp.StatusCode, nil
}

// redactURL drops the query (tokens) from a URL for logs and messages.
func redactURL(rawURL string) string {
	u, _, _ := strings.Cut(rawURL, "?")
	return u
}
