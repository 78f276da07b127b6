package page_test

import (
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestInboxScreenshot writes docs/inbox.png, the inbox with an entry in
// each state (expired ones shown) and the toast of a quick add, into the
// folder CONVEYOR_SCREENSHOTS names, as TestScreenshots does; without it
// the test is skipped. From the repository's root:
//
//	CONVEYOR_SCREENSHOTS=$PWD/docs go test -run TestInboxScreenshot ./adapters/httpapi/internal/page/
func TestInboxScreenshot(t *testing.T) {
	if os.Getenv("CONVEYOR_SCREENSHOTS") == "" {
		t.Skip("set CONVEYOR_SCREENSHOTS to the folder the screenshots go to (docs/)")
	}
	bin := chromium(t)
	w := startInboxWorker(t)
	defer w.stop()
	ctx, closeBrowser := browser(t, bin)
	defer closeBrowser()
	do(t, ctx, "open the inbox", 30*time.Second,
		chromedp.EmulateViewport(1200, 880),
		chromedp.Navigate(w.URL+"/ui/#/inbox?expired=show"),
		chromedp.WaitVisible(css(entryRow("inbox_2026-11-28_expired01", "expired"))),
		chromedp.WaitVisible(css(`#live[data-mode="stream"]`)),
		chromedp.SetValue(css(`#inbox-target`), "notes/viola.pp.ua/sonata-1"),
		chromedp.Click(css(`[data-testid="inbox-add"]`)),
		chromedp.WaitVisible(css(`[data-testid="toast"]`)),
		chromedp.Poll[chromedp.Void](`[...document.querySelectorAll('#inbox-body tr')].some(r => r.textContent.includes('sonata-1'))`, chromedp.WithPollingInterval(50*time.Millisecond)),
		chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`),
	)
	screenshot(t, ctx, "inbox.png")
}
