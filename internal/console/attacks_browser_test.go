package console

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// runChromium navigates to start, clicks the officer at the loopback
// provider and answers the location two seconds after the continue page.
func runChromium(t *testing.T, start string) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium (Debian's package chromium; .ci/run installs it)")
		}
		t.Skip("no chromium: apt-get install chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath("/usr/bin/chromium"), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx))
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	require.NoError(t, chromedp.Do(tctx, chromedp.Navigate(start), chromedp.WaitVisible(chromedp.CSS("#person-officer"))))
	require.NoError(t, chromedp.Do(tctx, chromedp.Click(chromedp.CSS("#person-officer"))))
	var loc string
	for range 50 {
		time.Sleep(200 * time.Millisecond)
		l, err := chromedp.Run(tctx, chromedp.Location())
		if err == nil {
			loc = l
		}
		if loc != "" && !strings.Contains(loc, "/auth/") && !strings.Contains(loc, "/authorize") {
			break
		}
	}
	return loc
}
