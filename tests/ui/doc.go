// Package ui holds the browser end-to-end tests of the broker's dashboard
// (/ui): a real headless Chromium, driven from Go with chromedp, against the
// development stack (embedded JetStream, a worker with the demo handlers, the
// DLQ router and the HTTP broker).
//
// The tests need Debian's chromium package (/usr/bin/chromium; make deps,
// the first step of make test, installs it or names the command).
// SPOOL_CHROMIUM names another binary. Without a browser the tests fail,
// unless SPOOL_SKIP_BROWSER=1 is set, which skips them. A
// screenshot of the page under load is written to .artifacts/ui-dashboard.png
// at the repository root (git-ignored).
package ui
