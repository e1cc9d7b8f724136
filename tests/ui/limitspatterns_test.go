package ui_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A pattern rule with a key pattern is set from the limits form and
// listed as a pattern; a type it governs that runs a task shows in a row
// of its own "via" the pattern, with its slot counted; a bad pattern is
// refused with the reason; the explain form tells which rule governs a
// type and a key's limits; the pattern rule is removed again.
func TestDashboardPatternLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st := startStack(t, ctx, 2)
	b := startBrowser(t)
	b.logIn(st.BrokerURL)
	b.waitJS("the page to go live", `document.querySelector("#conn").textContent === "live"`, 10*time.Second)
	b.do("setting a pattern limit", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#limits-type"), "demo.*"),
		chromedp.SendKeys(chromedp.CSS("#limits-concurrency"), "1"),
		chromedp.SendKeys(chromedp.CSS("#limits-keys"), "vip-*=5,100/1s; free-*=1"),
		press(`#limits-form button[type="submit"]`),
	)
	row := `document.querySelector('#limits-list tr[data-type="demo.*"]')`
	b.waitJS("the pattern listed", `(`+row+`?.textContent || "").includes("(pattern") && `+row+`.querySelector(".key-limits").textContent === "free-*: concurrency 1, rate —; vip-*: concurrency 5, rate 100/1s"`, 10*time.Second)
	post(t, ctx, st.BrokerURL+"/v1/tasks", `{"type":"demo.sleep","id":"ui-pattern-1","payload":{"ms":4000}}`)
	via := `document.querySelector('#limits-list tr[data-type="demo.sleep"][data-via="demo.*"]')`
	b.waitJS("the type it governs, via the pattern", `(`+via+`?.textContent || "").includes("via demo.*") && `+via+`.textContent.includes("1 / 1") && `+via+`.querySelector("button") === null`, 10*time.Second)
	b.do("explaining a type and key", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#limits-explain-type"), "demo.echo"),
		chromedp.SendKeys(chromedp.CSS("#limits-explain-key"), "vip-7"),
		press(`#limits-explain button[type="submit"]`),
	)
	b.waitJS("the explanation", `document.querySelector("#limits-explain-output").textContent === "demo.echo: governed by the pattern rule demo.*; key vip-7: concurrency 5, rate 100/1s (key pattern vip-*)"`, 10*time.Second)
	b.do("explaining a type no rule governs", 10*time.Second,
		chromedp.Evaluate[chromedp.Void](`document.querySelector("#limits-explain-type").value = "other"; document.querySelector("#limits-explain-key").value = ""; 0`),
		press(`#limits-explain button[type="submit"]`),
	)
	b.waitJS("no rule", `document.querySelector("#limits-explain-output").textContent === "other: no rule matches; its tasks run unlimited."`, 10*time.Second)
	b.do("setting a bad pattern", 10*time.Second,
		chromedp.SendKeys(chromedp.CSS("#limits-type"), "demo.>.x"),
		chromedp.SendKeys(chromedp.CSS("#limits-concurrency"), "1"),
		press(`#limits-form button[type="submit"]`),
	)
	b.waitJS("the bad pattern refused", `document.querySelector("#limits-message").textContent.includes("only the last token may be >")`, 10*time.Second)
	// The table is redrawn every 2s: click the button of the row there now.
	b.do("removing the pattern", 10*time.Second, chromedp.Evaluate[chromedp.Void](row+`.querySelector("button").click(); 0`))
	b.waitJS("the removal confirmation", `document.querySelector("#confirm").open`, 5*time.Second)
	b.do("confirming the removal", 10*time.Second, press("#confirm-ok"))
	b.waitJS("the pattern gone", row+` === null`, 10*time.Second)
}
