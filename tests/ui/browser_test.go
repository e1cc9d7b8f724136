package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// findChromium returns the browser binary: $SPOOL_CHROMIUM, else chromium
// on the PATH (Debian's package), else chromium-browser.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SPOOL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SPOOL_SKIP_BROWSER") == "1" {
		t.Skip("no chromium and SPOOL_SKIP_BROWSER=1: browser tests skipped")
	}
	t.Fatal("chromium not found: install Debian's chromium package (make deps says how), " +
		"set SPOOL_CHROMIUM to a Chromium binary, or set SPOOL_SKIP_BROWSER=1 to skip the browser tests")
	return ""
}

// browser is one headless Chromium tab and the URLs the page requested.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	requests []string
}

// startBrowser starts headless Chromium with a new empty profile and the
// flags that keep it off the network (no background networking, component
// updates, sync or QUIC). The browser stops at the end of the test.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	path := findChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1400),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
	)
	// Not t.Context(): it ends before cleanups run, and the browser must
	// be stopped by the cleanup below, in order, for goleak.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancel := chromedp.NewContext(allocCtx,
		chromedp.WithLogf(t.Logf),
		chromedp.WithListener(func(ev any) {
			if e, ok := ev.(*network.EventRequestWillBeSent); ok && e.Request != nil {
				b.mu.Lock()
				b.requests = append(b.requests, e.Request.URL)
				b.mu.Unlock()
			}
		}))
	t.Cleanup(func() {
		if err := chromedp.Cancel(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("closing the browser: %v", err)
		}
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it gets no timeout of its own.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	b.ctx = ctx
	return b
}

// do runs actions with a deadline.
func (b *browser) do(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
	}
}

// press clicks the first element matching the CSS selector as a user
// would, once it is rendered and not covered (by a modal dialog, say).
// Unlike chromedp.Click, which measures the element and then sends mouse
// events in separate round trips, it measures, hit-tests and clicks in one
// JavaScript turn: the live page re-renders every second, and a panel
// above the target growing between the measurement and the click made a
// mouse click land on something else (a purge whose confirmation never
// opened).
func press(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => {
  const el = document.querySelector(`+jsString(sel)+`);
  if (!el) return false;
  el.scrollIntoView({ block: "center" });
  const r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return false;
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  if (!hit || !(el.contains(hit) || hit.contains(el) || el.parentElement.contains(hit))) return false;
  if (typeof el.click === "function") el.click();
  else el.dispatchEvent(new MouseEvent("click", { bubbles: true, cancelable: true, view: window, clientX: x, clientY: y }));
  return true;
})()`, chromedp.WithPollingInterval(50*time.Millisecond))
}

// waitJS waits until the JavaScript expression is truthy, checking every
// 50ms until timeout.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.t.Fatalf("waiting %s for %s (%s): %v\npage: %s", timeout, what, expr, err, b.pageText())
	}
}

// eval evaluates expr and decodes its value into T.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// pageText is the visible text of the page, for failure messages.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	if len(s) > 4000 {
		s = s[:4000] + "…"
	}
	return s
}

// requested returns the URLs the page asked for so far.
func (b *browser) requested() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// screenshot saves a full-page PNG under the repository's .artifacts folder
// and returns its path.
func (b *browser) screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(repoRoot(b.t), ".artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// repoRoot is the nearest folder above the working directory holding
// go.work.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.work above %s", dir)
		}
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(b)
}

// onlyFrom reports the URLs that do not start with origin (data: URLs
// stay in the page).
func onlyFrom(urls []string, origin string) []string {
	var out []string
	for _, u := range urls {
		if !strings.HasPrefix(u, origin+"/") && !strings.HasPrefix(u, "data:") {
			out = append(out, u)
		}
	}
	return out
}
